"""Generate docs/metrics.md from the catalog (``make docs``); ``--check`` fails when stale.

python -m exporter.metrics.docgen [--check] [--out docs/metrics.md]
"""

from __future__ import annotations

import importlib

from exporter import generated
from exporter.metrics.catalog import CATALOG

# Modules that register specs into the catalog (imported so every name is present).
CATALOG_MODULES = ("exporter.metrics.catalog",)

AREA_TITLES = {
    "sidecar": "Sidecar self-health",
    "gpu": "GPU memory (NVML)",
    "engine": "Serving engine (the seam, and vLLM's own figures beside a vLLM server)",
    "sglang": "SGLang server",
    "footprint": "KV pools: plan, allocation, over-commit",
    "dsml": "Tool-call grading (DSML)",
    "canary": "Canary prober",
    "tap": "Pass-through tap",
    "probe": "HiCache index-K probe",
    "hicache": "HiCache (from SGLang's own metrics)",
}


def render() -> str:
    for mod in CATALOG_MODULES:
        importlib.import_module(mod)
    lines = [
        "# Metrics reference",
        "",
        "Generated from `exporter/metrics/catalog.py` by `make docs`; do not edit by hand.",
        "All values are polled by background sources and rendered from their latest snapshot:",
        "a scrape never waits on NVML or SGLang.",
        "",
    ]
    areas: dict[str, list] = {}
    for spec in CATALOG.values():
        areas.setdefault(spec.area or "other", []).append(spec)
    for area in sorted(areas, key=lambda a: list(AREA_TITLES).index(a) if a in AREA_TITLES else 99):
        lines += [f"## {AREA_TITLES.get(area, area.title())}", ""]
        lines += ["| name | type | labels | description |", "|---|---|---|---|"]
        for s in sorted(areas[area], key=lambda s: s.name):
            labels = ", ".join(f"`{label}`" for label in s.labels) or "–"
            kind = "gauge (info)" if s.kind == "info" else s.kind
            lines.append(f"| `{s.name}` | {kind} | {labels} | {s.help} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    return generated.doc_main(argv, __doc__, "docs/metrics.md", "exporter.metrics.docgen", render)


if __name__ == "__main__":
    raise SystemExit(main())
