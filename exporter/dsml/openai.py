"""Grade OpenAI-shaped responses: a chat completion, its SSE chunk objects, or raw SSE bytes.

The server has already split the text into channels (reasoning_content, content, tool_calls),
and lenient parsers hide damage: a broken block can pass through as content, an unparseable
invoke can become ``{}``. So each channel is graded for what it is: reasoning as reasoning,
content with the full grammar (a well-formed block left in content is a parser or config
artefact, a damaged one is model corruption), and parsed tool calls against the tools. The
transcript (reasoning + content + each call's name and arguments) is what offsets index.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from exporter.dsml import phenotypes
from exporter.dsml import thresholds as t
from exporter.dsml.grader import (
    analyze_content,
    analyze_reasoning,
    error_result,
    finish,
    grade_kept,
    normalize_grammar,
    reasoning_end,
    sample_checks,
)
from exporter.dsml.result import ChannelSpan, FindingSink, Result, ToolCall
from exporter.dsml.schema import ToolSet
from exporter.dsml.soup import find_soup
from exporter.dsml.streaming import HeadTail, TextDecoder
from exporter.dsml.structure import name_problem, strict_json
from exporter.dsml.textcheck import check_text, control_in
from exporter.dsml.tokens import Special, Tag, scan

MAX_CALLS = 128  # tool calls kept per response (indices beyond are dropped)
_STOPS = ("stop", "tool_calls", "eos")


@dataclass
class _CallParts:
    name: list[str] = field(default_factory=list)
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
        self._line = ""
        self._data: list[str] = []
        self.raw = False  # a completions-API response: choices[].text is the raw completion
        self._sse_events = 0  # data events seen (SSE input only)
        self._sse_input = False

    # --- raw SSE -----------------------------------------------------------------------------
    def feed_sse(self, data: str | bytes | bytearray) -> None:
        self._sse_input = True
        text = self._line + self._decoder.decode(data)
        lines = text.split("\n")
        self._line = lines.pop()
        if len(self._line) > 4 * self.max_chars + 65536:
            self._fail("an SSE line exceeds the size cap")
            self._line = ""
        for line in lines:
            self._sse_line(line)

    def end_sse(self) -> None:
        """The byte stream ended: flush a last line or event without its blank line."""
        rest = self._line + self._decoder.flush()
        self._line = ""
        if rest:
            self._sse_line(rest)
        self._sse_line("")

    def _sse_line(self, line: str) -> None:
        if line.endswith("\r"):
            line = line[:-1]
        if not line:
            if self._data:
                payload = "\n".join(self._data)
                self._data = []
                self._sse_event(payload)
            return
        if line.startswith("data:"):
            value = line[5:]
            self._data.append(value[1:] if value.startswith(" ") else value)
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
        if isinstance(name, str):
            parts.name.append(name)
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


def grade_openai_response(
    response: object,
    *,
    grammar: str | None = None,
    tools: object = None,
    thinking: bool | None = None,
    max_chars: int = t.DEFAULT_MAX_CHARS,
    choice: int = 0,
) -> Result:
    """Grade a chat completion object, a list of SSE chunk objects, or raw SSE bytes/str.

    ``thinking=True`` means the request ran in thinking mode: if the server returned no
    reasoning_content (no reasoning parser), content is raw and is split at its first
    ``</think>``. Never raises; an input that is not a response gives verdict ``error``.
    """
    try:
        gram = normalize_grammar(grammar)
    except ValueError as exc:
        return error_result(str(exc))
    asm = reassemble(response, max_chars=max_chars, choice=choice)
    return grade_assembled(asm, grammar=gram, tools=ToolSet.from_any(tools), thinking=thinking)


def grade_tool_calls(
    tool_calls: object,
    *,
    tools: object = None,
    content: str = "",
    reasoning: str = "",
    finish_reason: str | None = "tool_calls",
) -> Result:
    """Grade parsed tool calls alone (when only those were logged): unknown tool, arguments not
    a JSON object, schema mismatches, ``{}`` for a tool with required parameters, leaks.

    ``tool_calls``: OpenAI tool-call objects (``{"function": {"name", "arguments"}}``), plain
    ``{"name", "arguments"}`` dicts, or ``(name, arguments)`` pairs; arguments as a JSON string
    or an already decoded object."""
    calls: list[dict[str, Any]] = []
    if isinstance(tool_calls, list | tuple):
        for call in tool_calls:
            if isinstance(call, tuple | list) and len(call) == 2:
                name, args = call
            elif isinstance(call, Mapping):
                raw = call.get("function")
                fn: Mapping[str, Any] = raw if isinstance(raw, Mapping) else call
                name, args = fn.get("name"), fn.get("arguments")
            else:
                return error_result("a tool call must be an object or a (name, arguments) pair")
            calls.append({"type": "function", "function": {"name": name, "arguments": args}})
    else:
        return error_result("tool_calls must be a list")
    message = {"content": content, "reasoning_content": reasoning, "tool_calls": calls}
    response = {"choices": [{"index": 0, "message": message, "finish_reason": finish_reason}]}
    return grade_openai_response(response, tools=tools)


def grade_assembled(
    asm: Assembled, *, grammar: str | None, tools: ToolSet | None, thinking: bool | None = None
) -> Result:
    if asm.error is not None:
        return error_result(asm.error)
    if asm.raw or (thinking and not asm.reasoning and not asm.calls):
        # a text completion, or no reasoning parser on the server: content is the raw output
        mode = thinking if asm.raw else True
        gap, dropped = asm.content_cut or (None, 0)
        at = reasoning_end(asm.content, mode)
        if gap is not None and at >= gap:
            at += dropped  # grade_kept takes the offset in the uncut text
        return grade_kept(
            asm.content,
            at,
            gap,
            dropped,
            grammar=grammar,
            finish_reason=asm.finish_reason,
            tools=tools,
            thinking=mode,
        )
    sink = FindingSink()
    channels: list[ChannelSpan] = []
    cuts: list[tuple[int, int]] = []
    pos = 0
    if asm.reasoning:
        channels.append(ChannelSpan("reasoning", 0, len(asm.reasoning)))
        analyze_reasoning(sink, asm.reasoning, 0)
        if asm.reasoning_cut:
            cuts.append(asm.reasoning_cut)
        pos = len(asm.reasoning)
    c_start = pos
    channels.append(ChannelSpan("content", c_start, c_start + len(asm.content)))
    part = analyze_content(
        sink,
        asm.content,
        c_start,
        grammar=grammar,
        tools=tools,
        finish_reason=asm.finish_reason,
        gap=asm.content_cut[0] if asm.content_cut else None,
        block_channel="content",
    )
    if asm.content_cut:
        cuts.append((c_start + asm.content_cut[0], asm.content_cut[1]))
    calls = [
        ToolCall(c.name, c.arguments, c.start + c_start, c.end + c_start) for c in part.parsed.calls
    ]
    for a, b in part.parsed.blocks:
        if part.parsed.calls:
            sink.add("unparsed_block", a + c_start, b + c_start, "content", "tool parser off?")
    pos = c_start + len(asm.content)
    length = asm.finish_reason == "length"
    for index, call in enumerate(asm.calls):
        last = index == len(asm.calls) - 1
        start = pos
        pos += len(call.name) + len(call.arguments)
        channels.append(ChannelSpan("tool_calls", start, pos, index))
        parsed = _check_call(sink, call, start, tools, cut_short=length and last)
        if parsed is not None:
            calls.append(ToolCall(call.name, parsed, start, pos))
        if call.cut is not None:
            cuts.append((start + len(call.name) + call.cut[0], call.cut[1]))
    for at, dropped in cuts:
        sink.add("oversized", at, at, "input", f"{dropped} characters dropped here")
    n = pos
    if asm.reasoning:
        phenotypes.check_prose(sink, asm.reasoning, 0, "reasoning")
    prose = sample_checks(sink, asm.content, c_start, part, [], block_channel="content")
    _check_argument_values(sink, asm.calls, calls, c_start + len(asm.content))
    phenotypes.check_calls(sink, calls, "tool_calls")
    phenotypes.check_end(
        sink,
        finish_reason=asm.finish_reason,
        tools=tools,
        has_call=bool(calls or asm.calls),  # a started call, even cut short, is a call
        dsml_seen=part.parsed.dsml_seen,
        prose=prose,
        n=n,
    )
    if length:  # every truncated verdict carries one of these two
        if part.parsed.open_at_end or part.parsed.blocks or asm.calls:
            sink.add("length_in_block", n, n, "tool_calls", "finish_reason length")
        else:
            sink.add("length_no_call", n, n, "content", "finish_reason length")
    elif (
        asm.finish_reason in _STOPS
        and part.visible_empty
        and not part.parsed.dsml_seen
        and not asm.calls
    ):
        sink.add("empty_stop", n, n, "content", f"finish_reason {asm.finish_reason}")
    transcript = asm.reasoning + asm.content + "".join(c.name + c.arguments for c in asm.calls)
    return finish(
        sink, calls, transcript, channels, part.parsed.grammar, asm.finish_reason, tuple(cuts)
    )


def _check_argument_values(
    sink: FindingSink, raw: tuple[AssembledCall, ...], parsed: list[ToolCall], at: int
) -> None:
    """The value checks over each server-parsed call's string arguments; a finding is placed
    where the string's JSON spelling sits in the arguments (else at the arguments' start)."""
    by_start = {c.start: c for c in parsed}
    for call in raw:
        args_at = at + len(call.name)
        found = by_start.get(at)
        at += len(call.name) + len(call.arguments)
        if found is None:
            continue
        for s in _strings(found.arguments):
            where = call.arguments.find(json.dumps(s, ensure_ascii=False)[1:-1]) if s else -1
            phenotypes.check_value(sink, s, args_at + max(where, 0), "tool_calls")


def _check_call(
    sink: FindingSink,
    call: AssembledCall,
    start: int,
    tools: ToolSet | None,
    *,
    cut_short: bool,
) -> dict[str, Any] | None:
    """Checks on one server-parsed call; its arguments dict when they are usable."""
    name_end = start + len(call.name)
    end = name_end + len(call.arguments)

    def add(code: str, a: int, b: int, detail: str) -> None:
        sink.add(code, a, b, "tool_calls", detail)

    usable = True
    problem = name_problem(call.name)
    if problem:
        add("name_invalid", start, name_end, problem)
        usable = False
    elif tools is not None and call.name not in tools:
        add("tool_unknown", start, name_end, call.name)
        usable = False
    for ev in scan(call.arguments):
        if isinstance(ev, Tag):
            add("nested_tag", name_end + ev.start, name_end + ev.end, "DSML inside arguments")
            usable = False
        elif isinstance(ev, Special):
            add("special_token_leak", name_end + ev.start, name_end + ev.end, ev.name)
            usable = False
    for code, a, b, detail in check_text(call.arguments):
        add(code, name_end + a, name_end + b, detail)
    if call.cut is not None:
        return None  # the middle of the arguments was dropped: nothing more to check
    ok, args = strict_json(call.arguments)
    if not ok or not isinstance(args, dict):
        if cut_short and not ok:
            return None  # cut by max_tokens: reported as length_in_block
        add("json_invalid", name_end, end, "arguments are not a JSON object")
        return None
    for leaf in _strings(args):
        hit = control_in(leaf)
        if hit:
            add("control_chars", name_end, end, f"{hit} in a decoded argument value")
            usable = False
            break
    for leaf in _strings(args):
        soup = find_soup(leaf)
        if soup is not None:
            add("token_soup", name_end, end, f"{soup[2]} pieces in a decoded argument value")
            usable = False
            break
    spec = tools.get(call.name) if tools is not None else None
    if spec is not None:
        if not args and spec.required:
            add("args_empty_required", start, end, ", ".join(spec.required[:5]))
            usable = False
        else:
            for err in spec.validate(args):
                add("schema_mismatch", name_end, end, err)
    return args if usable else None


def _strings(value: object, budget: int = 10_000) -> Iterator[str]:
    """String leaves of a decoded JSON value (iterative, bounded)."""
    stack = [value]
    while stack and budget > 0:
        budget -= 1
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


class StreamingResponseGrader:
    """Grade an OpenAI SSE stream fed as raw bytes (or decoded chunk objects) while it flows.

    The tap hands over each piece of the response body; ``finish()`` returns the same Result
    as :func:`grade_openai_response` on the whole body. Memory: each channel and each tool
    call's arguments are kept within ``max_chars`` (head and tail).
    """

    def __init__(
        self,
        *,
        grammar: str | None = None,
        tools: object = None,
        thinking: bool | None = None,
        max_chars: int = t.DEFAULT_MAX_CHARS,
        choice: int = 0,
    ) -> None:
        self.grammar = normalize_grammar(grammar)
        self.tools = ToolSet.from_any(tools)
        self.thinking = thinking
        self._asm = Assembler(max_chars=max_chars, choice=choice)

    def feed(self, data: str | bytes | bytearray) -> None:
        """A piece of the raw SSE body, split anywhere."""
        self._asm.feed_sse(data)

    def feed_chunk(self, chunk: object) -> None:
        """One already-decoded chunk object."""
        self._asm.feed_chunk(chunk)

    @property
    def done(self) -> bool:
        """``data: [DONE]`` was seen."""
        return self._asm.done

    def finish(self) -> Result:
        self._asm.end_sse()
        return grade_assembled(
            self._asm.result(), grammar=self.grammar, tools=self.tools, thinking=self.thinking
        )
