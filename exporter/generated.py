"""One command-line shape for every generator of committed files.

Seven generators write files that are committed (docs/metrics.md, docs/configuration.md,
docs/simulator.md, the rules table of docs/oncall.md, alerts/*.yaml, dashboards/*.json,
docker/k8s/generated/*).
Each renders ``{path: text}`` and hands it to :func:`main`, so all of them behave alike:

    python -m <generator>            # (re)write the files
    python -m <generator> --check    # write nothing; exit 1 naming every stale file

Exit status: 0 fresh / written, 1 stale, 2 the generator could not render (bad input).
``make test`` runs every ``--check``; ``make docs|alerts|dashboards|k8s`` write.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

Rendered = Mapping[Path, str]


def stale(rendered: Rendered, extra: Iterable[Path] = ()) -> list[str]:
    """Paths whose committed text is missing or differs from ``rendered``, plus ``extra``
    (files in a generated directory that no generator produces), sorted."""
    out = [
        str(path)
        for path, text in rendered.items()
        if not path.is_file() or path.read_text(encoding="utf-8") != text
    ]
    out += [f"{p} (not generated)" for p in extra]
    return sorted(out)


def write(rendered: Rendered) -> None:
    for path, text in rendered.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def parser(description: str | None) -> argparse.ArgumentParser:
    """The generators' common parser; a generator adds its own options to it."""
    ap = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 naming every committed file that is stale",
    )
    return ap


def main(
    render: Callable[[], Rendered],
    make_target: str,
    *,
    check: bool,
    unexpected: Callable[[], Sequence[Path]] = lambda: (),
    name: str = "generator",
) -> int:
    """Render, then write or check. ``render`` raising ``ValueError`` (bad input) is exit 2."""
    try:
        rendered = render()
    except ValueError as exc:
        print(f"{name}: {exc}", file=sys.stderr)
        return 2
    if check:
        bad = stale(rendered, unexpected())
        if bad:
            print(f"stale: {', '.join(bad)}: run `make {make_target}` and commit", file=sys.stderr)
            return 1
        return 0
    write(rendered)
    return 0
