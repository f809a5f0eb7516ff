"""The demo's live screen: what it reads (the sidecar's /metrics, Prometheus' alerts), how it
draws it (rich), and the loop that runs the stack, the load and the screen together until
Ctrl-C or --duration."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from prometheus_client.parser import text_string_to_metric_families

from exporter.demo.stack import (
    DEMO_KNOBS,
    DEMO_WINDOWS,
    DemoOptions,
    LoadState,
    Stack,
    drive,
    http_get,
    start_stack,
    urls,
)
from exporter.metrics import catalog as m
from exporter.thresholds import DEFAULTS, seconds
from exporter.units import GIB

if TYPE_CHECKING:
    from rich.console import Console, RenderableType
    from rich.table import Table


@dataclass
class Snapshot:
    overcommit: dict[str, float] = field(default_factory=dict)
    reserve: dict[str, float] = field(default_factory=dict)
    by_bucket: dict[str, list[float]] = field(default_factory=dict)  # le -> [total, bad]
    by_length: dict[str, list[float]] = field(default_factory=dict)  # tokens le -> [total, bad]
    ungated: float = 0.0
    gated: float = 0.0
    gap_sum: float = 0.0
    gap_count: float = 0.0
    alerts: list[tuple[str, str, str]] = field(default_factory=list)  # name, severity, state
    deployment: dict[str, str] = field(default_factory=dict)


def read_snapshot(stack: Stack) -> Snapshot:
    snap = Snapshot()
    with contextlib.suppress(OSError):
        status, body = http_get(stack.ports["sidecar"], "/metrics")
        if status == 200:
            for fam in text_string_to_metric_families(body.decode()):
                for s in fam.samples:
                    _absorb(snap, s.name, s.labels, s.value)
    if "prometheus" in stack.ports:
        with contextlib.suppress(OSError, ValueError, KeyError):
            status, body = http_get(stack.ports["prometheus"], "/api/v1/alerts")
            for a in json.loads(body)["data"]["alerts"]:
                labels = a["labels"]
                snap.alerts.append(
                    (labels.get("alertname", "?"), labels.get("severity", ""), a.get("state", "?"))
                )
    return snap


def _absorb(snap: Snapshot, name: str, labels: dict[str, str], value: float) -> None:
    if name == m.KV_POOL_OVERCOMMIT.name:
        snap.overcommit[labels["rank"]] = value
    elif name == m.MEMORY_RESERVE.name:
        snap.reserve[labels["rank"]] = value
    elif name == m.DSML_SAMPLES.name:
        b = snap.by_bucket.setdefault(labels["concurrency_le"], [0.0, 0.0])
        b[0] += value
        if labels["verdict"] == "degenerate":
            b[1] += value
    elif name == m.DSML_LENGTH_SAMPLES.name:
        b = snap.by_length.setdefault(labels["output_tokens_le"], [0.0, 0.0])
        b[0] += value
        if labels["verdict"] == "degenerate":
            b[1] += value
    elif name == m.HICACHE_INDEX_K_READS.name:
        if labels.get("gated") == "false":
            snap.ungated += value
        else:
            snap.gated += value
    elif name == m.HICACHE_GAP.name + "_sum":
        snap.gap_sum += value
    elif name == m.HICACHE_GAP.name + "_count":
        snap.gap_count += value
    elif name == m.DEPLOYMENT_INFO.name:
        snap.deployment = dict(labels)


def render(stack: Stack, snap: Snapshot, level: int | None, elapsed: float) -> RenderableType:
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    dep = snap.deployment
    head = Text.assemble(
        ("dsv4-sidecar demo (simulated SGLang + GPUs)  ", "bold"),
        f"index-K {dep.get('index_k_dtype', '?')}, "
        f"HiCache {'on' if dep.get('hicache') == 'true' else 'off'}, "
        f"{dep.get('configurator', '?')} configurator  ·  load: "
        f"{level if level is not None else '-'} sessions  ·  {elapsed:.0f}s",
    )
    mem = Table(title="KV over-commit per rank", title_justify="left")
    for col in ("rank", "over-commit GiB", "reserve GiB", "share of reserve"):
        mem.add_column(col, justify="right")
    for rank in sorted(snap.overcommit, key=int):
        over, res = snap.overcommit[rank], snap.reserve.get(rank)
        share = f"{over / res:.0%}" if res else "-"
        mem.add_row(
            rank,
            f"{over / GIB:.2f}",
            f"{res / GIB:.1f}" if res else "-",
            share,
            style="red" if over > DEFAULTS.kv_overcommit_warning_bytes else None,
        )
    corr = _rate_table(
        "Tool-call corruption by concurrency (tap, canary, ingest)",
        "concurrency ≤",
        snap.by_bucket,
        ("1", "4", "8", "16", "32", "64", "128", "+Inf"),
    )
    by_len = _rate_table(
        "Tool-call corruption by output length (tokens)",
        "output tokens ≤",
        snap.by_length,
        ("256", "1024", "4096", "16384", "+Inf"),
    )
    gap = (
        f", mean transfer gap {snap.gap_sum / snap.gap_count * 1e6:.0f} µs"
        if snap.gap_count
        else ""
    )
    probe = Text(
        f"HiCache index-K reads: {snap.gated:.0f} gated, {snap.ungated:.0f} ungated{gap}"
        + ("  ← the transfer race is live" if snap.ungated else ""),
        style="red" if snap.ungated else "",
    )
    alerts = Text(
        "Alerts: "
        + (
            alert_summary(snap.alerts)
            or ("none yet" if "prometheus" in stack.ports else "Prometheus not running")
        )
    )
    return Group(head, mem, corr, by_len, probe, alerts, Text(windows_note(stack), style="dim"))


def _rate_table(
    title: str, bucket: str, rows: dict[str, list[float]], order: tuple[str, ...]
) -> Table:
    """Graded, degenerate and their rate per bucket (in ``order``; empty buckets left out)."""
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for col in (bucket, "graded", "degenerate", "rate"):
        table.add_column(col, justify="right")
    for le in order:
        total, bad = rows.get(le, [0.0, 0.0])
        if total:
            rate = bad / total
            table.add_row(
                le,
                f"{total:.0f}",
                f"{bad:.0f}",
                f"{rate:.1%}",
                style="red" if rate > DEFAULTS.corruption_warning_ratio else None,
            )
    return table


def alert_summary(alerts: list[tuple[str, str, str]]) -> str:
    """One entry per alert name, its rules' states by severity: ``A (firing)`` when every rule
    of it that is active fires, else ``A (warning firing, critical pending)``."""
    states: dict[str, dict[str, str]] = {}
    for name, severity, state in alerts:
        by_sev = states.setdefault(name, {})
        if by_sev.get(severity) != "firing":
            by_sev[severity] = state
    out = []
    for name in sorted(states):
        by_sev = states[name]
        if len(set(by_sev.values())) == 1:
            out.append(f"{name} ({next(iter(by_sev.values()))})")
        else:
            out.append(f"{name} ({', '.join(f'{s} {st}' for s, st in sorted(by_sev.items()))})")
    return ", ".join(out)


def _span(suffix: str) -> str:
    """The shortest and longest of DEMO_KNOBS' durations whose names end in ``suffix``."""
    values = [str(v) for k, v in DEMO_KNOBS.items() if k.endswith(suffix)]
    ordered = sorted(values, key=seconds)
    return ordered[0] if ordered[0] == ordered[-1] else f"{ordered[0]}-{ordered[-1]}"


