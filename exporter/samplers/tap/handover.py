"""The wire form of sampled exchanges, from the tap's own process to the sidecar's ingest.

`dsv4-sidecar tap` runs the proxy in its own process (docs/tap.md, "Its own process") and
posts sampled exchanges to ``POST /api/v1/samples`` with this content type, several to a body
when several are waiting (one post per sample would cost the tap an HTTP request per sampled
small answer). A body is one or more records; a record is one line of JSON metadata, then the
request body, then the response body, as the tap captured them: the tap neither parses nor
re-encodes a 7 MB answer on its loop (the sidecar's grading process decodes it, exactly as it
decodes the in-process tap's exchanges).

    {"request_bytes": N, "response_bytes": M, "streaming": bool, "concurrency": N,
     "request_id": str|null}\n<N request bytes><M response bytes>   (repeated)

Only complete HTTP 200 answers are sent (the tap filters them first, as the in-process
hand-off does), so the sidecar grades everything it accepts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from exporter.samplers.tap.sampling import CapturedExchange

CONTENT_TYPE = "application/vnd.dsv4.tap-exchange"
MAX_META_BYTES = 1024
"""A metadata line is a few numbers and an id of at most 128 characters."""
MAX_RECORDS = 1000
"""Exchanges in one body, at most (the ingest API's batch limit for JSON samples too)."""
BATCH_BYTES = 4 << 20
"""The tap joins waiting exchanges into one body of at most this many bytes, metadata lines
included (an exchange larger than that goes alone). The sidecar's ``ingest_max_bytes`` may
not be set below it (:class:`exporter.config.SidecarSettings` refuses to start): every batch
would be refused. An exchange alone larger than ``ingest_max_bytes`` is refused by the
sidecar and counted by the tap (``sidecar_refused``), never posted again."""


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


def _meta_line(exchange: CapturedExchange) -> bytes:
    meta = {
        "request_bytes": len(exchange.request_body),
        "response_bytes": exchange.response_bytes,
        "streaming": exchange.streaming,
        "concurrency": exchange.concurrency,
        "request_id": exchange.request_id,
    }
    return json.dumps(meta, separators=(",", ":")).encode() + b"\n"


def record_bytes(exchange: CapturedExchange) -> int:
    """Bytes the exchange's record takes in a body: its metadata line, request and response."""
    return len(_meta_line(exchange)) + len(exchange.request_body) + exchange.response_bytes


def encode(exchanges: list[CapturedExchange]) -> list[bytes]:
    """The body's pieces (per exchange: metadata line, request, the response's pieces as the
    tap forwarded them), no joined copy."""
    pieces: list[bytes] = []
    for exchange in exchanges:
        pieces += [_meta_line(exchange), exchange.request_body, *exchange.response_pieces]
    return pieces


def decode(body: bytes | bytearray) -> list[Handover]:
    """The exchanges in ``body`` (at least one, at most MAX_RECORDS); :class:`HandoverError`
    names what is wrong with the first bad record, and then nothing of the body is taken."""
    out: list[Handover] = []
    at = 0
    while at < len(body) or not out:
        if len(out) >= MAX_RECORDS:
            raise HandoverError(f"more than {MAX_RECORDS} exchanges in one body")
        item, at = _record(body, at)
        out.append(item)
    return out


def _record(body: bytes | bytearray, at: int) -> tuple[Handover, int]:
    end = body.find(b"\n", at, at + MAX_META_BYTES)
    if end < 0:
        raise HandoverError(f"no metadata line within {MAX_META_BYTES} bytes at byte {at}")
    try:
        meta = json.loads(bytes(body[at:end]))
    except ValueError:
        raise HandoverError("a metadata line is not JSON") from None
    if not isinstance(meta, dict):
        raise HandoverError("a metadata line is not a JSON object")
    n, m = _count(meta.get("request_bytes")), _count(meta.get("response_bytes"))
    streaming = meta.get("streaming")
    concurrency, request_id = _count(meta.get("concurrency")), meta.get("request_id")
    start = end + 1
    if n is None or m is None or start + n + m > len(body):
        raise HandoverError("request_bytes and response_bytes must be counts within the body")
    if not isinstance(streaming, bool) or concurrency is None:
        raise HandoverError("streaming must be a boolean and concurrency a count")
    if request_id is not None and not (isinstance(request_id, str) and len(request_id) <= 128):
        raise HandoverError("request_id must be a string of at most 128 characters or null")
    item = Handover(
        request_body=bytes(body[start : start + n]),
        response_body=bytes(body[start + n : start + n + m]),
        streaming=streaming,
        concurrency=concurrency,
        request_id=request_id,
    )
    return item, start + n + m


def _count(value: object) -> int | None:
    """``value`` when it is a non-negative integer (not a boolean), else None."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None
