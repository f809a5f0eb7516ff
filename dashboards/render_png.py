"""Render the dashboards' key panels as PNG pictures from a demo run (docs/img/).

Runs the demo stack (simulated SGLang in the risky configuration, the sidecar with its tap,
probe files and a real Prometheus), drives the demo's own load (``exporter.demo.drive``), then
draws what on-call would see from Prometheus range queries with matplotlib: the queries are the
dashboards' own (from ``dashboards.queries``), so a picture cannot drift from the panel it
shows. The demo's terminal summary is drawn too. The same run's numbers and the pictures'
digests go to docs/img/demo-run.json, and README.md's demo paragraph is rewritten from it
(``dashboards.readme``, whose ``--check`` keeps the three in step). Needs the `prometheus`
binary and matplotlib (dev extra).

    python -m dashboards.render_png [--seconds 180] [--out docs/img]
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import json
import time
import urllib.parse
from pathlib import Path
from typing import Any

from dashboards import readme
from exporter.demo import (
    SCREEN,
    AlertLog,
    DemoOptions,
    LoadState,
    Snapshot,
    drive,
    read_snapshot,
    render,
    start_stack,
)
from exporter.units import GIB

PICTURES = (
    "demo-terminal.png",
    "memory-overcommit.png",
    "tool-call-corruption.png",
    "hicache-transfer-gap.png",
)

BUCKETS = ("1", "4", "8", "16", "32", "64", "128")


def _query_range(port: int, expr: str, start: float, end: float, step: float = 2) -> list[dict]:
    qs = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", f"/api/v1/query_range?{qs}")
    data = json.loads(conn.getresponse().read())
    return data["data"]["result"] if data.get("status") == "success" else []


def _query(port: int, expr: str) -> list[dict]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/api/v1/query?" + urllib.parse.urlencode({"query": expr}))
    data = json.loads(conn.getresponse().read())
    return data["data"]["result"] if data.get("status") == "success" else []


def _series(
    ax: Any,
    results: list[dict],
    label_key: str | None,
    t0: float,
    scale: float = 1,
    prefix: str = "",
) -> None:
    for r in results:
        xs = [float(t) - t0 for t, _ in r["values"]]
        ys = [float(v) / scale for _, v in r["values"]]
        name = r["metric"].get(label_key, "") if label_key else ""
        ax.plot(xs, ys, label=f"{prefix}{name}" if (label_key or prefix) else None)


async def _load(stack: Any, opts: DemoOptions, seconds: float) -> None:
    """The demo's load for ``seconds``, then let the in-flight answers finish."""
    stop = asyncio.Event()
    task = asyncio.create_task(drive(stack, opts, LoadState(), stop))
    await asyncio.sleep(seconds)
    stop.set()
    await asyncio.wait_for(task, timeout=120)


