"""Tool-calling prompts for the canary and the load generator.

A small built-in set of realistic tool tasks (``canary_prompts.json``), replaceable with a
file of ``{messages, tools}`` objects (a JSON list, or JSON Lines).
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any


class PromptsError(ValueError):
    """The prompts file is unusable; the message says what to fix."""


def load_prompts(
    path: Path | None = None, builtin: str = "canary_prompts.json"
) -> list[dict[str, Any]]:
    """The built-in prompts (``canary_prompts.json``, or ``canary_long_prompts.json`` for the
    long-generation profile), or a user file (JSON list, or JSON Lines) of {messages, tools}."""
    if path is None:
        text = resources.files("exporter.samplers").joinpath(builtin).read_text("utf-8")
        origin = f"built-in prompts {builtin}"
    else:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise PromptsError(f"cannot read canary prompts {path}: {exc.strerror}") from exc
        origin = str(path)
    try:
        data = json.loads(text)
    except ValueError:
        try:
            data = [json.loads(line) for line in text.splitlines() if line.strip()]
        except ValueError as exc:
            raise PromptsError(f"{origin}: neither a JSON list nor JSON Lines ({exc})") from exc
    if not isinstance(data, list) or not data:
        raise PromptsError(f"{origin}: expected a non-empty list of prompts")
    for i, p in enumerate(data):
        if not isinstance(p, dict) or not isinstance(p.get("messages"), list) or not p["messages"]:
            raise PromptsError(f"{origin}: prompt {i} needs a non-empty 'messages' list")
        if "tools" in p and not isinstance(p["tools"], list):
            raise PromptsError(f"{origin}: prompt {i} field 'tools' must be a list")
    return data
