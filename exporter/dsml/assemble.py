"""Reassemble an OpenAI-shaped response into its channels: reasoning, content, tool calls.

A chat completion, its SSE chunk objects, or raw SSE bytes split anywhere (inside a line, a
UTF-8 character or a JSON object) become one :class:`Assembled`: each channel kept within the
size cap (head and tail), each tool call's name and arguments joined across deltas. Nothing is
graded here; :mod:`exporter.dsml.openai` grades what this returns.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from exporter.dsml import thresholds as t
from exporter.dsml.streaming import HeadTail, TextDecoder
from exporter.dsml.structure import MAX_NAME

MAX_CALLS = 128  # tool calls kept per response (indices beyond are dropped)


@dataclass
class _CallParts:
    name: list[str] = field(default_factory=list)
    name_chars: int = 0  # held in ``name``: at most MAX_NAME + 1 (one over says "too long")
    arguments: HeadTail | None = None
    parsed: dict[str, Any] | None = None  # arguments given as an object, not a string


@dataclass(frozen=True)
class AssembledCall:
    name: str
    arguments: str
    cut: tuple[int, int] | None  # (offset in arguments, characters dropped) when oversized
    given_as_object: bool = False


@dataclass(frozen=True)
class Assembled:
    """A response reassembled into its channels (each kept within the size cap)."""

    reasoning: str
    content: str
    calls: tuple[AssembledCall, ...]
    finish_reason: str | None
    reasoning_cut: tuple[int, int] | None = None
    content_cut: tuple[int, int] | None = None
    error: str | None = None
    raw: bool = False  # a text completion: content is the raw completion (no server parsing)


class Assembler:
    """Rebuilds channels from a completion object, chunk objects or raw SSE text, in pieces.

    ``feed_sse`` takes bytes or str split anywhere (inside a line, a UTF-8 character or a JSON
    object); ``feed_chunk`` takes one decoded chunk object; ``feed_completion`` a whole
    (non-streamed) response. ``result()`` gives the :class:`Assembled` channels.
    """

    def __init__(self, *, max_chars: int = t.DEFAULT_MAX_CHARS, choice: int = 0) -> None:
        self.max_chars = max_chars
        self.choice = choice
        self.reasoning = HeadTail(max_chars)
        self.content = HeadTail(max_chars)
        self.calls: dict[int, _CallParts] = {}
        self.finish_reason: str | None = None
        self.error: str | None = None
        self.done = False
        self._decoder = TextDecoder()
        # One bound for what an SSE stream can make the assembler hold before an event ends:
        # the unfinished line and the data lines of the unfinished event.
        self._held_cap = 4 * max_chars + 65536
        self._line: list[str] = []  # the unfinished line, in pieces (joined once it ends)
        self._line_chars = 0
        self._data: list[str] = []
        self._data_chars = 0
        self.raw = False  # a completions-API response: choices[].text is the raw completion
        self._sse_events = 0  # data events seen (SSE input only)
        self._sse_input = False

    # --- raw SSE -----------------------------------------------------------------------------
    def feed_sse(self, data: str | bytes | bytearray) -> None:
        self._sse_input = True
        piece = self._decoder.decode(data)
        if "\n" not in piece:  # a long line in small reads: no re-joining of what is held
            self._hold(piece)
            return
        lines = piece.split("\n")
        lines[0] = "".join(self._line) + lines[0]
        self._line, self._line_chars = [], 0
        self._hold(lines.pop())
        for line in lines:
            self._sse_line(line)

    def _hold(self, piece: str) -> None:
        self._line.append(piece)
        self._line_chars += len(piece)
        if self._line_chars > self._held_cap:
            self._fail("an SSE line exceeds the size cap")
            self._line, self._line_chars = [], 0

    def end_sse(self) -> None:
        """The byte stream ended: flush a last line or event without its blank line."""
        rest = "".join(self._line) + self._decoder.flush()
        self._line, self._line_chars = [], 0
        if rest:
            self._sse_line(rest)
        self._sse_line("")

    def _sse_line(self, line: str) -> None:
        if line.endswith("\r"):
            line = line[:-1]
        if not line:
            if self._data:
                payload = "\n".join(self._data)
                self._data, self._data_chars = [], 0
                self._sse_event(payload)
            return
        if line.startswith("data:"):
            value = line[5:]
            value = value[1:] if value.startswith(" ") else value
            self._data_chars += len(value) + 1
            if self._data_chars > self._held_cap:  # an event that never ends: drop it
                self._fail("an SSE event exceeds the size cap")
                self._data, self._data_chars = [], 0
                return
            self._data.append(value)
        # comments (":..."), event:, id: and retry: carry no text

    def _sse_event(self, payload: str) -> None:
        self._sse_events += 1
        if payload.strip() == "[DONE]":
            self.done = True
            return
        try:
            obj = json.loads(payload)
        except (ValueError, RecursionError):
            self._fail("an SSE data line is not JSON")
            return
        self.feed_chunk(obj)

    # --- objects -----------------------------------------------------------------------------
    def feed_chunk(self, obj: object) -> None:
        """One ``chat.completion.chunk`` object (``choices[i].delta``)."""
        choice = self._choice(obj)
        if choice is None:
            return
        delta = choice.get("delta")
        if not isinstance(delta, Mapping):
            delta = choice.get("message")
        if isinstance(delta, Mapping):
            self._apply(delta, streamed=True)
        elif isinstance(choice.get("text"), str):  # completions API
            self.raw = True
            self.content.append(choice["text"])
        self._finish_reason(choice)

    def feed_completion(self, obj: object) -> None:
        """A whole ``chat.completion`` (``choices[i].message``) or completions response."""
        choice = self._choice(obj)
        if choice is None:
            return
        message = choice.get("message")
        if isinstance(message, Mapping):
            self._apply(message, streamed=False)
        elif isinstance(choice.get("text"), str):
            self.raw = True
            self.content.append(choice["text"])
        self._finish_reason(choice)

    def _choice(self, obj: object) -> Mapping[str, Any] | None:
        if not isinstance(obj, Mapping):
            self._fail(f"expected a JSON object, got {type(obj).__name__}")
            return None
        if "error" in obj and "choices" not in obj:
            self._fail("the response is an error object")
            return None
        choices = obj.get("choices")
        if not isinstance(choices, list):
            self._fail("no choices list")
            return None
        for pos, choice in enumerate(choices):
            if isinstance(choice, Mapping) and choice.get("index", pos) == self.choice:
                return choice
        return None  # a chunk for another choice (or usage-only): nothing to add

    def _finish_reason(self, choice: Mapping[str, Any]) -> None:
        reason = choice.get("finish_reason")
        if isinstance(reason, str):
            self.finish_reason = reason

    def _apply(self, delta: Mapping[str, Any], *, streamed: bool) -> None:
        for key in ("reasoning_content", "reasoning"):
            value = delta.get(key)
            if isinstance(value, str):
                self.reasoning.append(value)
                break
        self.content.append(_text_of(delta.get("content")))
        calls = delta.get("tool_calls")
        if isinstance(calls, list):
            for pos, call in enumerate(calls):
                if isinstance(call, Mapping):
                    index = call.get("index", pos) if streamed else pos + len(self.calls)
                    self._apply_call(index, call)

    def _apply_call(self, index: object, call: Mapping[str, Any]) -> None:
        if not isinstance(index, int) or isinstance(index, bool):
            return
        parts = self.calls.get(index)
        if parts is None:
            if len(self.calls) >= MAX_CALLS:
                return
            parts = self.calls[index] = _CallParts()
        fn = call.get("function")
        if not isinstance(fn, Mapping):
            return
        name = fn.get("name")
        if isinstance(name, str) and parts.name_chars <= MAX_NAME:
            piece = name[: MAX_NAME + 1 - parts.name_chars]
            parts.name.append(piece)
            parts.name_chars += len(piece)
        args = fn.get("arguments")
        if isinstance(args, Mapping):
            parts.parsed = dict(args)
        elif isinstance(args, str):
            if parts.arguments is None:
                parts.arguments = HeadTail(self.max_chars)
            parts.arguments.append(args)

    def _fail(self, message: str) -> None:
        if self.error is None:
            self.error = message

    def result(self) -> Assembled:
        if self._sse_input and not self._sse_events:
            self._fail("no SSE data events")
        reasoning, r_gap, r_drop = self.reasoning.kept()
        content, c_gap, c_drop = self.content.kept()
        calls = []
        for index in sorted(self.calls):
            parts = self.calls[index]
            name = "".join(parts.name)
            if parts.parsed is not None:
                text = json.dumps(parts.parsed, ensure_ascii=False, default=str)
                calls.append(AssembledCall(name, text, None, given_as_object=True))
            elif parts.arguments is not None:
                text, gap, drop = parts.arguments.kept()
                calls.append(AssembledCall(name, text, (gap, drop) if gap is not None else None))
            else:
                calls.append(AssembledCall(name, "", None))
        return Assembled(
            reasoning,
            content,
            tuple(calls),
            self.finish_reason,
            (r_gap, r_drop) if r_gap is not None else None,
            (c_gap, c_drop) if c_gap is not None else None,
            self.error,
            self.raw and not self.calls and not reasoning,
        )


def _text_of(content: object) -> str:
    """``content`` is a string, or (some servers) a list of ``{"type": "text", "text": ...}``."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            p["text"] for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str)
        )
    return ""


