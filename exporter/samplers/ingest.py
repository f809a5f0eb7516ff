"""Ingest API parsing: turn a POST body into grading requests, naming every problem precisely.

Accepted bodies: one sample, a JSON list of them, or ``{"samples": [...]}``; each sample is
any shape :func:`exporter.samplers.decode.from_json` reads. Invalid items are rejected one by
one with the reason; valid ones in the same batch are still graded. The body is read with a
size and a depth bound (:func:`exporter.samplers.decode.loads_bounded`): a body that breaks
one is refused whole, with its reason, before anything is queued.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from exporter.samplers.decode import (
    MAX_DEPTH,
    GradingRequest,
    SampleError,
    from_json,
    loads_bounded,
)

MAX_BATCH = 1000
BODY_MAX_DEPTH = 4 * MAX_DEPTH
"""The body as a whole may nest deeper than one sample may, so that one item too deep is
rejected alone (reason ``too_deep``) while the rest of its batch is graded."""


class IngestError(ValueError):
    """The whole body is unusable: ``status`` (400 or 413) and a documented ``reason``."""

    def __init__(self, reason: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.reason = reason
        self.status = status


@dataclass
class Rejected:
    index: int
    reason: str
    error: str

    def to_json(self) -> dict[str, int | str]:
        return {"index": self.index, "reason": self.reason, "error": self.error}


@dataclass
class Parsed:
    samples: list[GradingRequest]
    rejected: list[Rejected] = field(default_factory=list)


def parse_buffer(buffer: bytearray) -> Parsed:
    """Parse a request body read into ``buffer``, consuming it: the buffer is emptied as soon
    as its text is decoded, so the raw bytes, the text and the decoded JSON never all exist
    at once (a body's worst case is its text plus its JSON, not three copies)."""
    try:
        text = buffer.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise IngestError(
            "invalid_json", f"body is not valid JSON: invalid UTF-8 at byte {exc.start}"
        ) from None
    finally:
        buffer.clear()
    return parse_body(text)


def parse_body(raw: bytes | str, *, max_bytes: int | None = None) -> Parsed:
    try:
        body = loads_bounded(raw, max_bytes=max_bytes, max_depth=BODY_MAX_DEPTH)
    except SampleError as exc:
        raise IngestError(exc.reason, str(exc), 413 if exc.reason == "too_large" else 400) from None
    if isinstance(body, dict) and "samples" in body:
        body = body["samples"]
        if not isinstance(body, list):
            raise IngestError("not_a_sample", "'samples' must be a list of samples")
    items = body if isinstance(body, list) else [body]
    if not items:
        raise IngestError("not_a_sample", "no samples in the body")
    if len(items) > MAX_BATCH:
        raise IngestError(
            "too_large", f"batch of {len(items)} samples exceeds the limit of {MAX_BATCH}", 413
        )
    parsed = Parsed([])
    for i, item in enumerate(items):
        try:
            parsed.samples.append(from_json(item, source="ingest"))
        except SampleError as exc:
            parsed.rejected.append(Rejected(i, exc.reason, str(exc)))
    return parsed
