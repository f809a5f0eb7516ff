"""The strict grammar: a state machine over the tokenizer's events in one channel.

States follow the nesting BLOCK > invoke > parameter value. Deviations are reported and the
machine recovers the way a reader would (a missing closer closes implicitly, an orphan closer
is skipped), so one defect yields one or two reasons instead of a cascade. The machine never
backtracks: one pass over the events, constant work per event plus the inter-tag gap it checks.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from exporter.dsml import markers as m
from exporter.dsml.quoting import Quoting
from exporter.dsml.result import ToolCall
from exporter.dsml.schema import ToolSet, call_problems
from exporter.dsml.tokens import MAX_EVENTS, Bare, Event, Special, Tag, Think, scan

# (reason, start, end, detail, inside): channel offsets; inside is True while the machine is
# inside a block (the reason belongs to the tool_calls channel)
Report = Callable[[str, int, int, str, bool], None]

OUT, BLOCK, INVOKE, VALUE, AFTER = range(5)
_VARIANT_REASON = {
    "ascii": "marker_ascii_pipe",
    "doubled": "marker_doubled_bar",
    "spaced": "marker_spaced",
    "damaged": "marker_damaged",
    "confusable": "marker_confusable",
}
_BAD_NAME = re.compile(r"[\s\"'<>`\\|\x00-\x1f\x7f" + m.BAR + "]")
MAX_NAME = 256


@lru_cache(maxsize=1024)
def name_problem(name: str | None) -> str:
    """Why a tool or parameter name is impossible ("" when it is fine). Remembered: a
    deployment's outputs use the same few names over and over."""
    if not name:
        return "empty name"
    if len(name) > MAX_NAME:
        return "name too long"
    if _BAD_NAME.search(name):
        return "whitespace, quote, bracket, bar or control character in name"
    return ""


def _reject_constant(const: str) -> Any:
    raise ValueError(f"{const} is not JSON")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


# the decoder's scanner (set by JSONDecoder.__init__, absent from its stubs)
_SCAN: Callable[[str, int], tuple[Any, int]] = _DECODER.scan_once  # type: ignore[attr-defined]
_JSON_SPACE = " \t\n\r"  # json.decoder.WHITESPACE, what decode() skips at both ends


def strict_json(text: str) -> tuple[bool, Any]:
    """json.loads without NaN/Infinity (not JSON) and without raising on deep nesting."""
    if text and text[0] not in _JSON_SPACE and text[-1] not in _JSON_SPACE:
        # decode() without its two whitespace regexes, which find nothing here (most values):
        # its scanner, then the same "all of it" test
        try:
            value, end = _SCAN(text, 0)
        except (StopIteration, ValueError, RecursionError):
            return False, None
        return (True, value) if end == len(text) else (False, None)
    return strict_json_decode(text)


def strict_json_decode(text: str) -> tuple[bool, Any]:
    """:func:`strict_json` through ``JSONDecoder.decode`` (what it does on any text)."""
    try:
        return True, _DECODER.decode(text)
    except (ValueError, RecursionError):
        return False, None


@dataclass(slots=True)
class _Invoke:
    name: str
    start: int
    args: dict[str, Any] = field(default_factory=dict)
    valid: bool = True  # parsed cleanly enough to be returned as a call
    partial: bool = False  # a value spans the oversize gap: arguments incomplete


@dataclass(slots=True)
class _Param:
    name: str
    flag: str | None
    value_start: int
    tag_start: int
    keep: bool


@dataclass
class Parsed:
    """What the grammar pass learned about one channel (offsets relative to the channel)."""

    calls: list[ToolCall] = field(default_factory=list)
    blocks: list[tuple[int, int]] = field(default_factory=list)
    values: list[tuple[int, int]] = field(default_factory=list)
    grammar: str | None = None
    open_at_end: bool = False  # the text ended inside a block (or inside a tag)
    open_block_start: int = 0  # where that unfinished block (or tag) began
    dsml_seen: bool = False  # any unquoted DSML tag at all


