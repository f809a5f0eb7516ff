"""Plots for the HTML report, as inline SVG strings (the report stays one self-contained file).

matplotlib is an optional extra (``pip install 'dsv4-sidecar[report]'``): the sidecar image
does not need it, and without it the report is written without plots and says so. Figures
are built with the object API (no pyplot global state, no GUI backend) and text stays text
in the SVG (small files, selectable numbers).
"""

from __future__ import annotations

import importlib.util
import io
import math
from collections.abc import Callable
from typing import Any

from exporter.oncall.repro_report import ReproReport
from exporter.oncall.triage.diagnosis import GIB
from exporter.oncall.triage.evidence import BucketCount, Evidence, Series
from exporter.oncall.triage.sections import seconds

INF_X = 256.0  # where the "+Inf" concurrency bucket is drawn on the log2 axis
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f")


def available() -> bool:
    """Whether matplotlib can be imported (checked without importing it)."""
    try:
        return importlib.util.find_spec("matplotlib") is not None
    except (ImportError, ValueError):
        return False


def _figure(width: float = 6.0, height: float = 3.0) -> tuple[Any, Any]:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), layout="constrained")
    ax = fig.subplots()
    ax.grid(True, alpha=0.3)
    return fig, ax


def _svg(fig: Any) -> str:
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "dsv4-triage"}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    text = buf.getvalue()
    return text[text.index("<svg") :]  # drop the XML prolog and DOCTYPE: inlined in HTML


def _bucket_x(le: str) -> float | None:
    if le == "+Inf":
        return INF_X
    try:
        return float(le)
    except ValueError:
        return None


def _errorbar(ax: Any, xs: list[float], buckets: list[BucketCount], **kw: Any) -> None:
    rates = [100 * b.rate for b in buckets]
    lows = [100 * (b.rate - b.ci[0]) for b in buckets]
    highs = [100 * (b.ci[1] - b.rate) for b in buckets]
    ax.errorbar(xs, rates, yerr=[lows, highs], capsize=3, marker="o", **kw)


def corruption_vs_concurrency(ev: Evidence) -> str | None:
    """Degenerate rate per concurrency (bucket or repro level) with Wilson 95% intervals."""
    fig, ax = _figure()
    drawn = 0
    for name, buckets in (
        ("sidecar (bucket upper bound)", ev.corruption.buckets if ev.corruption else []),
        ("scanned samples", ev.scan.buckets if ev.scan else []),
    ):
        pts = [(x, b) for b in buckets if b.graded and (x := _bucket_x(b.le)) is not None]
        if pts:
            _errorbar(ax, [x for x, _ in pts], [b for _, b in pts], label=name, color=COLORS[drawn])
            drawn += 1
    if ev.repro is not None:
        for arm in ReproReport.from_json(ev.repro).arms:
            levels = [lv for lv in arm.levels if lv.requests]
            if levels:
                buckets = [
                    BucketCount(str(lv.concurrency), lv.requests, lv.degenerate) for lv in levels
                ]
                _errorbar(
                    ax,
                    [float(lv.concurrency) for lv in levels],
                    buckets,
                    label=f"repro: {arm.arm.label}",
                    color=COLORS[drawn % len(COLORS)],
                    linestyle="--",
                )
                drawn += 1
    if not drawn:
        return None
    ax.set_xscale("log", base=2)
    ticks = [1, 4, 8, 16, 32, 64, 128, INF_X]
    ax.set_xticks(ticks, [str(t) if t != INF_X else ">128" for t in ticks])
    ax.set_xlabel("concurrent requests")
    ax.set_ylabel("degenerate (%)")
    ax.set_ylim(bottom=0)
    ax.set_title("Corruption rate vs concurrency (95% Wilson intervals)")
    ax.legend(fontsize="small")
    return _svg(fig)


def time_unit(window_s: float | None) -> tuple[float, str]:
    """Seconds per unit and the axis label, so a 20 s test window and a 2 h incident both
    get readable ticks."""
    w = window_s or 3600.0
    if w <= 600:
        return 1.0, "seconds before the end of the window"
    if w <= 2 * 86400:
        return 60.0, "minutes before the end of the window"
    return 3600.0, "hours before the end of the window"


