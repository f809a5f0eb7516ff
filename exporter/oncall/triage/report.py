"""Collect, diagnose, write: the one call behind `dsv4-sidecar triage` (also used by tests)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from exporter.oncall.triage import plots as plotlib
from exporter.oncall.triage.collect import CollectOptions, collect
from exporter.oncall.triage.diagnosis import POSSIBLE, SUPPORTED, Diagnosis, diagnose
from exporter.oncall.triage.evidence import Evidence
from exporter.oncall.triage.report_html import NO_PLOTS, render_html
from exporter.oncall.triage.report_md import printable, render_markdown
from exporter.thresholds import DEFAULTS, AlertConfig

if TYPE_CHECKING:
    from rich.console import Console


@dataclass
class TriageResult:
    evidence: Evidence
    diagnosis: Diagnosis
    html_path: Path
    md_path: Path
    evidence_path: Path
    plots: list[str]
    plots_note: str

    def to_json(self) -> dict[str, Any]:
        return {
            "diagnosis": self.diagnosis.to_json(),
            "report": {
                "html": str(self.html_path),
                "markdown": str(self.md_path),
                "evidence": str(self.evidence_path),
                "plots": self.plots,
                "plots_note": self.plots_note,
            },
            "evidence": self.evidence.to_json(),
        }


def render(
    ev: Evidence, *, plots: bool = True, thresholds: AlertConfig = DEFAULTS
) -> tuple[Diagnosis, str, str, list[str], str]:
    """Diagnose (with the alert knobs in force, ``thresholds``) and render both reports in
    memory: (diagnosis, html, markdown, plot keys, note about missing plots)."""
    diag = diagnose(ev, thresholds)
    note = ""
    svgs: dict[str, str] = {}
    if not plots:
        note = "Plots turned off (--no-plots)."
    elif not plotlib.available():
        note = NO_PLOTS
    else:
        svgs = plotlib.render_all(ev)
    return (
        diag,
        render_html(ev, diag, svgs, plots_note=note),
        render_markdown(ev, diag, html_name="triage.html"),
        sorted(svgs),
        note,
    )


def write_report(
    opts: CollectOptions, out: Path, *, plots: bool = True, thresholds: AlertConfig = DEFAULTS
) -> TriageResult:
    ev = collect(opts)
    diag, html, md, keys, note = render(ev, plots=plots, thresholds=thresholds)
    out.mkdir(parents=True, exist_ok=True)
    paths = (out / "triage.html", out / "triage.md", out / "evidence.json")
    paths[0].write_text(html, encoding="utf-8")
    paths[1].write_text(md, encoding="utf-8")
    doc = {"diagnosis": diag.to_json(), "evidence": ev.to_json()}
    paths[2].write_text(json.dumps(doc, indent=1, allow_nan=False) + "\n", encoding="utf-8")
    return TriageResult(ev, diag, *paths, keys, note)


def print_summary(result: TriageResult, console: Console) -> None:
    diag = result.diagnosis
    style = "bold red" if diag.supported else "bold"
    console.print(printable(diag.headline), style=style, markup=False, highlight=False)
    for c in diag.causes:
        mark = {SUPPORTED: "SUPPORTED", POSSIBLE: "possible"}.get(c.status, c.status)
        console.print(
            printable(f"  {c.title}: {mark} (rule {c.rule}: {c.rule_text})"),
            markup=False,
            highlight=False,
        )
    for note in result.evidence.notes:
        console.print(printable(f"  note: {note}"), style="yellow", markup=False, highlight=False)
    if result.plots_note:
        console.print(
            printable(f"  {result.plots_note}"), style="yellow", markup=False, highlight=False
        )
    console.print(
        printable(f"report: {result.html_path} · {result.md_path} · {result.evidence_path}"),
        markup=False,
        highlight=False,
    )
