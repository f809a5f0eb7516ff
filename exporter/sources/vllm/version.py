"""vLLM's ``/version`` and ``/v1/models`` as validated facts.

A pure parser: decoded JSON in, :class:`VllmFacts` out, no I/O. vLLM serves no endpoint with
its server args (``/server_info`` exists only under ``VLLM_SERVER_DEV_MODE``), so the facts
are few: the release (``{"version": "0.24.0"}``) and the served model name (the first id of
``/v1/models``: what clients send as ``model``, the canary too). Strings that become label
values or request fields are matched or length-capped; a wrong shape raises
:class:`ShapeError` naming the field.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from exporter.sources.sglang.server_info import MAX_MODEL_PATH, ShapeError

_VERSION = re.compile(r"[0-9A-Za-z.+_-]{1,64}")


@dataclass(frozen=True)
class VllmFacts:
    """What the sidecar needs from vLLM's identity endpoints."""

    version: str
    served_model_name: str | None = None
    max_model_len: int | None = None


def parse_version(d: Any) -> str:
    """The release string of a ``/version`` answer (``unparseable`` when it is not a sane one,
    so it never becomes an odd label value)."""
    if not isinstance(d, Mapping) or "version" not in d:
        raise ShapeError("/version is not a JSON object with 'version'")
    version = str(d.get("version"))
    return version if _VERSION.fullmatch(version) else "unparseable"


def release_of(facts: VllmFacts | None) -> str | None:
    """The release vLLM's ``GET /version`` reported (``{"version": VLLM_VERSION}``,
    vllm/entrypoints/serve/instrumentator/basic.py in every release 0.23-0.34), for the DSML
    grader's per-release rules (:mod:`exporter.dsml.vllm_releases`); None until it answered or
    when the string was not a sane one."""
    if facts is None or facts.version == "unparseable":
        return None
    return facts.version


def parse_models(d: Any) -> tuple[str | None, int | None]:
    """(served model name, max_model_len) of the first model of a ``/v1/models`` answer."""
    if not isinstance(d, Mapping) or not isinstance(d.get("data"), list):
        raise ShapeError("/v1/models is not a JSON object with a 'data' list")
    for entry in d["data"]:
        if not isinstance(entry, Mapping):
            continue
        name = entry.get("id")
        if isinstance(name, str) and 0 < len(name) <= MAX_MODEL_PATH:
            n = entry.get("max_model_len")
            ok = isinstance(n, int) and not isinstance(n, bool) and 0 < n <= 1 << 24
            return name, n if ok else None
    return None, None
