"""The demo's live screen: what it reads (the sidecar's /metrics, Prometheus' alerts), how it
draws it (rich), and the loop that runs the stack, the load and the screen together until
Ctrl-C or --duration.

The screen is laid out for an 80x24 terminal (:data:`SCREEN`): the deployment in two lines,
over-commit in one (every rank of a deployment is priced alike, so one line with the range
says what a table of ranks said), the two corruption tables side by side, and the alerts cut
to a fixed number of lines. Its last frame, after Ctrl-C or --duration, says which alerts
fired during the run and when (:class:`AlertLog`), kept by the demo as it ran: after Ctrl-C
in a terminal, Prometheus has had the SIGINT too.
"""

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
    from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
    from rich.table import Table
    from rich.text import Text

SCREEN = (80, 24)
"""Columns and rows the live screen fits (tests/test_demo_screen.py renders the fullest one)."""
ALERT_LINES = 6
"""Lines the alert list may take; a longer one ends in "…" (the rest are in Prometheus)."""


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


@dataclass
class AlertLog:
    """When each alert first fired, in seconds since the demo started, kept over the run: the
    screen says what fired even after an alert resolved, and so does its last frame."""

    first_fired: dict[str, float | None] = field(default_factory=dict)  # None: not known

    @classmethod
    def seen_in(cls, snap: Snapshot) -> AlertLog:
        """What fires in one snapshot, with no time known (a frame drawn without a log)."""
        return cls({n: None for n, st in alert_states(snap.alerts).items() if st == "firing"})

    def update(self, snap: Snapshot, elapsed: float) -> None:
        for name, state in alert_states(snap.alerts).items():
            if state == "firing":
                self.first_fired.setdefault(name, elapsed)


