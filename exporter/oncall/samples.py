"""Graded samples as JSON Lines: what `repro --out` writes and `triage --scan` reads.

One line is ``{"response": <OpenAI chat completion>, "tools": [...], "grammar": "v4"}``
(streamed answers reassembled into one completion) plus our metadata (``arm``, ``url``,
``level``, ``concurrency``, ``verdict``, ``reasons``): the shape `dsv4-sidecar scan` grades
with the request's tools, and the sidecar's ingest API accepts as it is. Raw-text lines
``{"text": ..., "grammar": "v4", "finish_reason": ..., "tools": [...]}`` and bare
completion objects are read too. Text is redacted before it is written: these files get
attached to tickets.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exporter.dsml import Result, reassemble
from exporter.samplers.decode import SampleError, from_json, grade, loads_bounded
from exporter.samplers.redact import Redactor
from exporter.sources.bounded import (
    TRIAGE_FILE_MAX_BYTES,
    TRIAGE_FILE_SECONDS,
    BoundedReader,
    open_local,
    read_lines,
)

# Lines longer than this are counted as unreadable rather than parsed (a runaway generation
# or a binary file must not take the triage process down).
MAX_LINE_BYTES = 16 << 20


def completion_object(response: Any) -> dict[str, Any] | None:
    """A chat completion object for a non-streamed answer (as is) or a list of SSE chunk
    objects (reassembled), so every written line has the same shape."""
    if isinstance(response, dict) and "choices" in response:
        return response
    if not isinstance(response, list):
        return None
    asm = reassemble(response)
    if asm.error is not None:
        return None
    message: dict[str, Any] = {"role": "assistant", "content": asm.content or None}
    if asm.reasoning:
        message["reasoning_content"] = asm.reasoning
    if asm.calls:
        message["tool_calls"] = [
            {
                "id": f"call_{i}",
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments},
            }
            for i, c in enumerate(asm.calls)
        ]
    first = next((c for c in response if isinstance(c, dict)), {})
    return {
        "id": first.get("id"),
        "object": "chat.completion",
        "model": first.get("model"),
        "choices": [{"index": 0, "message": message, "finish_reason": asm.finish_reason}],
    }


def redact_completion(obj: dict[str, Any], redactor: Redactor) -> dict[str, Any]:
    """A copy of a completion whose free-text fields (content, reasoning, tool arguments)
    went through the redactor. Structure and every other field are kept for re-grading."""
    out = dict(obj)
    choices = []
    for choice in obj.get("choices") or []:
        if not isinstance(choice, dict):
            continue
        choice = dict(choice)
        msg = choice.get("message")
        if isinstance(msg, dict):
            msg = dict(msg)
            for key in ("content", "reasoning_content"):
                if isinstance(msg.get(key), str):
                    msg[key] = redactor(msg[key])
            calls = []
            for call in msg.get("tool_calls") or []:
                if isinstance(call, dict) and isinstance(call.get("function"), dict):
                    fn = dict(call["function"])
                    if isinstance(fn.get("arguments"), str):
                        fn["arguments"] = redactor(fn["arguments"])
                    call = {**call, "function": fn}
                calls.append(call)
            if calls:
                msg["tool_calls"] = calls
            choice["message"] = msg
        choices.append(choice)
    out["choices"] = choices
    return out


class SampleWriter:
    """Appends graded samples to ``DIR/samples.jsonl``, one flushed line each, so an
    interrupted run leaves every line it graded readable."""

    def __init__(self, directory: Path, redactor: Redactor | None = None) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / "samples.jsonl"
        self.redactor = redactor if redactor is not None else Redactor()
        self._fh = self.path.open("a", encoding="utf-8")
        self.lines = 0

    def write(
        self, response: Any, *, tools: list[Any] | None, grammar: str, meta: dict[str, Any]
    ) -> bool:
        obj = completion_object(response)
        if obj is None:
            return False
        line = {
            "response": redact_completion(obj, self.redactor),
            "tools": tools or [],
            "grammar": grammar,
            **meta,
        }
        self._fh.write(json.dumps(line, ensure_ascii=False, sort_keys=True) + "\n")
        self._fh.flush()
        self.lines += 1
        return True

    def close(self) -> None:
        self._fh.close()


@dataclass(frozen=True)
class GradedLine:
    """One line of a sample file after offline grading."""

    verdict: str
    reasons: tuple[str, ...]
    concurrency: int | None
    arm: str | None
    # `repro --out` metadata: which run wrote the line (triage recognises the samples a
    # repro result already counts by arm, URL and time)
    url: str | None = None
    time: float | None = None


def grade_line(obj: Any) -> Result | None:
    """Grade one decoded JSONL line of any accepted shape; None when it is not a sample."""
    try:
        result = grade(from_json(obj, source="file"))
    except SampleError:
        return None
    return None if result.verdict == "error" else result


def read_graded(
    path: Path,
    max_bytes: int = TRIAGE_FILE_MAX_BYTES,
    max_seconds: float = TRIAGE_FILE_SECONDS,
) -> Iterator[GradedLine | None]:
    """Grade every line of a JSONL file; yields None for a line that is not a sample (a line
    over MAX_LINE_BYTES included, skipped without being held). The whole file is bounded in
    bytes and time (:class:`~exporter.sources.bounded.InputRejected` past either)."""
    fd = open_local(path)
    reader = BoundedReader(fd, max_bytes, time.monotonic() + max_seconds)
    try:
        for _number, raw in read_lines(reader, MAX_LINE_BYTES):
            if raw is None:
                yield None
                continue
            if not raw.strip():
                continue
            try:
                obj = loads_bounded(raw, max_bytes=MAX_LINE_BYTES)
                request = from_json(obj, source="file")
            except SampleError:
                yield None
                continue
            result = grade(request)
            if result.verdict == "error":
                yield None
                continue
            meta = obj if isinstance(obj, dict) else {}
            arm, url, when = meta.get("arm"), meta.get("url"), meta.get("time")
            yield GradedLine(
                result.verdict,
                result.reasons,
                request.concurrency,
                arm if isinstance(arm, str) else None,
                url if isinstance(url, str) else None,
                float(when)
                if isinstance(when, (int, float)) and not isinstance(when, bool)
                else None,
            )
    finally:
        os.close(fd)
