"""The PromQL of every dashboard panel, with Grafana's template variables made concrete.

For the end-to-end test against a real Prometheus (and for the static checks here): read the
committed JSON, walk every panel's targets, and substitute ``$job``, ``$instance``, ``$rank``,
``$__rate_interval``, ``$__range`` and ``$datasource`` the way Grafana would for one choice of
values::

    from dashboards.queries import panel_queries
    for dashboard, queries in panel_queries(job="dsv4-sidecar", instance=".+", rank=".+").items():
        for title, expr in queries:
            ...  # GET /api/v1/query?query=expr must return data
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DASHBOARDS_DIR = Path(__file__).resolve().parent

# Grafana variable syntaxes: $name, ${name} and ${name:format} (formats are not used here).
_VAR = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")


@dataclass(frozen=True)
class PanelQuery:
    """One target of one panel, as committed (``expr`` still holds template variables)."""

    dashboard: str  # file stem, e.g. "memory-overcommit"
    panel_id: int
    title: str
    panel_type: str
    ref_id: str
    expr: str
    instant: bool


def dashboard_files() -> list[Path]:
    """The committed dashboards, in a stable order."""
    return sorted(DASHBOARDS_DIR.glob("*.json"))


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="utf-8"))


def iter_panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, including those nested in (collapsed) rows; rows themselves excluded."""
    for panel in dashboard.get("panels", []):
        if panel.get("type") == "row":
            yield from panel.get("panels", [])
        else:
            yield panel


def iter_queries(paths: list[Path] | None = None) -> Iterator[PanelQuery]:
    """Every PromQL target of every panel of the committed dashboards."""
    for path in paths or dashboard_files():
        for panel in iter_panels(load(path)):
            for t in panel.get("targets", []):
                if "expr" in t:
                    yield PanelQuery(
                        dashboard=path.stem,
                        panel_id=panel["id"],
                        title=panel["title"],
                        panel_type=panel["type"],
                        ref_id=t.get("refId", ""),
                        expr=t["expr"],
                        instant=bool(t.get("instant")) and not t.get("range"),
                    )


def substitute(expr: str, values: dict[str, str]) -> str:
    """Replace every template variable in ``expr``; an unknown variable raises KeyError."""

    def repl(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        if name not in values:
            raise KeyError(f"no value for template variable ${name} in: {expr}")
        return values[name]

    return _VAR.sub(repl, expr)


def variable_values(
    job: str = ".+",
    instance: str = ".+",
    rank: str = ".+",
    rate_interval: str = "1m",
    range_: str = "1h",
    namespace: str = ".*",
    deployment: str = ".*",
    below: str = "none",
    sglang_job: str = ".+",
    vllm_job: str = ".+",
) -> dict[str, str]:
    """The substitution table: regexes for the multi-value variables, durations for Grafana's
    built-ins (``$__rate_interval`` should be at least 4x the scrape interval)."""
    return {
        "job": job,
        "instance": instance,
        "rank": rank,
        "namespace": namespace,
        "deployment": deployment,
        "below": below,
        "sglang_job": sglang_job,
        "vllm_job": vllm_job,
        "__url_time_range": "from=now-1h&to=now",
        "__rate_interval": rate_interval,
        "__range": range_,
        "__interval": rate_interval,
        "datasource": "prometheus",
    }


def panel_queries(
    job: str = ".+",
    instance: str = ".+",
    rank: str = ".+",
    rate_interval: str = "1m",
    range_: str = "1h",
) -> dict[str, list[tuple[str, str]]]:
    """For each dashboard (file stem), ``(panel title, PromQL)`` per target, ready to run.

    A panel with several targets contributes one entry per target, titled
    ``"<title> [<refId>]"`` so a failing query is easy to find.
    """
    values = variable_values(job, instance, rank, rate_interval, range_)
    out: dict[str, list[tuple[str, str]]] = {}
    for q in iter_queries():
        title = f"{q.title} [{q.ref_id}]"
        out.setdefault(q.dashboard, []).append((title, substitute(q.expr, values)))
    return out