def render(
    stack: Stack,
    snap: Snapshot,
    level: int | None,
    elapsed: float,
    log: AlertLog | None = None,
    final: bool = False,
) -> RenderableType:
    """One frame; ``log`` is what fired so far (without one, what fires in ``snap``), and the
    ``final`` frame reports the whole run."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    dep = snap.deployment
    load = (
        f"stopped after {elapsed:.0f}s"
        if final
        else (f"load: {level if level is not None else '-'} sessions · {elapsed:.0f}s")
    )
    head = Text.assemble(
        ("dsv4-sidecar demo", "bold"),
        " · simulated SGLang + GPUs · ",
        load,
        "\n",
        f"index-K {dep.get('index_k_dtype', '?')}, "
        f"HiCache {'on' if dep.get('hicache') == 'true' else 'off'}, "
        f"{dep.get('configurator', '?')} configurator",
    )
    corr = _rate_table(
        "Tool-call corruption by concurrency",
        "sessions ≤",
        snap.by_bucket,
        ("1", "4", "8", "16", "32", "64", "128", "+Inf"),
    )
    by_len = _rate_table(
        "by output length",
        "tokens ≤",
        snap.by_length,
        ("256", "1024", "4096", "16384", "+Inf"),
    )
    tables = Table.grid(padding=(0, 3))
    tables.add_row(corr, by_len)
    gap = (
        f", mean transfer gap {snap.gap_sum / snap.gap_count * 1e6:.0f} µs"
        if snap.gap_count
        else ""
    )
    probe = Text(
        f"HiCache index-K reads: {snap.gated:.0f} gated, {snap.ungated:.0f} ungated{gap}",
        style="red" if snap.ungated else "",
    )
    log = log if log is not None else AlertLog.seen_in(snap)
    alerts = _Fitted(_alerts_text(stack, snap, log, final), ALERT_LINES)
    return Group(
        head,
        _overcommit_line(snap),
        tables,
        probe,
        alerts,
        Text(windows_note(stack), style="dim"),
    )


def _span(values: list[float], fmt: str) -> str:
    """``4.34`` when every value prints alike, else ``4.30-4.34``."""
    lo, hi = format(min(values), fmt), format(max(values), fmt)
    return lo if lo == hi else f"{lo}-{hi}"


def _overcommit_line(snap: Snapshot) -> Text:
    """Over-commit of every rank in one line: the ranks of a deployment are priced alike, so
    the range (a single figure, normally) says what a table of identical rows said."""
    from rich.text import Text

    if not snap.overcommit:
        return Text("KV over-commit per rank: not read yet")
    over = list(snap.overcommit.values())
    reserves = [snap.reserve[r] for r in snap.overcommit if snap.reserve.get(r)]
    shares = [snap.overcommit[r] / snap.reserve[r] for r in snap.overcommit if snap.reserve.get(r)]
    text = f"KV over-commit per rank: {_span([o / GIB for o in over], '.2f')} GiB"
    text += f" ({len(over)} rank{'s' if len(over) > 1 else ''})"
    if shares:
        text += (
            f", {_span(shares, '.0%')} of the "
            f"{_span([r / GIB for r in reserves], '.1f')} GiB reserve"
        )
    red = max(over) > DEFAULTS.kv_overcommit_warning_bytes
    return Text(text, style="red" if red else "")


def _alerts_text(stack: Stack, snap: Snapshot, log: AlertLog, final: bool) -> Text:
    """What fired (with when, once known) and what is pending; the final frame says it of the
    whole run."""
    from rich.text import Text

    if "prometheus" not in stack.ports:
        return Text("Alerts: Prometheus is not running (`make deb-demo` installs it)")
    now = alert_states(snap.alerts)
    fired = []
    order = sorted(log.first_fired.items(), key=lambda kv: (kv[1] is None, kv[1] or 0, kv[0]))
    for name, at in order:
        when = "" if at is None else f" {at:.0f}s"
        resolved = "" if final or now.get(name) == "firing" else " (resolved)"
        fired.append(f"{name}{when}{resolved}")
    pending = sorted(n for n, st in now.items() if st != "firing" and n not in log.first_fired)
    head = "Alerts fired during the run: " if final else "Alerts fired: "
    text = head + (", ".join(fired) or ("none" if final else "none yet"))
    if pending:
        text += (" · pending at the end: " if final else " · pending: ") + ", ".join(pending)
    return Text(text, style="bold" if final and fired else "")


class _Fitted:
    """Text wrapped at the width it is drawn at and cut to ``lines`` lines, the last ending in
    "…" when cut: the alert list is the one part of the screen that grows with what happens."""

    def __init__(self, text: Text, lines: int) -> None:
        self.text, self.lines = text, lines

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        lines = list(self.text.wrap(console, options.max_width))
        if len(lines) > self.lines:
            lines = lines[: self.lines]
            last = lines[-1]
            last.truncate(options.max_width - 1)
            last.append("…")
        yield from lines


def _rate_table(
    title: str, bucket: str, rows: dict[str, list[float]], order: tuple[str, ...]
) -> Table:
    """Graded, degenerate and their rate per bucket (in ``order``; empty buckets left out)."""
    from rich import box
    from rich.table import Table

    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False)
    for col in (bucket, "graded", "degen.", "rate"):
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


def alert_states(alerts: list[tuple[str, str, str]]) -> dict[str, str]:
    """Each alert's state: ``firing`` when a rule of it fires at any severity, else the state
    of its active rules (``pending``)."""
    states: dict[str, str] = {}
    for name, _severity, state in alerts:
        if states.get(name) != "firing":
            states[name] = state
    return states


def _knob_span(suffix: str) -> str:
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
            f"Alert windows: DEMO (for: {_knob_span('_for')}, windows {_knob_span('_window')}) "
            "so alerts fire within three minutes; production rules "
            "(alerts/dsv4-sidecar.rules.yaml) wait 1-30 minutes."
        )
    return "Alert windows: production (for: 1-30 minutes): most alerts stay pending in a demo."


# Ctrl-C, kill, and the terminal closing: each stops the stack and removes its files.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def size_note(console: Console) -> str | None:
    """A line to print when the terminal is smaller than :data:`SCREEN` (the frame is cut)."""
    width, height = console.size
    if width >= SCREEN[0] and height >= SCREEN[1]:
        return None
    return (
        f"The live screen needs {SCREEN[0]}x{SCREEN[1]}; this terminal is {width}x{height}: "
        "enlarge it or the screen is cut off."
    )


async def run_demo(opts: DemoOptions, console: Console) -> int:
    from rich.live import Live

    stack = start_stack(opts)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stop.set)
    state = LoadState()
    log = AlertLog()
    last: list[Snapshot] = []
    t0 = time.monotonic()
    live_screen = opts.live and console.is_terminal
    try:
        console.print(
            "[bold]dsv4-sidecar demo[/bold]: everything runs on 127.0.0.1; Ctrl-C stops it."
        )
        for line in urls(stack):
            console.print("  " + line)
        console.print(windows_note(stack))
        note = size_note(console) if live_screen else None
        if note:
            console.print(note, style="yellow")
        load = asyncio.create_task(drive(stack, opts, state, stop))
        deadline = t0 + opts.duration if opts.duration else float("inf")

        async def tick(final: bool = False) -> RenderableType:
            snap = await asyncio.to_thread(read_snapshot, stack)
            if final and not snap.overcommit and last:
                # A terminal's Ctrl-C reaches the whole process group: the stack may be gone
                # already. The last numbers read stand, and the log keeps what fired.
                snap = last[0]
            last[:] = [snap]
            elapsed = time.monotonic() - t0
            log.update(snap, elapsed)
            return render(stack, snap, state.level, elapsed, log, final=final)

        if live_screen:
            with Live(await tick(), console=console, refresh_per_second=2) as live:
                while not stop.is_set() and time.monotonic() < deadline:
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(stop.wait(), timeout=1.0)
                    live.update(await tick())
                stop.set()
                live.update(await tick(final=True))
        else:
            printed = 0.0
            while not stop.is_set() and time.monotonic() < deadline:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=1.0)
                if time.monotonic() - printed >= 10:
                    console.print(await tick())
                    printed = time.monotonic()
            stop.set()
            console.print(await tick(final=True))
        await asyncio.wait_for(load, timeout=30)
    finally:
        stop.set()
        stack.stop()
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)
    console.print("demo stopped; every process it started has exited and its files are removed.")
    return 0