class Machine:
    """Parse one content channel. ``gap`` is the offset of an oversize cut, if any."""

    def __init__(
        self,
        text: str,
        report: Report,
        *,
        grammar: str | None,
        tools: ToolSet | None,
        finish_reason: str | None,
        gap: int | None = None,
    ) -> None:
        self.text = text
        self._report = report
        self.grammar = grammar
        self.tools = tools
        self.finish_reason = finish_reason
        self.gap = gap
        self.quoting = Quoting(text)
        self.out = Parsed(grammar=grammar)
        self.state = OUT
        self.last = 0  # end of the previous structural tag (for gap checks)
        self.block: Tag | None = None
        self.block_spaced: bool | None = None  # the open block's tag spelling (V4.1: spaced)
        self.foreign = False  # the open block is in a dialect the deployment's parser misses
        self.block_start = 0
        self.block_invokes = 0
        self.implicit_block = False
        self.invoke: _Invoke | None = None
        self.invoke_tag: Tag | None = None
        self.param: _Param | None = None
        self.seen_params: set[str] = set()
        self.after_reported = False
        self.capped = False
        # the tag handler of each state outside a value (OUT, BLOCK, INVOKE)
        self._handlers = (self._in_out, self._in_block, self._in_invoke)

    # --- driving -----------------------------------------------------------------------------
    def report(self, code: str, start: int, end: int, detail: str) -> None:
        self._report(code, start, end, detail, self.state in (BLOCK, INVOKE, VALUE))

    def run(self, events: list[Event], body_end: int, *, capped: bool = False) -> Parsed:
        """Parse ``events``; ``capped``: the tokenizer stopped early, so the text does not end
        where the events do (nothing is reported about the unseen rest)."""
        self.capped = capped
        on_tag = self._tag
        for ev in events:
            if ev.start >= body_end:
                break
            if isinstance(ev, Tag):  # most events
                on_tag(ev)
            elif isinstance(ev, Special):
                self._special(ev)
            elif isinstance(ev, Think):
                self._think(ev)
            else:
                self._bare(ev)
        self._finish(body_end)
        return self.out

    def _quoted(self, pos: int) -> bool:
        return self.state == OUT and self.quoting.covers(pos)

    # --- non-tag events ----------------------------------------------------------------------
    def _special(self, ev: Special) -> None:
        if self.state == AFTER:
            self._after_text(ev.start, ev.end)
        if self._quoted(ev.start):
            return
        self.report("special_token_leak", ev.start, ev.end, ev.name)

    def _think(self, ev: Think) -> None:
        if self.state == VALUE or self._quoted(ev.start):
            return  # code in a value may well contain the literal tag
        self.report("think_tag_leak", ev.start, ev.end, "</think>" if ev.closing else "<think>")

    def _bare(self, ev: Bare) -> None:
        if self.state == VALUE or self._quoted(ev.start):
            return
        if self.state == AFTER:
            self._after_text(ev.start, ev.end)
            return
        self.report("marker_missing", ev.start, ev.end, ev.text)

    # --- tags --------------------------------------------------------------------------------
    def _tag(self, tag: Tag) -> None:
        state = self.state
        if state == OUT and self.quoting.covers(tag.start):
            return
        self.out.dsml_seen = True
        if state == AFTER:
            if tag.kind == "block" and not tag.closing and tag.complete:
                self.report("multiple_blocks", tag.start, tag.end, "")
                self._open_block(tag)
            else:
                self._after_text(tag.start, tag.end)
            return
        if not tag.complete:
            self.out.open_at_end = True
            self.out.open_block_start = self.block_start if self.state != OUT else tag.start
            if self.finish_reason != "length":
                self.report("unbalanced", tag.start, tag.end, "text ends inside a tag")
            return
        if tag.variant != "canonical":
            self.report(_VARIANT_REASON[tag.variant], tag.start, tag.end, "")
        elif tag.spaced != (
            # inside a block every tag but a block's follows the block's opener (the common
            # case, tested here), else _expected_spacing says
            self.block_spaced
            if state != OUT and self.block_spaced is not None and tag.kind != "block"
            else self._expected_spacing(tag)
        ):
            detail = "space after the marker" if tag.spaced else "V4.1 tag without its space"
            self.report("marker_spaced", tag.start, tag.end, detail)
        if state == VALUE:
            self._tag_in_value(tag)
            return
        if tag.kind == "unknown":
            self.report("tag_unknown", tag.start, tag.end, tag.name or "(no name)")
            if state != OUT:  # BLOCK or INVOKE (AFTER and VALUE returned above)
                self._gap(tag.start)
                self.last = tag.end
            return
        if tag.problems:
            self._attr_problems(tag)
        if state != OUT:
            self._gap(tag.start)
        self.last = tag.end
        self._handlers[state](tag)

    def _expected_spacing(self, tag: Tag) -> bool:
        """How this tag should be spelled: a block name carries its dialect (``calls`` is V4.1,
        spaced); inside a block every tag follows the block's opener; outside one, the grammar
        in force (unspaced when none is known yet: V3.2 and V4 are the older dialects)."""
        if tag.kind == "block":
            return m.spaced(m.GRAMMAR_OF_BLOCK[tag.name])
        if self.state in (BLOCK, INVOKE, VALUE) and self.block_spaced is not None:
            return self.block_spaced
        if self.grammar is not None:
            return m.spaced(self.grammar)
        return tag.spaced

    def _attr_problems(self, tag: Tag) -> None:
        for code, detail in tag.problems:
            self.report(code, tag.start, tag.end, detail)

    def _in_out(self, tag: Tag) -> None:
        if tag.closing:
            self.report("orphan_closer", tag.start, tag.end, tag.name)
        elif tag.kind == "block":
            self._open_block(tag)
        elif tag.kind == "invoke":
            self.report("bare_invoke", tag.start, tag.end, "invoke outside a block")
            self._implicit_block(tag.start, tag.spaced)
            self._open_invoke(tag)
        else:
            self.report("bare_invoke", tag.start, tag.end, "parameter outside an invoke")
            self._implicit_block(tag.start, tag.spaced)
            self._implicit_invoke(tag.start)
            self._open_param(tag)

    def _in_block(self, tag: Tag) -> None:
        kind = tag.kind
        if tag.closing:
            if kind == "block":
                self._close_block(tag)
            else:
                self.report("orphan_closer", tag.start, tag.end, tag.name)
        elif kind == "block":
            self.report("nested_tag", tag.start, tag.end, "block inside a block")
        elif kind == "invoke":
            self._open_invoke(tag)
        else:
            self.report("bare_invoke", tag.start, tag.end, "parameter outside an invoke")
            self._implicit_invoke(tag.start)
            self._open_param(tag)

    def _in_invoke(self, tag: Tag) -> None:
        kind = tag.kind
        if tag.closing:
            if kind == "invoke":
                self._close_invoke(tag.end, closed=True)
            elif kind == "block":
                self.report("unbalanced", tag.start, tag.end, "block closed with an invoke open")
                self._close_invoke(tag.start, closed=False)
                self._close_block(tag)
            else:
                self.report("orphan_closer", tag.start, tag.end, tag.name)
        elif kind == "parameter":
            self._open_param(tag)
        elif kind == "invoke":
            self.report("nested_tag", tag.start, tag.end, "invoke inside an invoke")
            self._close_invoke(tag.start, closed=False)
            self._open_invoke(tag)
        else:
            self.report("nested_tag", tag.start, tag.end, "block inside an invoke")

    def _tag_in_value(self, tag: Tag) -> None:
        kind = tag.kind
        if tag.closing and kind == "parameter":
            self._attr_problems(tag)
            self._close_param(tag.start, tag.end)
            return
        if tag.closing and kind in ("invoke", "block"):
            self.report("unbalanced", tag.start, tag.end, f"{tag.name} closed inside a value")
            self._close_param(tag.start, tag.start)
            if self.invoke is not None:
                self.invoke.valid = False
            self.last = tag.end
            self._in_invoke(tag)
            return
        if kind == "unknown":
            self.report("tag_unknown", tag.start, tag.end, tag.name or "(no name)")
        else:
            self.report("nested_tag", tag.start, tag.end, f"{tag.name} inside a value")

    # --- transitions -------------------------------------------------------------------------
    def _open_block(self, tag: Tag) -> None:
        found = m.GRAMMAR_OF_BLOCK[tag.name]
        self.foreign = False
        if self.grammar is None:
            self.grammar = found
            self.out.grammar = found
        elif m.spaced(found) != m.spaced(self.grammar):
            # SGLang's detector for one spelling never sees the other's tags: the client gets
            # the whole block as content and no tool call.
            self.report("dialect_mismatch", tag.start, tag.end, f"{found} block in {self.grammar}")
            self.foreign = True
        elif found != self.grammar:
            self.report("version_mismatch", tag.start, tag.end, f"{tag.name} in {self.grammar}")
        self.block = tag
        self.block_spaced = m.spaced(found)
        self.block_start = tag.start
        self.block_invokes = 0
        self.implicit_block = False
        self.state = BLOCK
        self.last = tag.end

    def _implicit_block(self, pos: int, spaced: bool) -> None:
        self.block = None
        self.block_spaced = spaced
        self.foreign = self.grammar is not None and spaced != m.spaced(self.grammar)
        self.block_start = pos
        self.block_invokes = 0
        self.implicit_block = True
        self.state = BLOCK

    def _close_block(self, tag: Tag) -> None:
        if self.implicit_block:
            self.report("orphan_closer", tag.start, tag.end, tag.name)
        elif self.block is not None and tag.name != self.block.name:
            self.report("unbalanced", tag.start, tag.end, f"{self.block.name} closed as {tag.name}")
        elif self.block_invokes == 0:
            self.report("empty_block", self.block_start, tag.end, "")
        self.out.blocks.append((self.block_start, tag.end))
        self.block_spaced = None
        self.state = AFTER
        self.last = tag.end

    def _open_invoke(self, tag: Tag) -> None:
        self.block_invokes += 1
        name = tag.attr_name or ""
        inv = _Invoke(name, tag.start)
        problem = name_problem(tag.attr_name)
        if problem and tag.attr_name is not None:
            self.report("name_invalid", tag.start, tag.end, problem)
        if tag.problems:
            inv.valid = False
        if tag.self_closing:
            if (self.grammar or "v4") == "v3.2" and not self.block_spaced:
                self.report("version_mismatch", tag.start, tag.end, "self-closing invoke in v3.2")
            self.invoke = inv
            self._close_invoke(tag.end, closed=True)
            return
        self.invoke = inv
        self.invoke_tag = tag
        self.seen_params = set()
        self.state = INVOKE

    def _implicit_invoke(self, pos: int) -> None:
        self.invoke = _Invoke("", pos, valid=False)
        self.seen_params = set()
        self.state = INVOKE

    def _close_invoke(self, end: int, *, closed: bool) -> None:
        inv = self.invoke
        self.invoke = None
        self.state = BLOCK
        if inv is None:
            return
        if not closed:
            inv.valid = False
            return
        if inv.partial or not inv.name:
            return
        self._check_call(inv, end)
        if inv.valid and not self.implicit_block and not self.foreign:
            self.out.calls.append(ToolCall(inv.name, inv.args, inv.start, end))

    def _check_call(self, inv: _Invoke, end: int) -> None:
        if name_problem(inv.name):
            inv.valid = False
            return
        if self.tools is None:
            return
        found, usable = call_problems(self.tools, inv.name, inv.args if inv.valid else None)
        for code, detail in found:  # the state is back in the block: tool_calls reasons
            self._report(code, inv.start, end, detail, True)
        inv.valid = inv.valid and usable

    def _open_param(self, tag: Tag) -> None:
        name = tag.attr_name
        keep = True
        problem = name_problem(name)
        if problem and name is not None:
            self.report("name_invalid", tag.start, tag.end, problem)
        if problem or tag.problems:
            keep = False
        elif name in self.seen_params:
            self.report("param_duplicate", tag.start, tag.end, name or "")
            keep = False
        if name is not None:
            self.seen_params.add(name)
        self.param = _Param(name or "", tag.string_flag, tag.end, tag.start, keep)
        self.state = VALUE

    def _close_param(self, value_end: int, tag_end: int) -> None:
        p = self.param
        self.param = None
        self.state = INVOKE
        self.last = tag_end
        if p is None:
            return
        self.out.values.append((p.value_start, value_end))
        inv = self.invoke
        if inv is None:
            return
        if self.gap is not None and p.value_start <= self.gap <= value_end:
            inv.partial = True  # the middle of this value was dropped: nothing to check
            return
        raw = self.text[p.value_start : value_end]
        value: Any = raw
        if p.flag == "false":
            ok, value = strict_json(raw)
            if not ok:
                self.report("json_invalid", p.value_start, value_end, _clip(raw))
                inv.valid = False
                return
        if p.keep:
            inv.args[p.name] = value
        else:
            inv.valid = False

    # --- text between and after tags ---------------------------------------------------------
    def _gap(self, pos: int) -> None:
        """The text between two tags inside a block must be exactly one newline."""
        last = self.last
        if pos == last + 1 and self.text[last] == "\n":
            return  # the canonical layout (most gaps), whatever the cut
        if self.gap is not None and last <= self.gap <= pos:
            return  # the cut removed whatever was here
        between = self.text[last:pos]
        stripped = between.strip()
        if not stripped:
            self.report("whitespace_layout", self.last, pos, repr(between[:16]))
            return
        lead = len(between) - len(between.lstrip())
        self.report("stray_text", self.last + lead, pos, _clip(stripped))

    def _after_text(self, start: int, end: int) -> None:
        if not self.after_reported:
            self.after_reported = True
            self.report("text_after_block", start, end, "")

    def _finish(self, body_end: int) -> None:
        if self.capped:
            return
        if self.state == AFTER:
            tail = self.text[self.last : body_end]
            if tail.strip():
                lead = len(tail) - len(tail.lstrip())
                self._after_text(self.last + lead, body_end)
            return
        if self.state == OUT:
            return
        self.out.open_at_end = True
        self.out.open_block_start = self.block_start
        if self.finish_reason == "length":
            return
        if self.state == VALUE and self.param is not None:
            self.report("unbalanced", self.param.tag_start, body_end, "parameter never closed")
        elif self.state == INVOKE and self.invoke is not None:
            self.report("unbalanced", self.invoke.start, body_end, "invoke never closed")
        elif not self.implicit_block:
            self.report("unbalanced", self.block_start, body_end, "block never closed")


def parse_channel(
    text: str,
    body_end: int,
    report: Report,
    *,
    grammar: str | None,
    tools: ToolSet | None,
    finish_reason: str | None,
    gap: int | None = None,
) -> tuple[Parsed, int, int]:
    """Tokenize one content channel and run the machine over it up to ``body_end``.

    Returns what the machine learned, how many events the tokenizer kept (``MAX_EVENTS``
    means it stopped early) and where the last one ends."""
    events = scan(text)
    last = events[-1].end if events else 0
    if not events or (events[0].start >= body_end and len(events) < MAX_EVENTS):
        # no event before the body's end (at most the final EOS): what the machine returns
        # when it reads none, without building it
        return Parsed(grammar=grammar), len(events), last
    machine = Machine(
        text, report, grammar=grammar, tools=tools, finish_reason=finish_reason, gap=gap
    )
    parsed = machine.run(events, body_end, capped=len(events) >= MAX_EVENTS)
    return parsed, len(events), last


def _clip(text: str, n: int = 40) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."
