"""The HTML report: one self-contained file (inline CSS and SVG, no scripts, no external
fetches), readable offline from a ticket attachment or a file:// URL."""

from __future__ import annotations

import html

from exporter.oncall.triage.diagnosis import (
    POSSIBLE,
    RULED_OUT,
    SUPPORTED,
    CauseFinding,
    Diagnosis,
)
from exporter.oncall.triage.evidence import Evidence
from exporter.oncall.triage.sections import Table, build_sections, utc

NO_PLOTS = (
    "Plots omitted: matplotlib is not installed "
    "(pip install 'dsv4-sidecar[report]'). Every number is in the tables."
)

CSS = """
body{font-family:-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;margin:1.2em auto;
max-width:1240px;color:#1d1d1f;font-size:14px;line-height:1.4;padding:0 1em}
h1{font-size:1.5em;margin:.2em 0}h2{font-size:1.15em;border-bottom:1px solid #ddd;
padding-bottom:.2em;margin-top:1.4em}h3{font-size:1em;margin:.2em 0}
.headline{padding:.8em 1em;border-radius:6px;font-size:1.08em;font-weight:600;margin:.6em 0}
.bad{background:#fdecea;border-left:6px solid #c62828}.warn{background:#fff8e1;
border-left:6px solid #f9a825}.ok{background:#e8f5e9;border-left:6px solid #2e7d32}
.meta{color:#555;font-size:.9em}.causes{display:grid;grid-template-columns:1fr 1fr;gap:.8em}
.cause{border:1px solid #ddd;border-radius:6px;padding:.6em .8em}
.cause ul,.cause ol{margin:.3em 0 .3em 1.2em;padding:0}
.badge{display:inline-block;padding:.05em .5em;border-radius:3px;color:#fff;font-size:.8em;
font-weight:700;text-transform:uppercase;margin-left:.4em}
.b-supported{background:#c62828}.b-possible{background:#f9a825}.b-ruled_out{background:#2e7d32}
.b-unknown{background:#757575}.rule{color:#555;font-size:.85em}
table{border-collapse:collapse;margin:.4em 0;font-size:.92em}
th,td{border:1px solid #ddd;padding:.2em .6em;text-align:left;vertical-align:top}
th{background:#f5f5f5}td.n{text-align:right;font-variant-numeric:tabular-nums}
.plots{display:grid;grid-template-columns:1fr 1fr;gap:.6em}
.plots svg{width:100%;height:auto}.note{color:#8a6d3b;background:#fcf8e3;padding:.4em .6em;
border-radius:4px}.grid{display:grid;grid-template-columns:1fr 1fr;gap:0 1.4em;
align-items:start}
caption{caption-side:bottom;color:#666;font-size:.85em;text-align:left}
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _is_number(cell: str) -> bool:
    stripped = cell.replace(",", "").replace("%", "").replace("-", "").replace(".", "")
    return stripped.strip().isdigit()


def table_html(t: Table) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in t.headers)
    rows = "".join(
        "<tr>"
        + "".join(
            f'<td class="n">{_e(c)}</td>' if _is_number(c) else f"<td>{_e(c)}</td>" for c in row
        )
        + "</tr>"
        for row in t.rows
    )
    caption = f"<caption>{_e(t.caption)}</caption>" if t.caption else ""
    return f"<table>{caption}<thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>"


def _cause_html(c: CauseFinding) -> str:
    items = "".join(f"<li>{_e(e)}</li>" for e in c.evidence)
    steps = ""
    if c.status in (SUPPORTED, POSSIBLE):
        steps = (
            "<div><b>Mitigations, in order</b><ol>"
            + "".join(f"<li>{_e(m)}</li>" for m in c.mitigations)
            + "</ol></div>"
        )
    return (
        f'<div class="cause"><h3>{_e(c.title)}<span class="badge b-{c.status}">'
        f"{_e(c.status.replace('_', ' '))}</span></h3>"
        f'<div class="rule">rule {_e(c.rule)}: {_e(c.rule_text)}</div>'
        f"<ul>{items}</ul>{steps}</div>"
    )


def render_html(
    ev: Evidence, diag: Diagnosis, plots: dict[str, str], *, plots_note: str = ""
) -> str:
    """The page. ``plots`` maps plot keys to SVG; ``plots_note`` explains an empty one."""
    statuses = {c.status for c in diag.causes}
    tone = "bad" if SUPPORTED in statuses else ("warn" if POSSIBLE in statuses else "ok")
    window = f"; window {ev.window_s:g} s ending {utc(ev.end)}" if ev.window_s and ev.end else ""
    parts = [
        '<!doctype html><html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>DSV4 triage: {_e(diag.headline[:120])}</title><style>{CSS}</style></head><body>",
        "<h1>DSV4 triage report</h1>",
        f'<div class="headline {tone}">{_e(diag.headline)}</div>',
        f'<div class="meta">Collected {_e(utc(ev.collected_at))} from '
        f"{_e(', '.join(ev.sources) or 'nothing (see notes)')}{_e(window)}.</div>",
    ]
    if plots_note:
        parts.append(f'<p class="note">{_e(plots_note)}</p>')
    parts.append("<h2>Diagnosis</h2>")
    active = [c for c in diag.causes if c.status != RULED_OUT]
    ruled = [c for c in diag.causes if c.status == RULED_OUT]
    parts.append(
        '<div class="causes">' + "".join(_cause_html(c) for c in active + ruled) + "</div>"
    )
    for s in build_sections(ev, diag):
        parts.append(f"<h2>{_e(s.title)}</h2>")
        parts += [f"<p>{_e(line)}</p>" for line in s.lines]
        if s.tables:
            cls = "grid" if len(s.tables) > 1 else ""
            parts.append(
                f'<div class="{cls}">' + "".join(table_html(t) for t in s.tables) + "</div>"
            )
        svgs = [plots[k] for k in s.plots if k in plots]
        if svgs:
            parts.append(
                '<div class="plots">' + "".join(f"<div>{svg}</div>" for svg in svgs) + "</div>"
            )
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
