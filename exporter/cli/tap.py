"""`dsv4-sidecar tap`: the pass-through tap in its own process, apart from the sidecar."""

from __future__ import annotations

import argparse

from exporter.cli._common import add_log_level
from exporter.config_loader import ConfigError, add_settings_arguments, settings_from_args
from exporter.tap_settings import TapSettings


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "tap",
        help="run only the pass-through tap (default port 9401), posting samples to serve",
        description="Run the tap in front of SGLang in its own process: grading, scraping and "
        "the API run in `serve`, which it posts sampled exchanges to. Every flag is also a "
        "config-file key and a DSV4_SIDECAR_<KEY> environment variable.",
    )
    add_settings_arguments(p, TapSettings)
    add_log_level(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from exporter.cli._common import fail, setup_logging

    try:
        settings = settings_from_args(args, TapSettings, check_files=True)
    except ConfigError as exc:
        return fail("tap", str(exc))
    setup_logging(args.log_level, settings.log_format)
    from exporter.tap_process import run_tap

    return run_tap(settings)
