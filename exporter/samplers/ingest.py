"""Ingest API parsing: turn a POST body into Samples, naming every problem precisely.

Accepted bodies: one sample object, a JSON list of them, or ``{"samples": [...]}``. A sample is
``{"text": str}`` or ``{"response": <OpenAI chat completion or list of SSE chunk objects>}``
or an OpenAI chat completion object itself, with optional ``concurrency``, ``request_id``,
``grammar``, ``finish_reason`` and ``tools``. Invalid items are rejected one by one with the
reason; valid ones in the same batch are still graded.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from exporter.samplers.grading import Sample

MAX_BATCH = 1000
GRAMMARS = ("v4", "v4.1", "v3.2")


class IngestError(ValueError):
    """The whole body is unusable (400)."""


@dataclass
class Parsed:
    samples: list[Sample]
    rejected: list[dict[str, Any]]


def parse_body(raw: bytes) -> Parsed:
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise IngestError(f"body is not valid JSON: {exc}") from None
    if isinstance(body, dict) and "samples" in body:
        body = body["samples"]
    items = body if isinstance(body, list) else [body]
    if not items:
        raise IngestError("no samples in the body")
    if len(items) > MAX_BATCH:
        raise IngestError(f"batch of {len(items)} samples exceeds the limit of {MAX_BATCH}")
    samples, rejected = [], []
    for i, item in enumerate(items):
        try:
            samples.append(_one(item))
        except ValueError as exc:
            rejected.append({"index": i, "error": str(exc)})
    return Parsed(samples, rejected)


def _one(item: Any) -> Sample:
    if not isinstance(item, dict):
        raise ValueError("a sample must be a JSON object")
    if "choices" in item:  # an OpenAI chat completion object given directly
        item = {"response": item}
    text, response = item.get("text"), item.get("response")
    if (text is None) == (response is None):
        raise ValueError("give exactly one of 'text' (string) or 'response' (OpenAI object)")
    if text is not None and not isinstance(text, str):
        raise ValueError("'text' must be a string")
    if response is not None and not isinstance(response, (dict, list)):
        raise ValueError("'response' must be an OpenAI chat completion object or chunk list")
    conc = item.get("concurrency")
    if conc is not None and (isinstance(conc, bool) or not isinstance(conc, int) or conc < 0):
        raise ValueError("'concurrency' must be a non-negative integer")
    rid = item.get("request_id")
    if rid is not None and not isinstance(rid, str):
        raise ValueError("'request_id' must be a string")
    grammar = item.get("grammar")
    if grammar is not None and grammar not in GRAMMARS:
        raise ValueError(f"'grammar' must be one of {GRAMMARS}")
    tools = item.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise ValueError("'tools' must be a list of names or OpenAI tool objects")
    finish = item.get("finish_reason")
    if finish is not None and not isinstance(finish, str):
        raise ValueError("'finish_reason' must be a string")
    return Sample(
        source="ingest",
        text=text,
        response=response,
        concurrency=conc,
        request_id=rid,
        grammar=grammar,
        finish_reason=finish,
        tools=tools,
    )
