"""The Markdown report: pasteable into a ticket, no plots, every number the HTML has."""

from __future__ import annotations

import re

from exporter.oncall.triage.diagnosis import POSSIBLE, SUPPORTED, Diagnosis
from exporter.oncall.triage.evidence import Evidence
from exporter.oncall.triage.sections import Table, build_sections, diagnosis_table, utc

# C0 controls but tab and newline, DEL and C1 controls: what starts a terminal escape sequence
# (ESC; U+009B, the one-character CSI), rings the bell or moves the cursor.
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# What can start raw HTML, an autolink or an entity in CommonMark: "<" before a letter, "/",
# "!" or "?", and "&" before a letter or "#". A bare "<= 64" or "A & B" stays as it reads.
_MD_HTML = re.compile(r"<(?=[A-Za-z/!?])|&(?=[A-Za-z#])")
_MD_ENTITY = {"<": "&lt;", "&": "&amp;"}
_MD_LINK = str.maketrans({"[": "\\[", "]": "\\]", "\\": "\\\\"})


def printable(text: str) -> str:
    """``text`` without control characters: a label value or an error message from a server
    triage read cannot clear the screen, retitle the window or write the clipboard (OSC 52)
    when it is printed, nor hide text in the report."""
    return _CONTROLS.sub("", text)


def md(text: str) -> str:
    """``text`` as inert Markdown: HTML (``<script>``, ``<img onerror>``), autolinks and
    entities show as text (their ``<`` / ``&`` escaped), a link or image cannot be formed
    (``[`` ``]`` escaped), control characters are dropped. Backticks
    and emphasis stay: the report's own prose uses them, and they cannot run anything."""
    escaped = _MD_HTML.sub(lambda m: _MD_ENTITY[m.group(0)], printable(text))
    return escaped.translate(_MD_LINK)


def _cell(text: str) -> str:
    return md(text).replace("|", "\\|").replace("\n", " ")


def table_md(t: Table) -> list[str]:
    out = ["| " + " | ".join(_cell(h) for h in t.headers) + " |"]
    out.append("|" + "|".join("---" for _ in t.headers) + "|")
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in t.rows]
    if t.caption:
        out.append(f"\n_{md(t.caption)}_")
    return out


def render_markdown(ev: Evidence, diag: Diagnosis, *, html_name: str | None = None) -> str:
    lines = [
        "# DSV4 triage report",
        "",
        f"**Diagnosis:** {md(diag.headline)}",
        "",
        f"Collected {utc(ev.collected_at)} from "
        + md(", ".join(ev.sources) or "nothing (see notes)")
        + (f"; window {ev.window_s:g} s ending {utc(ev.end)}" if ev.window_s and ev.end else "")
        + "."
        + (f" Plots: {md(html_name)}." if html_name else ""),
        "",
        "## Diagnosis",
        "",
        *table_md(diagnosis_table(diag)),
    ]
    for c in diag.causes:
        status = c.status.replace("_", " ").upper()
        lines += ["", md(f"### {c.title}: {status} (rule {c.rule})"), ""]
        lines += [f"- {md(e)}" for e in c.evidence]
        if c.status in (SUPPORTED, POSSIBLE):
            lines += ["", "Mitigations, in order:", ""]
            lines += [f"{i}. {md(m)}" for i, m in enumerate(c.mitigations, 1)]
    for s in build_sections(ev, diag):
        lines += ["", f"## {md(s.title)}", ""]
        for line in s.lines:
            lines += [md(line), ""]
        for t in s.tables:
            lines += [*table_md(t), ""]
    return "\n".join(lines).rstrip() + "\n"
