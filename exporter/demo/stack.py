"""`make demo` / `dsv4-sidecar demo`: the whole picture on 127.0.0.1, no GPU needed.

Starts the simulated SGLang (by default a bf16 index-K, HiCache-on, legacy-configurator
deployment: both failures live), the sidecar against it with fake NVML, the tap and the probe
snapshots, a real Prometheus with the alert rules when its binary is available, and a load
generator that ramps concurrency through the tap. A live terminal summary shows per-rank
over-commit, corruption by concurrency, ungated index-K reads and alert states. Ctrl-C (or
--duration) stops every process it started and removes its temporary files.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from prometheus_client.parser import text_string_to_metric_families

from exporter.loadgen import Exchange, LoadGenerator
from exporter.metrics import catalog as m
from exporter.units import GIB

if TYPE_CHECKING:
    from rich.console import Console, RenderableType

REPO_ALERTS = Path(__file__).resolve().parent.parent / "alerts"
DEMO_TOKEN = "demo-token"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(port: int, path: str, timeout: float = 2.0) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


@dataclass
class DemoOptions:
    index_k_dtype: str = "bf16"
    hicache: str = "on"
    configurator: str = "legacy"
    levels: tuple[int, ...] = (1, 4, 8, 16, 32, 64, 96)
    level_seconds: float = 10.0
    duration: float | None = None
    prometheus: bool = True
    tp_size: int = 8
    live: bool = True


@dataclass
class Stack:
    tmp: Path
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)
    alert_windows: str = ""  # which rule set Prometheus runs: DEMO_WINDOWS or PRODUCTION_WINDOWS

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + 10
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=5)
        shutil.rmtree(self.tmp, ignore_errors=True)


class StackError(RuntimeError):
    """A part of the demo stack exited or never became ready; the message carries its log's
    tail (for the simulator, its own config error), shown without a traceback."""


def _spawn(stack: Stack, name: str, argv: list[str]) -> None:
    log = (stack.tmp / f"{name}.log").open("wb")
    stack.procs[name] = subprocess.Popen(
        argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
    )


def _wait_ready(stack: Stack, name: str, port: int, path: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        proc = stack.procs[name]
        if proc.poll() is not None:
            log = (stack.tmp / f"{name}.log").read_text(errors="replace")[-2000:]
            raise StackError(f"{name} exited with {proc.returncode}:\n{log}")
        with contextlib.suppress(OSError):
            if http_get(port, path)[0] < 500:
                return
        time.sleep(0.2)
    raise StackError(f"{name} did not become ready on port {port}")


def start_stack(opts: DemoOptions) -> Stack:
    stack = Stack(Path(tempfile.mkdtemp(prefix="dsv4-demo-")))
    py = [sys.executable, "-m", "exporter"]
    p = stack.ports
    p.update(sim=free_port(), sidecar=free_port(), tap=free_port())
    probe_dir = stack.tmp / "probe"
    probe_dir.mkdir()
    try:
        _spawn(
            stack,
            "simulator",
            [
                *py,
                "simulate",
                "--port",
                str(p["sim"]),
                "--index-k-dtype",
                opts.index_k_dtype,
                "--hicache",
                opts.hicache,
                "--configurator",
                opts.configurator,
                "--tp-size",
                str(opts.tp_size),
                "--ttft-ms",
                "20",
                "--itl-ms",
                "5",
                "--probe-dir",
                str(probe_dir),
            ],
        )
        _wait_ready(stack, "simulator", p["sim"], "/health")
        _spawn(
            stack,
            "sidecar",
            [
                *py,
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                str(p["sidecar"]),
                "--tap-port",
                str(p["tap"]),
                "--tap-sample-rate",
                "1.0",
                "--sglang-url",
                f"http://127.0.0.1:{p['sim']}",
                "--gpu-backend",
                "fake",
                "--index-k-dtype",
                opts.index_k_dtype,
                "--sglang-poll-interval",
                "1",
                # Canary rounds every second: at the demo's bf16 rates (0 / 7.8% / 17.4% per
                # request at 1 / 16 / 64 sessions) a 5 s interval left about one run in ten
                # with no degenerate canary reply inside the alert window; at 1 s the chance
                # of none in the first minute is below 1e-4.
                "--canary-interval",
                "1",
                # The long-generation canary (answers of 1,500-4,000 tokens, then a call) at
                # the load's concurrency: corruption by length next to corruption by
                # concurrency. Its token budget is lifted for the demo (production: 50k/h).
                "--canary-long",
                "true",
                "--canary-long-concurrency",
                "2",
                "--canary-long-interval",
                "1",
                "--canary-long-max-tokens",
                "4096",
                "--canary-long-tokens-per-hour",
                "1000000000",
                "--probe-dir",
                str(probe_dir),
                "--samples-token",
                DEMO_TOKEN,
                "--log-level",
                "warning",
            ],
        )
        _wait_ready(stack, "sidecar", p["sidecar"], "/healthz")
        prom = shutil.which("prometheus")
        if opts.prometheus and prom:
            p["prometheus"] = free_port()
            rules, stack.alert_windows = demo_rules(stack.tmp)
            cfg = stack.tmp / "prometheus.yml"
            cfg.write_text(
                "global:\n  scrape_interval: 2s\n  evaluation_interval: 2s\n"
                + ("rule_files:\n" + "".join(f"  - {r}\n" for r in rules) if rules else "")
                + "scrape_configs:\n  - job_name: dsv4-sidecar\n    static_configs:\n"
                + f"      - targets: ['127.0.0.1:{p['sidecar']}']\n"
            )
            _spawn(
                stack,
                "prometheus",
                [
                    prom,
                    f"--config.file={cfg}",
                    f"--storage.tsdb.path={stack.tmp / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{p['prometheus']}",
                    "--log.level=warn",
                ],
            )
            _wait_ready(stack, "prometheus", p["prometheus"], "/-/ready")
    except BaseException:
        stack.stop()
        raise
    return stack


# The demo's alert knobs: the shipped rules with windows and `for:` short enough that alerts
# fire within the two minutes a newcomer watches. Production keeps alerts/config.py's defaults
# (5-10 minute `for:`), and the screen says which set is in force.
DEMO_KNOBS: dict[str, str | int] = {
    "kv_overcommit_for": "20s",
    "corruption_window": "2m",
    "corruption_min_samples": 20,
    "corruption_warning_for": "20s",
    "corruption_critical_for": "20s",
    "canary_degenerate_window": "2m",
    "canary_degenerate_for": "10s",
    "index_k_window": "1m",
    "index_k_for": "10s",
    "risky_config_for": "10s",
    "gpu_fill_for": "2m",
    "length_window": "1m",
    "length_baseline_window": "10m",
    "length_inflation_for": "10s",
    "finish_length_for": "10s",
}
DEMO_WINDOWS = "demo"  # the short-window rules above
PRODUCTION_WINDOWS = "production"  # the committed rule file (fallback)


def demo_rules(tmp: Path) -> tuple[list[str], str]:
    """Render the rules with :data:`DEMO_KNOBS` into ``tmp``; the rule files and which
    windows they use. Falls back to the committed (production-window) rule file when the
    generator cannot run (no repository checkout: ``alerts/`` is not in the wheel)."""
    if not REPO_ALERTS.is_dir():
        return [], PRODUCTION_WINDOWS
    knobs, out = tmp / "demo-knobs.yaml", tmp / "demo.rules.yaml"
    knobs.write_text("".join(f"{k}: {v}\n" for k, v in DEMO_KNOBS.items()))
    r = subprocess.run(
        [sys.executable, "-m", "alerts.generate", "--config", str(knobs), "--out", str(out)],
        cwd=REPO_ALERTS.parent,
        capture_output=True,
        timeout=60,
    )
    if r.returncode == 0:
        return [str(out)], DEMO_WINDOWS
    return sorted(str(f) for f in REPO_ALERTS.glob("*.yaml")), PRODUCTION_WINDOWS


# --- the live summary ------------------------------------------------------------------------
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
    alerts: list[tuple[str, str]] = field(default_factory=list)
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
                snap.alerts.append((a["labels"].get("alertname", "?"), a.get("state", "?")))
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
            style="red" if over > 1 * GIB else None,
        )
    corr = Table(
        title="Tool-call corruption by concurrency (tap, canary, ingest)", title_justify="left"
    )
    for col in ("concurrency ≤", "graded", "degenerate", "rate"):
        corr.add_column(col, justify="right")
    order = ["1", "4", "8", "16", "32", "64", "128", "+Inf"]
    for le in order:
        total, bad = snap.by_bucket.get(le, [0.0, 0.0])
        if total:
            rate = bad / total
            corr.add_row(
                le,
                f"{total:.0f}",
                f"{bad:.0f}",
                f"{rate:.1%}",
                style="red" if rate > 0.05 else None,
            )
    by_len = Table(title="Tool-call corruption by output length (tokens)", title_justify="left")
    for col in ("output tokens ≤", "graded", "degenerate", "rate"):
        by_len.add_column(col, justify="right")
    for le in ("256", "1024", "4096", "16384", "+Inf"):
        total, bad = snap.by_length.get(le, [0.0, 0.0])
        if total:
            rate = bad / total
            by_len.add_row(
                le,
                f"{total:.0f}",
                f"{bad:.0f}",
                f"{rate:.1%}",
                style="red" if rate > 0.05 else None,
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
            ", ".join(f"{n} ({s})" for n, s in sorted(set(snap.alerts)))
            or ("none yet" if "prometheus" in stack.ports else "Prometheus not running")
        )
    )
    return Group(head, mem, corr, by_len, probe, alerts, Text(windows_note(stack), style="dim"))


def windows_note(stack: Stack) -> str:
    """What the screen says about the alert rules in force: the demo's are not production's."""
    if "prometheus" not in stack.ports:
        return "Alert windows: no Prometheus, no alerts."
    if stack.alert_windows == DEMO_WINDOWS:
        return (
            "Alert windows: DEMO (for: 10-20s, 1-2m rate windows) so alerts fire within two "
            "minutes; production rules (alerts/dsv4-sidecar.rules.yaml) wait 5-10 minutes."
        )
    return "Alert windows: production (for: 5-10 minutes): most alerts stay pending in a demo."


def urls(stack: Stack) -> list[str]:
    p = stack.ports
    out = [
        f"sidecar landing page  http://127.0.0.1:{p['sidecar']}/",
        f"sidecar metrics       http://127.0.0.1:{p['sidecar']}/metrics",
        f"bad samples           curl -H 'Authorization: Bearer {DEMO_TOKEN}' "
        f"http://127.0.0.1:{p['sidecar']}/api/v1/samples",
        f"tap (OpenAI API)      http://127.0.0.1:{p['tap']}/v1",
        f"simulated SGLang      http://127.0.0.1:{p['sim']}/server_info",
    ]
    if "prometheus" in p:
        out.append(f"Prometheus alerts     http://127.0.0.1:{p['prometheus']}/alerts")
    return out


@dataclass
class LoadState:
    """What the load driver is doing now, for the live summary."""

    level: int | None = None


async def drive(stack: Stack, opts: DemoOptions, state: LoadState, stop: asyncio.Event) -> None:
    """Ramp concurrency through the tap, level by level, repeating until stopped. Like a
    gateway, it also posts every fourth answer it got to the sidecar's ingest API."""
    import aiohttp

    gen = LoadGenerator(f"http://127.0.0.1:{stack.ports['tap']}", stream=True, timeout=60)
    ingest = f"http://127.0.0.1:{stack.ports['sidecar']}/api/v1/samples"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        seen = [0]

        async def to_ingest(ex: Exchange) -> None:
            seen[0] += 1
            if ex.response is None or seen[0] % 4:
                return
            sample = {
                "response": ex.response,
                "concurrency": ex.concurrency,
                "tools": ex.request.get("tools"),
            }
            with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
                async with session.post(ingest, json=sample) as resp:
                    await resp.read()

        while not stop.is_set():
            for level in opts.levels:
                if stop.is_set():
                    return
                state.level = level
                await gen.run_level(level, duration=opts.level_seconds, hook=to_ingest, stop=stop)


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
