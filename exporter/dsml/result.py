"""What the grader returns, and the one rule that turns reasons into a verdict."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

from exporter.dsml.catalog import (
    DEGENERATE,
    END_SOFT,
    ERROR,
    NO_TOOL_CALL,
    REASON_SPECS,
    SUSPECT,
    TRUNCATED,
    WELL_FORMED,
)

# Findings kept per reason code: enough to highlight a pattern, bounded on a corrupt 10 MB input.
MAX_FINDINGS_PER_REASON = 8


class Finding(NamedTuple):
    """One occurrence of a reason: ``text[start:end]`` of the result's ``text`` is the evidence.

    (Named tuples: immutable and built at C speed; a grade creates several.)"""

    reason: str
    start: int
    end: int
    channel: str
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "reason": self.reason,
            "start": self.start,
            "end": self.end,
            "channel": self.channel,
        }
        if self.detail:
            out["detail"] = self.detail
        return out


class ToolCall(NamedTuple):
    """A parsed call; ``start``/``end`` locate its invoke (or its arguments) in the text."""

    name: str
    arguments: dict[str, Any]
    start: int
    end: int

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": self.arguments}


class ChannelSpan(NamedTuple):
    """``text[start:end]`` came from ``channel``; ``index`` numbers parsed tool calls."""

    channel: str
    start: int
    end: int
    # shadows tuple.index on purpose: the field name is part of the JSON the API returns
    index: int | None = None  # type: ignore[assignment]


@dataclass(frozen=True, slots=True)
class Result:
    """The grade of one response.

    Offsets in findings, calls and channels index ``text``: the graded text itself for raw
    input, or the transcript (reasoning + content + each tool call's name and arguments) for
    OpenAI-shaped input. When the input was over the size cap, ``text`` keeps head and tail and
    each entry of ``cuts`` says where (offset in ``text``) how many characters were dropped.
    """

    verdict: str
    findings: tuple[Finding, ...] = ()
    calls: tuple[ToolCall, ...] = ()
    text: str = ""
    channels: tuple[ChannelSpan, ...] = ()
    grammar: str | None = None
    finish_reason: str | None = None
    cuts: tuple[tuple[int, int], ...] = ()  # (offset in text, characters dropped there)
    error: str | None = None

    @property
    def reasons(self) -> tuple[str, ...]:
        """Distinct reason codes, in order of first appearance in the text."""
        seen: dict[str, None] = {}
        for f in self.findings:
            seen.setdefault(f.reason, None)
        return tuple(seen)

    @property
    def dropped(self) -> int:
        return sum(n for _, n in self.cuts)

    def source_offset(self, offset: int) -> int:
        """Map an offset in ``text`` back to the uncut input (raw text grading)."""
        return offset + sum(n for at, n in self.cuts if at <= offset)

    def to_json(self, *, with_calls: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            "verdict": self.verdict,
            "reasons": list(self.reasons),
            "findings": [f.to_json() for f in self.findings],
            "grammar": self.grammar,
            "finish_reason": self.finish_reason,
        }
        if with_calls:
            out["calls"] = [c.to_json() for c in self.calls]
        if self.cuts:
            out["cuts"] = [list(c) for c in self.cuts]
        if self.error is not None:
            out["error"] = self.error
        return out


def decide_verdict(reasons: Iterable[str], has_call: bool, finish_reason: str | None) -> str:
    """degenerate > truncated > suspect > well_formed | no_tool_call.

    Any hard reason, or two distinct soft ones, is degenerate. A generation cut by
    ``finish_reason == "length"`` with no hard reason is truncated (its prefix was fine). One
    soft reason alone is suspect: a recoverable dialect deviation with no degeneration signal.
    A soft reason about the ending itself (family ``end``: ``length_tools_no_call``) is not
    excused by ``length``: alone it is suspect. Info and signal reasons never change the verdict.
    """
    codes = set(reasons)
    if not codes:
        if finish_reason == "length":
            return TRUNCATED
        return WELL_FORMED if has_call else NO_TOOL_CALL
    if "bad_input" in codes:
        return ERROR
    soft = 0
    for code in codes:
        sev = REASON_SPECS[code].severity
        if sev == "hard":
            return DEGENERATE
        if sev == "soft":
            soft += 1
    if soft >= 2:
        return DEGENERATE
    if finish_reason == "length" and not codes & END_SOFT:
        return TRUNCATED
    if soft:
        return SUSPECT
    return WELL_FORMED if has_call else NO_TOOL_CALL


class FindingSink:
    """Collects findings for one grading run, bounded per reason code.

    (A plain class with slots, not a dataclass: one is made per grade, and a dataclass's
    default factories cost twice the construction.)"""

    __slots__ = ("counts", "findings")

    def __init__(self) -> None:
        self.findings: list[Finding] = []
        self.counts: dict[str, int] = {}

    def add(self, reason: str, start: int, end: int, channel: str, detail: str = "") -> None:
        n = self.counts.get(reason, 0)
        self.counts[reason] = n + 1
        if n < MAX_FINDINGS_PER_REASON:
            self.findings.append(Finding(reason, start, max(start, end), channel, detail))

    def __contains__(self, reason: str) -> bool:
        return reason in self.counts

    def sorted(self) -> tuple[Finding, ...]:
        if not self.findings:
            return ()
        return tuple(sorted(self.findings, key=lambda f: (f.start, f.end, f.reason)))
