"""Helpers shared by the server-starting subcommands."""

from __future__ import annotations

import logging
import sys


def setup_logging(level: str = "INFO") -> None:
    """Plain one-line logs on stderr. Nothing here ever logs prompts, outputs or headers."""
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def fail(command: str, message: str) -> int:
    print(f"dsv4-sidecar {command}: error: {message}", file=sys.stderr)
    return 2
