"""One way in for samples: every shape an output arrives in becomes one typed
:class:`GradingRequest`.

Four callers used to decode the same shapes four ways (ingest, ``scan``, repro sample files,
the tap), each with its own idea of what a valid field is. Now they all call this module:

- :func:`from_json` reads one decoded JSON sample: ``{"text": ...}``, ``{"response": ...}``,
  a bare OpenAI chat completion, or a list of SSE chunk objects, with the optional
  ``concurrency``, ``request_id``, ``grammar``, ``finish_reason``, ``tools`` and ``thinking``
  fields. Every problem is a :class:`SampleError` that names the field and the fix.
- :func:`from_exchange` wraps what the tap captured (raw request and response bytes); the
  bytes are decoded by :func:`resolve` in the grading thread, never on the proxy's loop.
- :func:`loads_bounded` is the only JSON reader for sample input: a size and a depth bound,
  and a documented reason (``too_large``, ``too_deep``, ``invalid_json``) instead of a
  ``RecursionError`` or a traceback.
- :func:`grade` grades a request with the DSML grader, text samples included under the same
  ``max_chars`` head-and-tail cap as OpenAI-shaped ones (reason ``oversized``).

The module does no I/O and keeps no state.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, replace
from typing import Protocol, TypeAlias

from exporter.dsml import DEFAULT_MAX_CHARS, Result, grade_openai_response, grade_text
from exporter.dsml.grader import normalize_grammar
from exporter.samplers.length import estimate_tokens

JsonValue: TypeAlias = "bool | int | float | str | list[JsonValue] | dict[str, JsonValue] | None"
JsonObject: TypeAlias = "dict[str, JsonValue]"

MAX_DEPTH = 64
"""Deepest JSON nesting any sample may have. A chat completion with tool-call arguments is
about 8 levels deep and a tool's JSON schema rarely more than 10; 64 leaves room for real
schemas while keeping every walk over the value shallow."""

ERROR_REASONS = ("invalid_json", "too_large", "too_deep", "not_a_sample", "bad_field")
"""Closed set of :attr:`SampleError.reason` codes (documented in docs/sampling.md)."""


class SampleError(ValueError):
    """An input that is not a gradable sample. ``reason`` is one of :data:`ERROR_REASONS`;
    the message says what is wrong and how to fix it, and never quotes the sample."""

    def __init__(self, reason: str, message: str) -> None:
        if reason not in ERROR_REASONS:
            raise ValueError(f"undocumented sample error reason {reason!r}")
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class TextOutput:
    """A raw completion (``/generate`` text, a gateway's raw string)."""

    text: str
    finish_reason: str | None = None
    completion_tokens: int | None = None  # /generate's meta_info.completion_tokens


@dataclass(frozen=True, slots=True)
class ResponseOutput:
    """An OpenAI chat completion object, a list of SSE chunk objects, or raw SSE bytes."""

    response: JsonObject | list[JsonValue] | bytes


@dataclass(frozen=True, slots=True)
class ExchangeOutput:
    """A tap's raw bodies, still undecoded: :func:`resolve` turns them into one of the above
    in the grading thread, so the proxy's loop never parses JSON."""

    request_body: bytes
    response_body: bytes
    streaming: bool


Output: TypeAlias = TextOutput | ResponseOutput | ExchangeOutput


@dataclass(frozen=True, slots=True)
class GradingRequest:
    """One output to grade and what is known about it.

    ``size`` is the approximate memory the request holds, in bytes; the grading queue bounds
    the sum of it. ``grammar`` is already normalised (``v4``, ``v4.1``, ``v3.2`` or None for auto).
    """

    source: str
    output: Output
    concurrency: int | None = None
    request_id: str | None = None
    grammar: str | None = None
    tools: list[JsonValue] | JsonObject | None = None
    thinking: bool | None = None
    size: int = 0


class CapturedExchangeLike(Protocol):
    """What :func:`from_exchange` reads from the tap's captured exchange."""

    @property
    def request_body(self) -> bytes: ...
    @property
    def response_body(self) -> bytes: ...
    @property
    def streaming(self) -> bool: ...
    @property
    def concurrency(self) -> int: ...
    @property
    def request_id(self) -> str | None: ...


# --- bounded JSON ---------------------------------------------------------------------------


def loads_bounded(
    raw: bytes | str, *, max_bytes: int | None = None, max_depth: int = MAX_DEPTH
) -> JsonValue:
    """Parse JSON with a size and a depth bound; :class:`SampleError` on any problem.

    The C decoder raises ``RecursionError`` on very deep input before it could exhaust the
    stack; that becomes ``too_deep``, and anything it accepted is then checked against
    ``max_depth`` without recursion."""
    if max_bytes is not None and len(raw) > max_bytes:
        raise SampleError("too_large", f"body of {len(raw)} bytes exceeds {max_bytes} bytes")
    try:
        value: JsonValue = json.loads(raw)
    except RecursionError:
        raise SampleError("too_deep", _deep_message(max_depth)) from None
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        raise SampleError("invalid_json", f"body is not valid JSON: {_json_error(exc)}") from None
    measure(value, max_depth)
    return value


def measure(value: JsonValue, max_depth: int = MAX_DEPTH) -> int:
    """Approximate bytes a decoded JSON value holds (strings and containers); raises
    ``too_deep`` when containers nest deeper than ``max_depth``. Iterative: no recursion."""
    size = 0
    stack: list[tuple[JsonValue, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            size += sys.getsizeof(item)
        elif isinstance(item, dict | list):
            if depth > max_depth:
                raise SampleError("too_deep", _deep_message(max_depth))
            size += sys.getsizeof(item)
            if isinstance(item, dict):
                for key, child in item.items():
                    size += sys.getsizeof(key)
                    stack.append((child, depth + 1))
            else:
                stack.extend((child, depth + 1) for child in item)
        else:
            size += 32
    return size


def _deep_message(max_depth: int) -> str:
    return f"JSON nested deeper than {max_depth} levels; flatten it"


def _json_error(exc: ValueError) -> str:
    """The decoder's message without any of the input (a UnicodeDecodeError quotes bytes)."""
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} at line {exc.lineno} column {exc.colno}"
    if isinstance(exc, UnicodeDecodeError):
        return f"invalid UTF-8 at byte {exc.start}"
    return type(exc).__name__


# --- JSON samples (ingest, scan, sample files) ----------------------------------------------


def from_json(
    value: JsonValue,
    *,
    source: str,
    grammar: str | None = None,
    thinking: bool | None = None,
    max_depth: int = MAX_DEPTH,
) -> GradingRequest:
    """One decoded JSON sample as a request; ``grammar``/``thinking`` are the caller's
    defaults for samples that do not say. :class:`SampleError` names what is wrong."""
    size = measure(value, max_depth)
    fields: JsonObject = {}
    output: Output
    if isinstance(value, list):
        output = ResponseOutput(value)  # SSE chunk objects
    elif not isinstance(value, dict):
        raise SampleError(
            "not_a_sample",
            'a sample must be a JSON object ({"text": ...} or {"response": ...}), '
            "a chat completion, or a list of stream chunks",
        )
    elif "choices" in value:
        output = ResponseOutput(value)  # an OpenAI chat completion given as it is
    else:
        fields = value
        output = _output(value)
    return GradingRequest(
        source=source,
        output=output,
        concurrency=_concurrency(fields.get("concurrency")),
        request_id=_optional_str(fields, "request_id"),
        grammar=_grammar(fields.get("grammar"), grammar),
        tools=_tools(fields.get("tools")),
        thinking=_thinking(fields.get("thinking"), thinking),
        size=size,
    )


def _output(fields: JsonObject) -> Output:
    text, response = fields.get("text"), fields.get("response")
    if (text is None) == (response is None):
        raise SampleError(
            "not_a_sample",
            "give exactly one of 'text' (string) or 'response' (OpenAI object)",
        )
    finish = _optional_str(fields, "finish_reason")
    if text is not None:
        if not isinstance(text, str):
            raise SampleError("bad_field", "'text' must be a string")
        return TextOutput(text, finish)
    if not isinstance(response, dict | list):
        raise SampleError(
            "bad_field",
            "'response' must be an OpenAI chat completion object or a list of stream chunks",
        )
    return ResponseOutput(response)


def _concurrency(value: JsonValue) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise SampleError("bad_field", "'concurrency' must be a non-negative integer")
    return value


def _optional_str(fields: JsonObject, key: str) -> str | None:
    value = fields.get(key)
    if value is not None and not isinstance(value, str):
        raise SampleError("bad_field", f"'{key}' must be a string")
    return value


def _grammar(value: JsonValue, default: str | None) -> str | None:
    if value is None:
        return default
    if not isinstance(value, str):
        raise SampleError("bad_field", "'grammar' must be a string: v4, v4.1, v3.2 or auto")
    try:
        return normalize_grammar(value)
    except ValueError:
        raise SampleError("bad_field", "'grammar' must be one of v4, v4.1, v3.2 or auto") from None


def _tools(value: JsonValue) -> list[JsonValue] | JsonObject | None:
    if value is not None and not isinstance(value, list | dict):
        raise SampleError(
            "bad_field",
            "'tools' must be a list of names or OpenAI tool objects (or {name: JSON schema})",
        )
    return value


def _thinking(value: JsonValue, default: bool | None) -> bool | None:
    if value is None:
        return default
    if not isinstance(value, bool):
        raise SampleError("bad_field", "'thinking' must be true, false or null")
    return value


# --- the tap's captured exchange ------------------------------------------------------------


def from_exchange(exchange: CapturedExchangeLike) -> GradingRequest:
    """The tap's exchange as a request; nothing is parsed here (this runs on the loop)."""
    output = ExchangeOutput(exchange.request_body, exchange.response_body, exchange.streaming)
    return GradingRequest(
        source="tap",
        output=output,
        concurrency=exchange.concurrency,
        request_id=exchange.request_id,
        size=len(output.request_body) + len(output.response_body),
    )


def resolve(request: GradingRequest) -> GradingRequest:
    """Decode a tap exchange into a text or response output plus the request's tools.

    A client's malformed request only loses the tool list (it is not the model's output);
    a response body that is not JSON, or is nested too deep to be a completion, is graded as
    the raw text it is. Other requests are returned as they are."""
    output = request.output
    if not isinstance(output, ExchangeOutput):
        return request
    tools: list[JsonValue] | None = None
    try:
        asked = loads_bounded(output.request_body or b"{}")
        if isinstance(asked, dict) and isinstance(asked.get("tools"), list):
            tools = asked["tools"]  # type: ignore[assignment]
    except SampleError:
        pass
    body = output.response_body
    if output.streaming:
        return replace(request, output=ResponseOutput(body), tools=tools)
    try:
        decoded = loads_bounded(body)
    except SampleError:
        return replace(request, output=TextOutput(body.decode("utf-8", "replace")), tools=tools)
    if isinstance(decoded, dict) and "text" in decoded and "choices" not in decoded:
        # SGLang's /generate answer: {"text": ..., "meta_info": {"finish_reason": ...}}
        meta = decoded.get("meta_info")
        finish = meta.get("finish_reason") if isinstance(meta, dict) else None
        if isinstance(finish, dict):
            finish = finish.get("type")
        text = decoded["text"]
        used = meta.get("completion_tokens") if isinstance(meta, dict) else None
        return replace(
            request,
            output=TextOutput(
                text if isinstance(text, str) else json.dumps(text),
                finish if isinstance(finish, str) else None,
                used if isinstance(used, int) and not isinstance(used, bool) else None,
            ),
            tools=tools,
        )
    if isinstance(decoded, dict | list):
        return replace(request, output=ResponseOutput(decoded), tools=tools)
    return replace(request, output=TextOutput(body.decode("utf-8", "replace")), tools=tools)


# --- grading --------------------------------------------------------------------------------


def grade(
    request: GradingRequest, *, max_chars: int = DEFAULT_MAX_CHARS, dialect: str | None = None
) -> Result:
    """Grade one request with the DSML grader. Text longer than ``max_chars`` is graded on
    its head and tail (reason ``oversized``), exactly like a chat completion's channels.
    ``dialect`` is the deployment's (exporter.dsml.dialect), used when the sample does not
    name its grammar: a block in another dialect is graded as what SGLang's parser returns."""
    request = resolve(request)
    output, tools = request.output, request.tools
    grammar = request.grammar or dialect
    if isinstance(output, TextOutput):
        return grade_text(
            output.text,
            grammar=grammar,
            finish_reason=output.finish_reason,
            tools=tools,
            thinking=request.thinking,
            max_chars=max_chars,
        )
    assert not isinstance(output, ExchangeOutput)  # resolve() decoded it
    return grade_openai_response(
        output.response,
        grammar=grammar,
        tools=tools,
        thinking=request.thinking,
        max_chars=max_chars,
    )


# --- output length ----------------------------------------------------------------------------

_USAGE = re.compile(rb'"completion_tokens"\s*:\s*(\d{1,9})')
# a streamed delta with text: content, reasoning (SGLang's reasoning_content, vLLM's reasoning)
# or tool-call arguments
_DELTA = re.compile(rb'"(?:content|reasoning_content|reasoning|arguments)"\s*:\s*"(?!")')


def _usage_of(obj: object) -> int | None:
    if isinstance(obj, dict):
        usage = obj.get("usage")
        if isinstance(usage, dict):
            n = usage.get("completion_tokens")
            if isinstance(n, int) and not isinstance(n, bool) and n >= 0:
                return n
    return None


def output_tokens(request: GradingRequest, result: Result) -> tuple[int, str]:
    """(output tokens, how they were counted) for a resolved request: ``usage`` (the
    response's ``usage.completion_tokens``, /generate's ``meta_info.completion_tokens``),
    ``stream`` (streamed deltas with text, one per decode step unless the server batches them),
    or ``estimate`` (from the graded text's characters, exporter.samplers.length)."""
    output = request.output
    if isinstance(output, TextOutput) and output.completion_tokens is not None:
        return output.completion_tokens, "usage"
    if isinstance(output, ResponseOutput):
        body = output.response
        if isinstance(body, dict):
            n = _usage_of(body)
            if n is not None:
                return n, "usage"
        elif isinstance(body, list):
            for chunk in reversed(body):
                n = _usage_of(chunk)
                if n is not None:
                    return n, "usage"
            deltas = sum(
                1
                for c in body
                if isinstance(c, dict) and _DELTA.search(json.dumps(c, ensure_ascii=False).encode())
            )
            if deltas:
                return deltas, "stream"
        elif isinstance(body, bytes):
            found = _USAGE.findall(body[-4096:])
            if found:
                return int(found[-1]), "usage"
            deltas = sum(
                1 for line in body.split(b"\n") if line.startswith(b"data:") and _DELTA.search(line)
            )
            if deltas:
                return deltas, "stream"
    return estimate_tokens(result.text), "estimate"