def _time_lines(
    ax: Any,
    series: list[Series],
    ev: Evidence,
    scale: float = 1.0,
    style: str = "-",
) -> int:
    unit, label = time_unit(ev.window_s)
    end = ev.end or 0.0
    ax.set_xlabel(label)
    n = 0
    for i, s in enumerate(series):
        if not s.points:
            continue
        ax.plot(
            [(t - end) / unit for t, _ in s.points],
            [v * scale for _, v in s.points],
            style,
            label=s.name,
            color=COLORS[i % len(COLORS)] if style == "-" else "#444444",
        )
        n += 1
    return n


def degenerate_ratio_over_time(ev: Evidence) -> str | None:
    if not ev.series.degenerate_ratio or ev.end is None:
        return None
    fig, ax = _figure()
    renamed = [Series(f"<= {s.name}", s.points) for s in ev.series.degenerate_ratio]
    _time_lines(ax, renamed, ev, 100.0)
    ax.set_ylabel("degenerate (%)")
    ax.set_title("Degenerate ratio by concurrency bucket over time")
    ax.legend(fontsize="small", title="concurrency", title_fontsize="small")
    return _svg(fig)


def overcommit(ev: Evidence) -> str | None:
    """Over-commit per rank over time (reserve dashed); bars per rank without Prometheus."""
    if ev.series.overcommit and ev.end is not None:
        fig, ax = _figure()
        _time_lines(ax, ev.series.overcommit[:8], ev, 1 / GIB)
        _time_lines(ax, ev.series.reserve, ev, 1 / GIB, style="--")
    else:
        ranks = [r for r in ev.ranks if r.overcommit_bytes is not None]
        if not ranks:
            return None
        fig, ax = _figure()
        ax.bar([r.key for r in ranks], [(r.overcommit_bytes or 0) / GIB for r in ranks])
        reserves = [r.reserve_bytes for r in ranks if r.reserve_bytes]
        if reserves:
            ax.axhline(min(reserves) / GIB, linestyle="--", color="#444444", label="reserve")
        ax.set_xlabel("rank")
    ax.axhline(1.0, linestyle=":", color="#d62728", label="warning (1 GiB)")
    ax.set_ylabel("GiB beyond the plan")
    ax.set_ylim(bottom=0)
    ax.set_title("KV-pool over-commit per rank")
    ax.legend(fontsize="small", ncol=2)
    return _svg(fig)


def gpu_free(ev: Evidence) -> str | None:
    if not ev.series.gpu_free or ev.end is None:
        return None
    fig, ax = _figure()
    _time_lines(ax, ev.series.gpu_free[:8], ev, 1 / GIB)
    ax.set_ylabel("GiB free")
    ax.set_ylim(bottom=0)
    ax.set_title("GPU free memory per rank")
    ax.legend(fontsize="small", ncol=2)
    return _svg(fig)


def gap_histogram(ev: Evidence) -> str | None:
    """Ungated index-K reads by how long their layer's load was still outstanding."""
    ik = ev.index_k
    if ik is None or not ik.gap_buckets or ik.gap_buckets[-1][1] <= 0:
        return None
    labels, counts, prev = [], [], 0.0
    for le, cum in ik.gap_buckets:
        labels.append("> last" if math.isinf(le) else ("0" if le == 0 else seconds(le)))
        counts.append(max(0.0, cum - prev))
        prev = cum
    fig, ax = _figure()
    ax.bar(range(len(counts)), counts, color=COLORS[1])
    ax.set_xticks(range(len(labels)), labels, rotation=45, ha="right", fontsize="small")
    ax.set_xlabel("transfer gap (bucket upper bound)")
    ax.set_ylabel("ungated reads")
    ax.set_title("Index-K transfer gap at ungated reads")
    return _svg(fig)


PLOTS: dict[str, Callable[[Evidence], str | None]] = {
    "corruption_vs_concurrency": corruption_vs_concurrency,
    "degenerate_ratio_over_time": degenerate_ratio_over_time,
    "overcommit": overcommit,
    "gpu_free": gpu_free,
    "gap_histogram": gap_histogram,
}


def render_all(ev: Evidence) -> dict[str, str]:
    """Every plot there is data for, as SVG; empty when matplotlib is not installed."""
    if not available():
        return {}
    import matplotlib

    out = {}
    # Labels come from the servers triage read: "$...$" must stay text, never mathtext (a
    # label it could not parse raised out of savefig and lost the whole report).
    with matplotlib.rc_context({"text.parse_math": False, "text.usetex": False}):
        for key, fn in PLOTS.items():
            svg = fn(ev)
            if svg is not None:
                out[key] = svg
    return out
