"""Grade one raw completion: split channels, run the grammar, run the text heuristics, decide.

The pieces are shared with the OpenAI-shaped grader (:mod:`exporter.dsml.openai`), which
differs only in where the channels come from.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from exporter.dsml import engines, phenotypes, search
from exporter.dsml import markers as m
from exporter.dsml.catalog import ERROR, STOPS, SUSPECT, WELL_FORMED
from exporter.dsml.fastpath import parse_canonical
from exporter.dsml.quoting import Quoting
from exporter.dsml.result import ChannelSpan, FindingSink, Result, ToolCall, decide_verdict
from exporter.dsml.schema import ToolSet
from exporter.dsml.soup import first_soup
from exporter.dsml.structure import Parsed, parse_channel
from exporter.dsml.textcheck import check_text
from exporter.dsml.tokens import MAX_EVENTS, Event, Special, Tag, Think, scan

_GRAMMAR_ALIASES = {
    None: None,
    "auto": None,
    "v4": "v4",
    "4": "v4",
    "v3.2": "v3.2",
    "3.2": "v3.2",
    "v32": "v3.2",
    "v4.1": "v4.1",
    "4.1": "v4.1",
    "v41": "v4.1",
}
_ASCII_EOS = f"<|end{m.LOW}of{m.LOW}sentence|>"


def normalize_grammar(grammar: str | None) -> str | None:
    """``v4`` | ``v4.1`` | ``v3.2`` | None (auto: the first block's name decides).

    A given grammar is the deployment's dialect (the tool-call parser its engine runs): a block
    in the other spelling is graded as what that parser returns. ``v4@vllm``: the dialect as
    vLLM's parser reads it (:mod:`exporter.dsml.engines`). ValueError otherwise."""
    if type(grammar) is str and grammar in _GRAMMAR_ALIASES:  # "v4", "auto"...: once per grade
        return _GRAMMAR_ALIASES[grammar]  # (not a str subclass: an EngineDialect is itself)
    if grammar is None or isinstance(grammar, engines.EngineDialect):
        return grammar
    engine = release = None
    if isinstance(grammar, str):
        grammar, engine, release = engines.split_release(grammar)
    key = grammar.strip().lower() if isinstance(grammar, str) else grammar
    if key not in _GRAMMAR_ALIASES:
        raise ValueError(f"unknown grammar {grammar!r}: use v4, v4.1, v3.2 or auto")
    base = _GRAMMAR_ALIASES[key]
    if not base or engine in (None, "sglang"):
        return base
    return engines.EngineDialect(base, engine, release)


def cut(text: str, max_chars: int | None) -> tuple[str, int | None, int]:
    """(kept text, offset of the cut or None, characters dropped): first half + last half."""
    if max_chars is None or len(text) <= max_chars:
        return text, None, 0
    head = max(0, max_chars) // 2
    tail = max(0, max_chars) - head
    kept = text[:head] + (text[len(text) - tail :] if tail else "")
    return kept, head, len(text) - head - tail


PARAM_OPEN: str = f"<{m.MARKER}{m.PARAMETER}"
PARAM_OPENS = (PARAM_OPEN, f"<{m.tag_prefix('v4.1')}{m.PARAMETER}")


def reasoning_end(text: str, thinking: bool | None) -> int:
    """Offset of the ``</think>`` that ends reasoning in the uncut text (-1: none).

    It is the first ``</think>``, except that with ``thinking`` unknown one that falls inside
    a DSML parameter value (after a parameter opener with no closer since) is a literal in a
    tool call (code that strips think tags), not the end of reasoning. :class:`ThinkTracker`
    computes the same on a stream."""
    # both searches cross the whole reasoning: search.find is sooner on a long one
    find = search.find if len(text) >= search.LONG else str.find
    at = find(text, m.THINK_CLOSE)
    if at < 0 or thinking is not None or find(text, "DSML", 0, at) < 0:
        return at  # every parameter opener holds "DSML": with none before it, none is open
    opened = max(text.rfind(p, 0, at) for p in PARAM_OPENS)
    inside = opened > max(text.rfind(c, 0, at) for c in m.PARAMETER_CLOSES)
    return -1 if inside else at


def split_think(think_at: int, thinking: bool | None, n: int) -> tuple[int | None, int]:
    """(end of reasoning or None, start of content) from the first ``</think>`` offset."""
    if thinking is False:
        return None, 0
    if think_at < 0:
        return (n, n) if thinking else (None, 0)
    return think_at, think_at + len(m.THINK_CLOSE)


def think_in_kept(think_at: int, gap: int | None, dropped: int) -> tuple[int, bool]:
    """Map the first ``</think>`` of the uncut text into the kept text.

    Returns (offset, present): when the tag fell into the dropped middle, reasoning ends at
    the cut and no tag is present in the kept text.
    """
    if think_at < 0 or gap is None:
        return think_at, think_at >= 0
    if think_at + len(m.THINK_CLOSE) <= gap:
        return think_at, True
    if think_at >= gap + dropped:
        return think_at - dropped, True
    return gap, False


def grade_text(
    text: str | bytes,
    *,
    grammar: str | None = None,
    finish_reason: str | None = None,
    tools: object = None,
    thinking: bool | None = None,
    max_chars: int | None = None,
) -> Result:
    """Grade a raw completion (``{reasoning}</think>{content}{block}[EOS]``).

    ``grammar``: ``v4``, ``v3.2`` or None to take it from the block. ``tools``: names, OpenAI
    tool objects, ``{name: schema}`` or a :class:`ToolSet`; None skips tool checks.
    ``thinking``: True (text starts in reasoning), False (no reasoning), None (split at the
    first ``</think>`` if any). ``max_chars``: keep only head and tail beyond this size.
    Never raises on any text; linear time.
    """
    if isinstance(text, (bytes, bytearray)):  # a tuple: no union object built per call
        text = bytes(text).decode("utf-8", "replace")
    if not isinstance(text, str):
        return error_result(f"text must be str, not {type(text).__name__}")
    think_at = reasoning_end(text, thinking)
    kept, gap, dropped = cut(text, max_chars)
    return grade_kept(
        kept,
        think_at,
        gap,
        dropped,
        grammar=normalize_grammar(grammar),
        finish_reason=finish_reason,
        tools=ToolSet.from_any(tools),
        thinking=thinking,
    )


def grade_kept(
    kept: str,
    think_at: int,
    gap: int | None,
    dropped: int,
    *,
    grammar: str | None,
    finish_reason: str | None,
    tools: ToolSet | None,
    thinking: bool | None,
) -> Result:
    """Grade text already cut to size; ``think_at`` is the first ``</think>`` of the uncut text.

    Shared by :func:`grade_text` and the streaming grader, which is what makes their results
    identical. ``think_at`` comes from :func:`reasoning_end`."""
    sink = FindingSink()
    at, present = think_in_kept(think_at, gap, dropped)
    r_end, c_start = split_think(at, thinking, len(kept))
    if r_end is not None and not present and at >= 0:
        c_start = r_end  # the tag itself was dropped with the middle
    channels: list[ChannelSpan] = []
    if r_end is not None:  # the reasoning is kept[:r_end], read in place
        channels.append(ChannelSpan("reasoning", 0, r_end))
        screens = analyze_reasoning(sink, kept, 0, r_end)
    content = kept[c_start:]
    channels.append(ChannelSpan("content", c_start, len(kept)))
    part = analyze_content(
        sink,
        content,
        c_start,
        grammar=grammar,
        tools=tools,
        finish_reason=finish_reason,
        gap=_rel_gap(gap, c_start, len(kept)),
    )
    parsed = part.parsed
    for a, b in parsed.blocks:  # a loop, not extend() over a generator: once per grade
        channels.append(ChannelSpan("tool_calls", a + c_start, b + c_start))
    end_reasons(
        sink,
        finish_reason,
        len(kept),
        in_block=parsed.open_at_end or bool(parsed.blocks),
        empty=part.visible_empty and not parsed.dsml_seen,
    )
    if gap is not None:
        sink.add("oversized", gap, gap, "input", f"{dropped} characters dropped here")
    calls = (
        [ToolCall(c.name, c.arguments, c.start + c_start, c.end + c_start) for c in parsed.calls]
        if c_start
        else parsed.calls
    )
    if r_end is not None and any(screens):  # no screen passed (most): check_prose finds nothing
        phenotypes.check_prose(sink, kept[:r_end], 0, "reasoning", screens)
    prose = sample_checks(sink, content, c_start, part, calls)
    phenotypes.check_end(
        sink,
        finish_reason=finish_reason,
        tools=tools,
        has_call=bool(calls),
        dsml_seen=part.parsed.dsml_seen,
        prose=prose,
        n=len(kept),
    )
    return finish(
        sink,
        calls,
        kept,
        channels,
        part.parsed.grammar,
        finish_reason,
        ((gap, dropped),) if gap is not None else (),
    )


def first_block_at(part: ContentPart, n: int) -> int:
    """Where the content's first block (open or closed) starts, or ``n`` (its length)."""
    parsed = part.parsed
    first = min(parsed.blocks)[0] if parsed.blocks else n  # (start, end) pairs: the first start
    return min(first, parsed.open_block_start) if parsed.open_at_end else first


def prose_of(content: str, part: ContentPart, block_at: int | None = None) -> str:
    """The content before its first block (open or closed) or its first DSML marker (a bare
    or damaged tag: the grammar may stop at its tag limit without a block): the prose.
    ``block_at``: :func:`first_block_at`, when the caller has it."""
    end = first_block_at(part, len(content)) if block_at is None else block_at
    if part.parsed.dsml_seen:
        at = content.find("DSML")
        if at >= 0:
            end = min(end, max(0, content.rfind("<", 0, at)))
    return content[:end]


def sample_checks(
    sink: FindingSink,
    content: str,
    base: int,
    part: ContentPart,
    calls: list[ToolCall],
    *,
    block_channel: str = "tool_calls",
    raw: bool = True,
) -> str:
    """The once-per-sample checks of :mod:`exporter.dsml.phenotypes` over a content channel
    (offsets shifted by ``base``); returns its prose. ``raw``: the text the model generated,
    before any tool parser (a quoted block opener there is one the parser will run)."""
    block_at = first_block_at(part, len(content))
    prose = prose_of(content, part, block_at)
    phenotypes.check_prose(sink, prose, base, "content")
    if not raw:
        return prose  # the server's parser already ran: a quoted block left in content was not run
    # the whole content before the first real block: prose_of stops at the first DSML, which
    # may be the quoted example itself (the same text when it does not: no second slice)
    before = prose if len(prose) == block_at else content[:block_at]
    quoted = phenotypes.find_quoted_block(before, part.parsed.grammar)
    if quoted is not None:
        sink.add("quoted_block", quoted[0] + base, quoted[1] + base, "content", quoted[2])
    phenotypes.check_values(sink, content, part.parsed.values, base, block_channel)
    phenotypes.check_calls(sink, calls, block_channel)
    return prose


def finish(
    sink: FindingSink,
    calls: list[ToolCall],
    text: str,
    channels: list[ChannelSpan],
    grammar: str | None,
    finish_reason: str | None,
    cuts: tuple[tuple[int, int], ...],
) -> Result:
    verdict = decide_verdict(sink.counts, bool(calls), finish_reason)
    keep = calls if verdict in (WELL_FORMED, SUSPECT) else []
    return Result(
        verdict,
        sink.sorted(),
        tuple(keep),
        text,
        tuple(channels),
        grammar,
        finish_reason,
        cuts,
    )


def error_result(message: str) -> Result:
    sink = FindingSink()
    sink.add("bad_input", 0, 0, "input", message[:200])
    return Result(ERROR, sink.sorted(), error=message[:200])


def _rel_gap(gap: int | None, start: int, end: int) -> int | None:
    return gap - start if gap is not None and start <= gap <= end else None


def body_end_of(text: str) -> tuple[int, bool]:
    """Where the content ends before a final EOS token (allowed there), and whether that EOS
    had ASCII bars."""
    tail = text.rstrip()
    if tail.endswith(m.EOS):
        return len(tail) - len(m.EOS), False
    if tail.endswith(_ASCII_EOS):
        return len(tail) - len(_ASCII_EOS), True
    return len(text), False


@dataclass
class ContentPart:
    parsed: Parsed
    visible_empty: bool


def analyze_reasoning(
    sink: FindingSink, text: str, base: int, end: int | None = None
) -> tuple[bool, bool, bool]:
    """Reasoning may discuss anything, but an unquoted DSML tag there is an invalid call.

    Returns the prose screens of ``text`` for :func:`phenotypes.check_prose`, found in the
    same pass as the text checks and the tag screen. ``end``: the reasoning is ``text[:end]``
    (the head of a grade's text: copied only where a tag screen or a hit needs it)."""
    hits, screens, tagged = phenotypes.reasoning_passes(text, end)
    if tagged:  # neither "<" nor "DSML" (most reasoning): no event, no quoting lookups
        text = text if end is None else text[:end]
        events = scan(text)
        if events:
            _reasoning_events(sink, text, events, base)
    for code, a, b, detail in hits:
        sink.add(code, a + base, b + base, "reasoning", detail)
    return screens


def _reasoning_events(sink: FindingSink, text: str, events: list[Event], base: int) -> None:
    quoting = Quoting(text)
    for ev in events:
        if isinstance(ev, Tag):
            if not quoting.covers(ev.start):
                sink.add("dsml_in_reasoning", ev.start + base, ev.end + base, "reasoning", ev.name)
        elif isinstance(ev, Special):
            if not quoting.covers(ev.start):
                sink.add("special_token_leak", ev.start + base, ev.end + base, "reasoning", ev.name)
        elif isinstance(ev, Think) and not ev.closing and not quoting.covers(ev.start):
            sink.add("think_tag_leak", ev.start + base, ev.end + base, "reasoning", "<think>")


def analyze_content(
    sink: FindingSink,
    text: str,
    base: int,
    *,
    grammar: str | None,
    tools: ToolSet | None,
    finish_reason: str | None,
    gap: int | None = None,
    block_channel: str = "tool_calls",
    channel: str = "content",
) -> ContentPart:
    """Run the grammar and the heuristics over a content channel (offsets shifted by ``base``)."""
    body_end, ascii_eos = body_end_of(text)
    if ascii_eos:
        sink.add(
            "marker_ascii_pipe", body_end + base, body_end + len(_ASCII_EOS) + base, channel, "EOS"
        )
    # most outputs are well formed: the canonical pass parses them without the state machine
    parsed = parse_canonical(text, body_end, grammar, tools) if gap is None else None
    if parsed is None:  # (the machine's report is made only where the machine runs)

        def machine_report(code: str, start: int, end: int, detail: str, inside: bool) -> None:
            sink.add(code, start + base, end + base, block_channel if inside else channel, detail)

        parsed, n_events, last = parse_channel(
            text,
            body_end,
            machine_report,
            grammar=grammar,
            tools=tools,
            finish_reason=finish_reason,
            gap=gap,
        )
        if n_events >= MAX_EVENTS:
            sink.add(
                "oversized", last + base, last + base, channel, "tag limit: grammar stops here"
            )
    # the blocks, and the one the text ended inside
    spans = (
        [*parsed.blocks, (parsed.open_block_start, len(text))]
        if parsed.open_at_end
        else parsed.blocks
    )
    engines.check_content(sink, text, base, grammar, spans)
    if finish_reason != "length":
        frag = partial_marker_at(text, body_end)
        if frag >= 0:  # placed by the closed blocks only
            where = _channel_at(parsed.blocks, frag, block_channel, channel)
            sink.add("unbalanced", frag + base, body_end + base, where, _PARTIAL_DETAIL)
    for code, a, b, detail in check_text(text):
        sink.add(code, a + base, b + base, _channel_at(spans, a, block_channel, channel), detail)
    # tool-call values: where word-piece soup reaches a tool
    if parsed.values and (soup := first_soup(text, parsed.values)) is not None:
        s, e, n = soup
        sink.add("token_soup", s + base, e + base, block_channel, f"{n} pieces")
    return ContentPart(parsed, _NON_SPACE.search(text, 0, body_end) is None)


def _channel_at(spans: Sequence[tuple[int, int]], pos: int, inside: str, outside: str) -> str:
    """``inside`` where ``pos`` falls in one of ``spans``, else ``outside``: where a text-check
    hit is reported (a loop, not any() over a generator: once per hit)."""
    for a, b in spans:
        if a <= pos < b:
            return inside
    return outside


_PARTIAL_DETAIL = "text ends in a partial marker"
_NON_SPACE = re.compile(r"\S")  # str.strip's whitespace is re's \s (both Py_UNICODE_ISSPACE)
_PARTIAL = re.compile(f"</?(?:{m.BAR}[^{m.BAR}<>\\s]{{0,64}})?\\Z")


def partial_marker_at(text: str, end: int) -> int:
    """Where ``text[:end]`` ends in the first characters of a DSML tag or special token
    (``<``, ``</``, ``<｜``, ``<｜DS``, ``</｜DSM``, ``<｜end▁of``), or -1.

    SGLang's streaming detector holds such a tail back waiting for the rest, then releases it
    as content when the stream ends; the non-streaming parser returns it as content. A tail that
    already holds ``DSML`` is an unfinished tag, which the grammar pass reports."""
    lt = text.rfind("<", max(0, end - 72), end)
    if lt < 0 or text.find(">", lt, end) >= 0:  # no prefix holds a ">": most tails end a tag
        return -1
    mt = _PARTIAL.match(text[lt:end])
    if mt is None or "DSML" in mt.group():
        return -1
    return lt


def end_reasons(
    sink: FindingSink, finish_reason: str | None, n: int, *, in_block: bool, empty: bool
) -> None:
    """The reasons that say how the generation ended, for both graders: under ``length`` one of
    ``length_in_block`` (a block or call had started) and ``length_no_call`` (every truncated
    verdict carries one); under a stop, ``empty_stop`` when nothing visible came back."""
    if finish_reason == "length":
        if in_block:
            sink.add("length_in_block", n, n, "tool_calls", "finish_reason length")
        else:
            sink.add("length_no_call", n, n, "content", "finish_reason length")
    elif finish_reason in STOPS and empty:
        sink.add("empty_stop", n, n, "content", f"finish_reason {finish_reason}")
