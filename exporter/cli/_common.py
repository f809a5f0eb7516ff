"""Helpers shared by the server-starting subcommands."""

from __future__ import annotations

import logging
import sys

# uvicorn's level names (it raises KeyError on anything else); "trace" is uvicorn's own.
LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")


def log_level(value: str) -> str:
    """argparse type of ``--log-level``: case-insensitive, checked against LOG_LEVELS."""
    import argparse

    level = value.strip().lower()
    if level not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(
            f"unknown log level {value!r}; fix: use one of {', '.join(LOG_LEVELS)}"
        )
    return level


def setup_logging(level: str = "INFO") -> None:
    """Plain one-line logs on stderr. Nothing here ever logs prompts, outputs or headers."""
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.DEBUG),  # uvicorn's "trace" -> DEBUG
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def fail(command: str, message: str) -> int:
    print(f"dsv4-sidecar {command}: error: {message}", file=sys.stderr)
    return 2