def windows_note(stack: Stack) -> str:
    """What the screen says about the alert rules in force: the demo's are not production's."""
    if "prometheus" not in stack.ports:
        return "Alert windows: no Prometheus, no alerts."
    if stack.alert_windows == DEMO_WINDOWS:
        return (
            f"Alert windows: DEMO (for: {_span('_for')}, windows {_span('_window')}) so alerts "
            "fire within three minutes; production rules (alerts/dsv4-sidecar.rules.yaml) wait "
            "1-30 minutes."
        )
    return "Alert windows: production (for: 1-30 minutes): most alerts stay pending in a demo."


async def run_demo(opts: DemoOptions, console: Console) -> int:
    from rich.live import Live

    stack = start_stack(opts)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    state = LoadState()
    t0 = time.monotonic()
    try:
        console.print(
            "[bold]dsv4-sidecar demo[/bold]: everything runs on 127.0.0.1; Ctrl-C stops it."
        )
        for line in urls(stack):
            console.print("  " + line)
        console.print(windows_note(stack))
        load = asyncio.create_task(drive(stack, opts, state, stop))
        deadline = t0 + opts.duration if opts.duration else float("inf")

        async def tick() -> RenderableType:
            snap = await asyncio.to_thread(read_snapshot, stack)
            return render(stack, snap, state.level, time.monotonic() - t0)

        if opts.live and console.is_terminal:
            with Live(await tick(), console=console, refresh_per_second=2) as live:
                while not stop.is_set() and time.monotonic() < deadline:
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(stop.wait(), timeout=1.0)
                    live.update(await tick())
        else:
            last = 0.0
            while not stop.is_set() and time.monotonic() < deadline:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=1.0)
                if time.monotonic() - last >= 10:
                    console.print(await tick())
                    last = time.monotonic()
        stop.set()
        console.print(await tick())
        await asyncio.wait_for(load, timeout=30)
    finally:
        stop.set()
        stack.stop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    console.print("demo stopped; every process it started has exited and its files are removed.")
    return 0
