"""`dsv4-sidecar simulate`: run the simulated SGLang server (no GPU needed)."""

from __future__ import annotations

import argparse

from exporter.cli._common import log_level
from exporter.config_loader import ConfigError, add_settings_arguments, settings_from_args
from exporter.sim.settings import SimSettings


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "simulate",
        help="run a simulated DeepSeek-V4 SGLang server (the demo's and tests' double)",
        description="A simulated SGLang speaking /server_info, /metrics and the OpenAI API, "
        "with a deployment whose token counts come from the footprint model. Every flag is "
        "also a config-file key and a DSV4_SIM_<KEY> environment variable.",
    )
    add_settings_arguments(p, SimSettings)
    p.add_argument("--log-level", default="warning", type=log_level, metavar="LEVEL")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from exporter.cli._common import fail, setup_logging

    try:
        settings = settings_from_args(args, SimSettings)
    except ConfigError as exc:
        return fail("simulate", str(exc))
    setup_logging(args.log_level)
    import uvicorn

    from exporter.sim.server import create_sim_app

    app = create_sim_app(settings)
    uvicorn.run(
        app, host=settings.host, port=settings.port, log_level=args.log_level, access_log=False
    )
    return 0
