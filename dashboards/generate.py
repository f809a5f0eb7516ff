"""Write the dashboards' JSON (``make dashboards``); ``--check`` exits 1 when a committed file
is stale or a dashboard file exists that no generator produces.

    python -m dashboards.generate            # rewrite dashboards/*.json
    python -m dashboards.generate --check    # CI: fail on stale output
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as dm

from dashboards import corruption, hicache, memory, overview

DASHBOARDS_DIR = Path(__file__).resolve().parent

# file stem -> builder; the stems are the slugs of dashboards.common.UIDS.
BUILDERS: dict[str, Callable[[], dm.Dashboard]] = {
    "overview": overview.build,
    "memory-overcommit": memory.build,
    "tool-call-corruption": corruption.build,
    "hicache-transfer-gap": hicache.build,
}


def render(stem: str) -> str:
    """One dashboard as stable, sorted, indented JSON (diffs stay reviewable)."""
    encoded = JSONEncoder(sort_keys=True, indent=2).encode(BUILDERS[stem]())
    # Round-trip through json so the text does not depend on the SDK encoder's separators.
    return json.dumps(json.loads(encoded), sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def render_all() -> dict[Path, str]:
    return {DASHBOARDS_DIR / f"{stem}.json": render(stem) for stem in BUILDERS}


def stale(rendered: dict[Path, str]) -> list[str]:
    """Files that differ from the rendering, are missing, or are not generated at all."""
    out = [
        p.name
        for p, text in rendered.items()
        if not p.exists() or p.read_text(encoding="utf-8") != text
    ]
    out += [p.name + " (not generated)" for p in DASHBOARDS_DIR.glob("*.json") if p not in rendered]
    return sorted(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--check", action="store_true", help="exit 1 if committed JSON is stale")
    args = ap.parse_args(argv)
    rendered = render_all()
    if args.check:
        bad = stale(rendered)
        if bad:
            print(f"stale dashboards: {', '.join(bad)}: run `make dashboards`", file=sys.stderr)
            return 1
        return 0
    for path, text in rendered.items():
        path.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
