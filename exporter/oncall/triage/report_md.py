"""The Markdown report: pasteable into a ticket, no plots, every number the HTML has."""

from __future__ import annotations

from exporter.oncall.triage.diagnosis import POSSIBLE, SUPPORTED, Diagnosis
from exporter.oncall.triage.evidence import Evidence
from exporter.oncall.triage.sections import Table, build_sections, diagnosis_table, utc


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table_md(t: Table) -> list[str]:
    out = ["| " + " | ".join(_cell(h) for h in t.headers) + " |"]
    out.append("|" + "|".join("---" for _ in t.headers) + "|")
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in t.rows]
    if t.caption:
        out.append(f"\n_{t.caption}_")
    return out


def render_markdown(ev: Evidence, diag: Diagnosis, *, html_name: str | None = None) -> str:
    lines = [
        "# DSV4 triage report",
        "",
        f"**Diagnosis:** {diag.headline}",
        "",
        f"Collected {utc(ev.collected_at)} from {', '.join(ev.sources) or 'nothing (see notes)'}"
        + (f"; window {ev.window_s:g} s ending {utc(ev.end)}" if ev.window_s and ev.end else "")
        + "."
        + (f" Plots: {html_name}." if html_name else ""),
        "",
        "## Diagnosis",
        "",
        *table_md(diagnosis_table(diag)),
    ]
    for c in diag.causes:
        lines += ["", f"### {c.title}: {c.status.replace('_', ' ').upper()} (rule {c.rule})", ""]
        lines += [f"- {e}" for e in c.evidence]
        if c.status in (SUPPORTED, POSSIBLE):
            lines += ["", "Mitigations, in order:", ""]
            lines += [f"{i}. {m}" for i, m in enumerate(c.mitigations, 1)]
    for s in build_sections(ev, diag):
        lines += ["", f"## {s.title}", ""]
        for line in s.lines:
            lines += [line, ""]
        for t in s.tables:
            lines += [*table_md(t), ""]
    return "\n".join(lines).rstrip() + "\n"
