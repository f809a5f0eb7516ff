"""Bounded reads of what SGLang sends back: body size and JSON nesting depth.

SGLang is trusted to be SGLang, not to be small. Without a cap, one answer of 1.5 GB (a
misbehaving proxy in front of it, a wrong port, a debug endpoint) drove the poller to 2.9 GB RSS
against a 256 Mi container limit, and a 50,000-level JSON array raised ``RecursionError`` out of
``json.loads``, which nobody caught. Every body the sidecar reads from SGLang (``/server_info``,
``/metrics``, canary answers, and what ``loadgen`` and ``repro`` read) goes through
:func:`read_capped` and every JSON body through
:func:`loads_bounded`, and both fail with a :class:`BodyRejected` whose ``reason`` is one of
:data:`REASONS` (documented label values of the callers' error counters).
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp

# Label values a rejection is counted under (each caller lists them in its own reasons).
TOO_LARGE = "too_large"
TOO_DEEP = "too_deep"
REASONS = (TOO_LARGE, TOO_DEEP)

# Defaults: a DSV4 /server_info is ~10 KB with depth 4; SGLang's /metrics at dp=8 with
# histograms is a few MB; a canary answer (max_tokens <= a few thousand) is well under 1 MB.
SERVER_INFO_MAX_BYTES = 1 << 20
METRICS_MAX_BYTES = 16 << 20
CANARY_MAX_BYTES = 4 << 20
# A load generator's or repro's answer: streamed, up to tens of thousands of tokens at a few
# hundred bytes per SSE event.
ANSWER_MAX_BYTES = 16 << 20
MAX_JSON_DEPTH = 64

_READ_CHUNK = 64 << 10


class BodyRejected(ValueError):
    """A body over the size cap or a JSON document nested deeper than allowed."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


async def read_capped(resp: aiohttp.ClientResponse, limit: int) -> bytes:
    """The response body, read in chunks, never holding more than ``limit`` bytes.

    A declared ``Content-Length`` over the cap is refused before reading; an undeclared or
    chunked body is read until it passes the cap, then the connection is dropped (the caller's
    ``async with`` releases it), so an endless stream costs at most ``limit`` + one chunk.
    """
    declared = resp.content_length
    if declared is not None and declared > limit:
        resp.close()
        raise BodyRejected(TOO_LARGE, f"body of {declared} bytes declared, cap is {limit}")
    buf = bytearray()
    async for piece in resp.content.iter_chunked(_READ_CHUNK):
        buf += piece
        if len(buf) > limit:
            resp.close()
            raise BodyRejected(TOO_LARGE, f"body passed the cap of {limit} bytes")
    return bytes(buf)


def json_depth(value: Any) -> int:
    """Nesting depth of a decoded JSON value (scalars 0, ``[]`` 1), without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            deepest = max(deepest, depth)
            continue
        deepest = max(deepest, depth + 1)
        stack.extend((child, depth + 1) for child in children)
    return deepest


def loads_bounded(data: bytes | str, max_bytes: int, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads`` with a size and a depth bound.

    Raises :class:`BodyRejected` (``too_large`` / ``too_deep``) or ``ValueError`` (not JSON,
    not UTF-8). The C decoder recurses once per level and raises ``RecursionError`` near the
    interpreter's limit (~1000); that is turned into ``too_deep``, and anything that decoded is
    then held to ``max_depth``.
    """
    if len(data) > max_bytes:
        raise BodyRejected(TOO_LARGE, f"JSON of {len(data)} bytes, cap is {max_bytes}")
    try:
        value = json.loads(data)
    except RecursionError:
        raise BodyRejected(TOO_DEEP, "JSON nested deeper than the decoder allows") from None
    depth = json_depth(value)
    if depth > max_depth:
        raise BodyRejected(TOO_DEEP, f"JSON nested {depth} levels deep, limit is {max_depth}")
    return value
