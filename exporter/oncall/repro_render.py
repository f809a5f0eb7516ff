"""Human output of `repro`: the summary table and the lines an on-call pastes into a ticket."""

from __future__ import annotations

from collections.abc import Mapping

from rich.console import Console
from rich.table import Table

from exporter.oncall.repro_report import ReproReport, causes_text, errors_cell, format_p
from exporter.stats import SIGNIFICANCE


def pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def top_reasons(reasons: Mapping[str, int], n: int = 3) -> str:
    items = sorted(reasons.items(), key=lambda kv: (-kv[1], kv[0]))
    return ", ".join(f"{r} {c}" for r, c in items[:n])


def summary_lines(report: ReproReport) -> list[str]:
    """One line per arm (trend) and one for the comparison; plain text, no markup."""
    lines = []
    for arm in report.arms:
        trend = arm.trend(report.alpha)
        total = f"{arm.arm.label}: {arm.degenerate}/{arm.requests} degenerate"
        if arm.errors:
            total += f", {arm.errors} errors ({causes_text(arm.error_causes)})"
        if trend is not None:
            direction = SIGNIFICANCE.trend_words(trend.rises)
            total += (
                f"; {direction} ({pct(trend.low_rate)} at {trend.low} -> "
                f"{pct(trend.high_rate)} at {trend.high}, {format_p(trend.p_value)})"
            )
        lines.append(total)
    cmp = report.comparison
    if cmp is not None:
        lines.append(cmp.summary)
    if report.interrupted:
        done = max((len(a.levels) for a in report.arms), default=0)
        lines.append(
            f"interrupted: partial report ({done} of {len(report.levels_planned)} levels started)"
        )
    return lines


def print_report(report: ReproReport, console: Console) -> None:
    t = Table(title="repro: degenerate DSML tool calls per level", title_justify="left")
    for col in ("arm", "conc.", "graded", "bad", "rate", "95% CI", "errors"):
        t.add_column(col, justify="left" if col == "arm" else "right", no_wrap=True)
    t.add_column("top reasons", ratio=1)
    for i, arm in enumerate(report.arms):
        if i:
            t.add_section()
        for lv in arm.levels:
            low, high = lv.ci
            t.add_row(
                arm.arm.label,
                str(lv.concurrency),
                str(lv.requests),
                str(lv.degenerate),
                pct(lv.rate),
                f"{pct(low)}-{pct(high)}",
                errors_cell(lv.errors, lv.error_causes),
                top_reasons(lv.reasons, 2),
                style="bold red" if low > 0 else None,
            )
    console.print(t)
    for line in summary_lines(report):
        console.print(line, style="bold", markup=False, highlight=False)
