"""Write the dashboards' JSON (``make dashboards``); ``--check`` exits 1 when a committed file
is stale or a dashboard file exists that no generator produces.

    python -m dashboards.generate            # rewrite dashboards/*.json
    python -m dashboards.generate --check    # CI: fail on stale output
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as dm

from dashboards import corruption, fleet, hicache, memory, overview
from exporter import generated

DASHBOARDS_DIR = Path(__file__).resolve().parent

# file stem -> builder; the stems are the slugs of dashboards.common.UIDS.
BUILDERS: dict[str, Callable[[], dm.Dashboard]] = {
    "overview": overview.build,
    "memory-overcommit": memory.build,
    "tool-call-corruption": corruption.build,
    "hicache-transfer-gap": hicache.build,
    "fleet": fleet.build,
}


def render(stem: str) -> str:
    """One dashboard as stable, sorted, indented JSON (diffs stay reviewable)."""
    encoded = JSONEncoder(sort_keys=True, indent=2).encode(BUILDERS[stem]())
    # Round-trip through json so the text does not depend on the SDK encoder's separators.
    return json.dumps(json.loads(encoded), sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def render_all() -> dict[Path, str]:
    return {DASHBOARDS_DIR / f"{stem}.json": render(stem) for stem in BUILDERS}


def unexpected(rendered: dict[Path, str]) -> list[Path]:
    """Dashboard JSON files no builder produces (hand-made or left from a rename)."""
    return sorted(p for p in DASHBOARDS_DIR.glob("*.json") if p not in rendered)


def stale(rendered: dict[Path, str]) -> list[str]:
    """Files that differ from the rendering, are missing, or are not generated at all."""
    return generated.stale(rendered, unexpected(rendered))


def main(argv: list[str] | None = None) -> int:
    args = generated.parser(__doc__).parse_args(argv)
    rendered = render_all()
    return generated.main(
        lambda: rendered,
        "dashboards",
        check=args.check,
        unexpected=lambda: unexpected(rendered),
        name="dashboards.generate",
    )


if __name__ == "__main__":
    raise SystemExit(main())
