"""The alert config as the rule generator reads it: a deployer's YAML overrides, the knob table.

The knobs themselves (every threshold, window and ``for:``, with its default and its doc) are
defined once in :mod:`exporter.thresholds`, in the installed package, because triage reads
the same numbers and ``alerts/`` is not in the image. A deployer overrides any subset with a
YAML mapping (``python -m alerts.generate --config site.yaml``); unknown keys and ill-typed
values are rejected so a typo cannot silently leave a default in force. The dashboards import
the same defaults to draw threshold lines where the alerts fire.
"""

from __future__ import annotations

import dataclasses

from exporter.thresholds import DEFAULT_RUNBOOK_BASE_URL, AlertConfig, from_mapping, load
from exporter.units import GIB, MIB

__all__ = ["DEFAULT_RUNBOOK_BASE_URL", "AlertConfig", "from_mapping", "knob_table", "load"]


def knob_table(config: AlertConfig | None = None) -> str:
    """A Markdown table of every knob, its default and what it does (for alerts/README.md)."""
    config = config or AlertConfig()
    rows = ["| knob | default | what it controls |", "|---|---|---|"]
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        shown = f"`{value}`"
        if isinstance(value, int) and value >= MIB and f.name.endswith("_bytes"):
            unit, div = ("GiB", GIB) if value % GIB == 0 else ("MiB", MIB)
            shown += f" ({value // div} {unit})"
        rows.append(f"| `{f.name}` | {shown} | {f.metadata['doc']} |")
    return "\n".join(rows)
