"""Grade OpenAI-shaped responses: a chat completion, its SSE chunk objects, or raw SSE bytes.

:mod:`exporter.dsml.assemble` rebuilds the channels; this module grades them.

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
from typing import Any

from exporter.dsml import phenotypes
from exporter.dsml import thresholds as t
from exporter.dsml.assemble import Assembled, AssembledCall, Assembler, reassemble
from exporter.dsml.grader import (
    analyze_content,
    analyze_reasoning,
    end_reasons,
    error_result,
    finish,
    grade_kept,
    normalize_grammar,
    reasoning_end,
    sample_checks,
)
from exporter.dsml.result import ChannelSpan, FindingSink, Result, ToolCall
from exporter.dsml.schema import ToolSet, call_problems
from exporter.dsml.soup import find_soup
from exporter.dsml.structure import name_problem, strict_json
from exporter.dsml.textcheck import check_text, control_in
from exporter.dsml.tokens import Special, Tag, scan


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
        screens = analyze_reasoning(sink, asm.reasoning, 0)
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
        phenotypes.check_prose(sink, asm.reasoning, 0, "reasoning", screens)
    prose = sample_checks(sink, asm.content, c_start, part, [], block_channel="content", raw=False)
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
    end_reasons(
        sink,
        asm.finish_reason,
        n,
        in_block=part.parsed.open_at_end or bool(part.parsed.blocks or asm.calls),
        empty=part.visible_empty and not part.parsed.dsml_seen and not asm.calls,
    )
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

    spans = {"tool_unknown": (start, name_end), "args_empty_required": (start, end)}
    usable = True
    problem = name_problem(call.name)
    if problem:
        add("name_invalid", start, name_end, problem)
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
    args: dict[str, Any] | None = None
    if call.cut is None:  # with the middle of the arguments dropped, only the name is checked
        ok, decoded = strict_json(call.arguments)
        if ok and isinstance(decoded, dict):
            args = decoded
        elif ok or not cut_short:  # JSON cut by max_tokens is reported as length_in_block
            add("json_invalid", name_end, end, "arguments are not a JSON object")
    if args is not None and not _leaves_ok(sink, args, name_end, end):
        usable = False
    if tools is not None and not problem:
        found, fine = call_problems(tools, call.name, args)
        for code, detail in found:
            a, b = spans.get(code, (name_end, end))
            add(code, a, b, detail)
        usable = usable and fine
    return args if usable else None


def _leaves_ok(sink: FindingSink, args: dict[str, Any], start: int, end: int) -> bool:
    """No control character and no word-piece soup in a decoded string value (the escaped
    forms the text checks of the raw arguments cannot see); each reported once."""
    ok = True
    for leaf in _strings(args):
        hit = control_in(leaf)
        if hit:
            sink.add(
                "control_chars", start, end, "tool_calls", f"{hit} in a decoded argument value"
            )
            ok = False
            break
    for leaf in _strings(args):
        soup = find_soup(leaf)
        if soup is not None:
            detail = f"{soup[2]} pieces in a decoded argument value"
            sink.add("token_soup", start, end, "tool_calls", detail)
            ok = False
            break
    return ok


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