def reassemble(
    response: object, *, max_chars: int = t.DEFAULT_MAX_CHARS, choice: int = 0
) -> Assembled:
    """Channels of a chat completion object, a list of chunk objects, or raw SSE bytes/str."""
    asm = Assembler(max_chars=max_chars, choice=choice)
    if isinstance(response, bytes | bytearray | str):
        raw = response.decode("utf-8", "replace") if not isinstance(response, str) else response
        if not raw.lstrip().startswith(("{", "[")):
            asm.feed_sse(raw)
            asm.end_sse()
            return asm.result()
        try:
            response = json.loads(raw)
        except (ValueError, RecursionError):
            asm._fail("not JSON and not SSE")
            return asm.result()
    if isinstance(response, list):
        if not response:
            asm._fail("an empty list of chunks")
        for chunk in response:
            asm.feed_chunk(chunk)
    elif isinstance(response, Mapping) and _is_chunk(response):
        asm.feed_chunk(response)
    else:
        asm.feed_completion(response)
    return asm.result()


def _is_chunk(obj: Mapping[str, Any]) -> bool:
    choices = obj.get("choices")
    return obj.get("object") == "chat.completion.chunk" or (
        isinstance(choices, list) and any(isinstance(c, Mapping) and "delta" in c for c in choices)
    )
