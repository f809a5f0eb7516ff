"""The wire form of one sampled exchange, from the tap's own process to the sidecar's ingest.

`dsv4-sidecar tap` runs the proxy in its own process (docs/tap.md, "Its own process") and
posts each sampled exchange to ``POST /api/v1/samples`` with this content type. The body is
one line of JSON metadata, then the request body, then the response body, as the tap captured
them: the tap neither parses nor re-encodes a 7 MB answer on its loop (the sidecar's grading
process decodes it, exactly as it decodes the in-process tap's exchanges).

    {"request_bytes": N, "streaming": bool, "concurrency": N, "request_id": str|null}\\n
    <N request bytes><the rest: response bytes>

Only complete HTTP 200 answers are sent (the tap filters them first, as the in-process
hand-off does), so the sidecar grades everything it accepts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from exporter.samplers.tap.sampling import CapturedExchange

CONTENT_TYPE = "application/vnd.dsv4.tap-exchange"
MAX_META_BYTES = 1024
"""The metadata line is a few numbers and an id of at most 128 characters."""


class HandoverError(ValueError):
    """The body is not a tap exchange; ``reason`` is an ingest rejection reason."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.reason = "not_a_sample"


@dataclass(frozen=True, slots=True)
class Handover:
    """An exchange as the sidecar receives it: what ``decode.from_exchange`` reads."""

    request_body: bytes
    response_body: bytes
    streaming: bool
    concurrency: int
    request_id: str | None


def encode(exchange: CapturedExchange) -> list[bytes]:
    """The body's pieces (metadata line, request, response): no joined copy is made here."""
    meta = {
        "request_bytes": len(exchange.request_body),
        "streaming": exchange.streaming,
        "concurrency": exchange.concurrency,
        "request_id": exchange.request_id,
    }
    line = json.dumps(meta, separators=(",", ":")).encode() + b"\n"
    return [line, exchange.request_body, exchange.response_body]


def decode(body: bytes | bytearray) -> Handover:
    """The exchange in ``body``; :class:`HandoverError` names what is wrong with it."""
    end = body.find(b"\n", 0, MAX_META_BYTES)
    if end < 0:
        raise HandoverError(f"no metadata line within the first {MAX_META_BYTES} bytes")
    try:
        meta = json.loads(bytes(body[:end]))
    except ValueError:
        raise HandoverError("the metadata line is not JSON") from None
    if not isinstance(meta, dict):
        raise HandoverError("the metadata line is not a JSON object")
    n, streaming = _count(meta.get("request_bytes")), meta.get("streaming")
    concurrency, request_id = _count(meta.get("concurrency")), meta.get("request_id")
    start = end + 1
    if n is None or start + n > len(body):
        raise HandoverError("request_bytes must be a count within the body")
    if not isinstance(streaming, bool) or concurrency is None:
        raise HandoverError("streaming must be a boolean and concurrency a count")
    if request_id is not None and not (isinstance(request_id, str) and len(request_id) <= 128):
        raise HandoverError("request_id must be a string of at most 128 characters or null")
    return Handover(
        request_body=bytes(body[start : start + n]),
        response_body=bytes(body[start + n :]),
        streaming=streaming,
        concurrency=concurrency,
        request_id=request_id,
    )


def _count(value: object) -> int | None:
    """``value`` when it is a non-negative integer (not a boolean), else None."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None