def _settle(prom: int, after: float, timeout: float = 30) -> None:
    """Until Prometheus has scraped the sidecar after ``after`` (the load's end)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = _query(prom, 'timestamp(up{job="dsv4-sidecar"})')
        if rows and float(rows[0]["value"][1]) > after:
            return
        time.sleep(0.5)


def _first_firing(prom: int, t0: float, t1: float) -> dict[str, float]:
    """Alert name -> seconds from the start of the load until it first fired."""
    out: dict[str, float] = {}
    for r in _query_range(prom, 'ALERTS{alertstate="firing"}', t0, t1):
        first = min(float(t) for t, _ in r["values"]) - t0
        name = r["metric"]["alertname"]
        out[name] = round(min(out.get(name, first), first), 1)
    return out


def record(snap: Snapshot, seconds: float, fired: dict[str, float], out: Path) -> dict[str, Any]:
    """What the README quotes from this run, with the digests of the pictures drawn from it."""
    return {
        "seconds": round(seconds),
        "overcommit_bytes": snap.overcommit,
        "reserve_bytes": snap.reserve,
        "by_concurrency": snap.by_bucket,
        "by_length": snap.by_length,
        "first_firing_s": dict(sorted(fired.items())),
        "pictures": {name: readme.digest(out / name) for name in PICTURES},
    }


def main(argv: list[str] | None = None) -> int:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--seconds", type=float, default=180.0, help="load duration")
    ap.add_argument("--out", type=Path, default=Path("docs/img"))
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    opts = DemoOptions()
    stack = start_stack(opts)
    if "prometheus" not in stack.ports:
        stack.stop()
        raise SystemExit("prometheus is not installed: apt-get install prometheus")
    prom = stack.ports["prometheus"]
    t0 = time.time()
    try:
        asyncio.run(_load(stack, opts, args.seconds))
        t1 = time.time()
        _settle(prom, t1)
        snap = read_snapshot(stack)
        fired = _first_firing(prom, t0, t1)
        log = AlertLog()
        log.first_fired.update(fired)
        _render_terminal(plt, stack, snap, args.out, t1 - t0, log)
        _render_memory(plt, prom, t0, t1, args.out)
        _render_corruption(plt, prom, t0, t1, args.out)
        _render_hicache(plt, prom, t0, t1, args.out)
        run = record(snap, t1 - t0, fired, args.out)
    finally:
        stack.stop()
    (args.out / readme.RECORD.name).write_text(json.dumps(run, indent=1) + "\n", encoding="utf-8")
    print(f"wrote pictures and {readme.RECORD.name} to {args.out}")
    if args.out.resolve() == readme.IMG:
        return readme.main([])
    return 0


def _render_terminal(
    plt: Any, stack: Any, snap: Snapshot, out: Path, elapsed: float, log: AlertLog
) -> None:
    from rich.console import Console

    # The live screen at the size it is laid out for (exporter.demo.SCREEN).
    console = Console(record=True, width=SCREEN[0], file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(render(stack, snap, 96, elapsed, log))
    text = console.export_text()
    lines = text.splitlines()
    fig = plt.figure(figsize=(9.6, 0.19 * len(lines) + 0.4), facecolor="#1e1e1e")
    fig.text(
        0.01,
        0.99,
        text,
        family="DejaVu Sans Mono",
        fontsize=8.5,
        color="#e8e8e8",
        va="top",
        ha="left",
    )
    fig.savefig(out / "demo-terminal.png", dpi=110, facecolor=fig.get_facecolor())
    plt.close(fig)


def _render_memory(plt: Any, prom: int, t0: float, t1: float, out: Path) -> None:
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    ax = axes[0]
    _series(
        ax,
        _query_range(prom, "max(dsv4_kv_pool_overcommit_bytes)", t0, t1),
        None,
        t0,
        GIB,
        "over-commit",
    )
    _series(
        ax, _query_range(prom, "max(dsv4_memory_reserve_bytes)", t0, t1), None, t0, GIB, "reserve"
    )
    ax.set(title="KV over-commit vs reserve (worst rank)", xlabel="s", ylabel="GiB")
    ax.legend()
    ax = axes[1]
    pools = _query(prom, 'dsv4_kv_pool_allocated_bytes{rank="0"}')
    planned = {
        r["metric"]["pool"]: float(r["value"][1])
        for r in _query(prom, 'dsv4_kv_pool_planned_bytes{rank="0"}')
    }
    names = [r["metric"]["pool"] for r in pools]
    alloc = [float(r["value"][1]) / GIB for r in pools]
    plan = [planned.get(n, 0) / GIB for n in names]
    xs = range(len(names))
    ax.bar([x - 0.2 for x in xs], plan, 0.4, label="planned")
    ax.bar([x + 0.2 for x in xs], alloc, 0.4, label="allocated")
    ax.set_xticks(list(xs), names, rotation=30, ha="right")
    ax.set(title="Planned vs allocated by pool (rank 0)", ylabel="GiB")
    ax.legend()
    ax = axes[2]
    _series(
        ax,
        _query_range(prom, 'dsv4_gpu_memory_free_bytes{rank="0"}', t0, t1),
        None,
        t0,
        GIB,
        "free",
    )
    _series(
        ax,
        _query_range(prom, 'dsv4_gpu_memory_used_bytes{rank="0"}', t0, t1),
        None,
        t0,
        GIB,
        "used",
    )
    ax.set(title="GPU memory, rank 0 (simulated NVML)", xlabel="s", ylabel="GiB")
    ax.legend()
    fig.suptitle("Memory & over-commit: bf16 index-K, legacy configurator (simulated)")
    fig.tight_layout()
    fig.savefig(out / "memory-overcommit.png", dpi=90)
    plt.close(fig)


def _render_corruption(plt: Any, prom: int, t0: float, t1: float, out: Path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(13, 4))
    window = f"{int(t1 - t0)}s"
    ax = axes[0]
    rates, labels = [], []
    for le in BUCKETS:
        bad = _query(
            prom,
            f'sum(increase(dsv4_dsml_samples_total{{verdict="degenerate",'
            f'concurrency_le="{le}"}}[{window}]))',
        )
        total = _query(
            prom, f'sum(increase(dsv4_dsml_samples_total{{concurrency_le="{le}"}}[{window}]))'
        )
        n = float(total[0]["value"][1]) if total else 0.0
        if n >= 1:
            rates.append(100 * float(bad[0]["value"][1]) / n if bad else 0.0)
            labels.append(f"≤{le}")
    ax.bar(labels, rates, color="#c0392b")
    ax.set(
        title="Degenerate tool calls by concurrency (fine at 1, broken at 60)",
        xlabel="concurrent sessions",
        ylabel="% degenerate",
    )
    ax = axes[1]
    _series(
        ax,
        _query_range(
            prom,
            'sum by (source) (rate(dsv4_dsml_samples_total{verdict="degenerate"}[30s])) / '
            "sum by (source) (rate(dsv4_dsml_samples_total[30s]))",
            t0,
            t1,
        ),
        "source",
        t0,
        0.01,
    )
    ax.set(title="Degenerate ratio over time (load ramps 1 → 96)", xlabel="s", ylabel="%")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "tool-call-corruption.png", dpi=90)
    plt.close(fig)


def _render_hicache(plt: Any, prom: int, t0: float, t1: float, out: Path) -> None:
    fig, axes = plt.subplots(1, 2, figsize=(13, 4))
    ax = axes[0]
    _series(
        ax,
        _query_range(prom, "sum by (gated) (rate(dsv4_hicache_index_k_reads_total[30s]))", t0, t1),
        "gated",
        t0,
        1,
        "gated=",
    )
    ax.set(title="Index-K reads during HiCache loads", xlabel="s", ylabel="reads/s")
    ax.legend()
    ax = axes[1]
    buckets = _query(prom, "sum by (le) (dsv4_hicache_transfer_gap_seconds_bucket)")
    pts = sorted((float(r["metric"]["le"]), float(r["value"][1])) for r in buckets)
    prev, labels, counts = 0.0, [], []
    for le, cum in pts:
        labels.append("+Inf" if le == float("inf") else f"≤{le * 1e6:g}µs")
        counts.append(cum - prev)
        prev = cum
    ax.bar(labels, counts)
    ax.tick_params(axis="x", rotation=45)
    ax.set(title="Transfer gap of ungated reads", ylabel="reads")
    fig.tight_layout()
    fig.savefig(out / "hicache-transfer-gap.png", dpi=90)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
