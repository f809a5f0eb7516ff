"""Helpers shared by the server-starting subcommands."""

from __future__ import annotations

import argparse
import logging
import sys

# uvicorn's level names (it raises KeyError on anything else); "trace" is uvicorn's own.
LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")


def log_level(value: str) -> str:
    """argparse type of ``--log-level``: case-insensitive, checked against LOG_LEVELS."""
    level = value.strip().lower()
    if level not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(
            f"unknown log level {value!r}; fix: use one of {', '.join(LOG_LEVELS)}"
        )
    return level


def add_log_level(parser: argparse.ArgumentParser, what: str = "log level") -> None:
    """``--log-level`` of the server-starting subcommands (default info)."""
    parser.add_argument(
        "--log-level",
        default="info",
        type=log_level,
        metavar="LEVEL",
        help=f"{what}: {', '.join(LOG_LEVELS)} (default info)",
    )


def setup_logging(level: str = "INFO", fmt: str = "text") -> None:
    """One-line logs on stderr: plain text, or one JSON object per line (``fmt="json"``) for
    log pipelines (Loki, Elasticsearch) that would otherwise parse text with regexes. Nothing
    the project logs holds a prompt, an output, a header or a token (log calls pass types and
    counts, not payloads); the JSON form adds no field beyond the text form's."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        JsonFormatter()
        if fmt == "json"
        else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.DEBUG),  # uvicorn's "trace" -> DEBUG
        handlers=[handler],
        force=fmt == "json",  # replace any handler set earlier, so no line stays plain text
    )


class JsonFormatter(logging.Formatter):
    """``{"time", "level", "logger", "message"}`` (plus ``exception`` with a traceback): the
    fields of the text format, no more, so JSON adds structure and never data."""

    def format(self, record: logging.LogRecord) -> str:
        import json
        from datetime import datetime, timezone

        doc = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return json.dumps(doc, ensure_ascii=False, default=str)


def fail(command: str, message: str) -> int:
    print(f"dsv4-sidecar {command}: error: {message}", file=sys.stderr)
    return 2
