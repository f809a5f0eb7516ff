"""`dsv4-sidecar serve`: run the sidecar beside an SGLang server."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from exporter.cli._common import add_log_level
from exporter.config import SidecarSettings
from exporter.config_loader import ConfigError, add_settings_arguments, settings_from_args


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve",
        help="run the sidecar: /metrics, /readyz, /api/v1/* (default port 9400)",
        description="Run the sidecar. Every flag is also a config-file key and a "
        "DSV4_SIDECAR_<KEY> environment variable; flags win over env, env over the file.",
    )
    add_settings_arguments(p, SidecarSettings)
    # exporter-toolkit's flag name, so a node_exporter or dcgm-exporter user's habit works
    p.add_argument(
        "--web.config.file",
        dest="web_config_file",
        default=None,
        metavar="FILE",
        help="the same as --web-config-file (Prometheus exporter-toolkit's spelling)",
    )
    add_log_level(p, "uvicorn/application log level")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from exporter import webconfig
    from exporter.cli._common import fail, setup_logging

    try:
        settings = settings_from_args(args, SidecarSettings, check_files=True)
        web = webconfig.load(settings.web_config_file) if settings.web_config_file else None
    except (ConfigError, webconfig.WebConfigError) as exc:
        return fail("serve", str(exc))
    setup_logging(args.log_level, settings.log_format)
    import uvicorn

    from exporter.app import create_app
    from exporter.http_limits import BoundedHttpToolsProtocol

    app = create_app(settings)
    config = webconfig.server_config(
        app,
        web,
        host=settings.host,
        port=settings.port,
        log_level=args.log_level,
        # json: uvicorn's own loggers propagate to the JSON handler instead of its text ones
        log_config=None if settings.log_format == "json" else uvicorn.config.LOGGING_CONFIG,
        access_log=False,
        lifespan="on",
        http=BoundedHttpToolsProtocol,  # request heads bounded in size and count
    )
    server = uvicorn.Server(config)
    # Bound here rather than inside uvicorn so the address actually bound (port 0 included) can
    # be written down for the container HEALTHCHECK before serving starts.
    sock = config.bind_socket()
    if settings.listen_file is not None:
        _record_listen_address(
            settings.listen_file, settings.host, sock.getsockname()[1], tls=config.is_ssl
        )
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
    # uvicorn.run's convention: a server that never started (lifespan failure) exits 3.
    return 0 if server.started else 3


def _record_listen_address(path: Path, host: str, port: int, *, tls: bool) -> None:
    from exporter.healthcheck import write_listen_file

    try:
        write_listen_file(path, host, port, tls=tls)
    except OSError as exc:
        # The sidecar serves all the same; the healthcheck falls back to the port setting.
        logging.getLogger("dsv4.serve").warning("cannot write listen_file %s: %s", path, exc)
