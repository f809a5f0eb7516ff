"""Generate docs/configuration.md from the settings models; ``--check FILE`` fails if stale."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pydantic_settings import BaseSettings

from exporter.config import SidecarSettings, env_name, flag_name
from exporter.sim.settings import SimSettings


def _default(info) -> str:
    if info.default_factory is not None:
        return f"`{info.default_factory()!r}`"
    if info.default is None:
        return "unset"
    return f"`{info.default}`"


def _table(cls: type[BaseSettings]) -> list[str]:
    rows = [
        "| key (config file) | flag | environment | default | description |",
        "|---|---|---|---|---|",
    ]
    for key, info in cls.model_fields.items():
        desc = (info.description or "").replace("|", "\\|")
        rows.append(
            f"| `{key}` | `{flag_name(key)}` | `{env_name(key, cls)}` | {_default(info)} | {desc} |"
        )
    return rows


def render() -> str:
    lines = [
        "# Configuration reference",
        "",
        "Generated from `exporter/config.py` and `exporter/sim/settings.py` by `make docs`.",
        "Every key can be given in a YAML file (`--config FILE`), as an environment variable, or",
        "as a flag; flags win over the environment, which wins over the file. A bad value is",
        "reported naming the key, where it came from, and the fix (exit status 2).",
        "",
        "## `dsv4-sidecar serve`",
        "",
        *_table(SidecarSettings),
        "",
        "## `dsv4-sidecar simulate` (the simulated SGLang)",
        "",
        *_table(SimSettings),
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--check", metavar="FILE")
    args = ap.parse_args(argv)
    text = render()
    if args.check:
        p = Path(args.check)
        if not p.exists() or p.read_text(encoding="utf-8") != text:
            print(f"{args.check} is stale: run `make docs` and commit it", file=sys.stderr)
            return 1
        return 0
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
