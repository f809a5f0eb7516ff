"""The `dsv4-sidecar` command line: thin edges over the core.

Each subcommand lives in its own module exposing ``add_parser(subparsers)`` and
``run(args) -> int``; heavy imports (FastAPI, aiohttp) happen inside ``run`` so that
`plan` and `scan` start fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from exporter import __version__

# name -> module under exporter.cli
COMMANDS: dict[str, str] = {
    "plan": "exporter.cli.plan",
    "serve": "exporter.cli.serve",
    "tap": "exporter.cli.tap",
    "simulate": "exporter.cli.simulate",
    "demo": "exporter.cli.demo",
    "scan": "exporter.cli.scan",
    "repro": "exporter.cli.repro",
    "triage": "exporter.cli.triage",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dsv4-sidecar",
        description="Sidecar for DeepSeek-V4 on SGLang: KV over-commit, GPU headroom, "
        "DSML tool-call corruption, HiCache index-K transfer race.",
    )
    parser.add_argument("--version", action="version", version=f"dsv4-sidecar {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for module in COMMANDS.values():
        importlib.import_module(module).add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
