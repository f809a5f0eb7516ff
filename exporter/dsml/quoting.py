"""Markdown quoting: DSML inside a code fence or a backtick span is quoted text, not a call.

An answer that explains the format shows tags in code; those must not count. Two rules, both
linear and both stricter than CommonMark where strictness avoids swallowing a real block:

- A fence is a line starting (after any indentation) with three or more backticks or tildes;
  it quotes up to the next fence line of the same character, at least as long, with nothing
  else on it. An unclosed fence quotes nothing (CommonMark would run it to the end of the
  document and hide the real block that a model writes after a forgotten fence).
- A backtick span is a run of N backticks closed by the next run of exactly N backticks on the
  same line (CommonMark lets spans cross single newlines; tags quoted inline fit on one line).
"""

from __future__ import annotations

import bisect
import re

_TICKS = re.compile(r"`+")
MAX_INDENT = 64  # a fence indented further is not one (and is not worth a long look back)


class Quoting:
    """Answers "is offset ``pos`` of ``text`` quoted?"; work is done lazily, once per line.

    Queries come in increasing order from the structure pass, so the current line is cached and
    the search for the next line start only covers new text: linear over all queries.
    """

    def __init__(self, text: str) -> None:
        self._text = text
        self._fences: list[tuple[int, int]] | None = None
        self._fence_starts: list[int] = []
        self._line = (0, -1)  # [start, end) of the cached line
        self._spans: list[tuple[int, int]] = []
        self._span_starts: list[int] = []
        self._floor_at: int | None = None

    def _floor(self) -> int:
        """Start of the line of the first backtick or tilde: every quoted region (a fence line,
        indentation included, or a backtick span) starts there or later. Two ``str.find``s,
        once, spare the fence scan for the common text that quotes nothing before a block."""
        if self._floor_at is None:
            text = self._text
            found = [i for i in (text.find("`"), text.find("~")) if i >= 0]
            if not found:
                self._floor_at = len(text) + 1
            else:
                self._floor_at = text.rfind("\n", 0, min(found)) + 1
        return self._floor_at

    def covers(self, pos: int) -> bool:
        if pos < self._floor():
            return False  # no backtick or tilde before pos: nothing can quote it
        if self._fences is None:
            self._fences = fence_regions(self._text)
            self._fence_starts = [a for a, _ in self._fences]
        k = bisect.bisect_right(self._fence_starts, pos) - 1
        if k >= 0 and pos < self._fences[k][1]:
            return True
        start, end = self._line
        if not start <= pos < end:
            floor = end if pos >= end >= 0 else 0
            start = self._text.rfind("\n", floor, pos) + 1 or floor
            end = self._text.find("\n", pos)
            end = len(self._text) if end < 0 else end
            self._line = (start, end)
            self._spans = tick_regions(self._text, start, end)
            self._span_starts = [a for a, _ in self._spans]
        k = bisect.bisect_right(self._span_starts, pos) - 1
        return k >= 0 and pos < self._spans[k][1]


def fence_regions(text: str) -> list[tuple[int, int]]:
    """(start, end) of every closed fenced code block, in order.

    Fence candidates are found with ``str.find`` of the two fence strings (a ``^``-anchored
    regex tests every position and costs ten times more on text without fences)."""
    lines: list[tuple[int, str, int]] = []  # (line start, fence char, run length)
    for fence in ("```", "~~~"):
        i = text.find(fence)
        line_start, searched = 0, 0  # occurrences come in order: search each stretch once
        while i >= 0:
            nl = text.rfind("\n", searched, i)
            if nl >= 0:
                line_start = nl + 1
            searched = i
            run_end = i + 3
            while run_end < len(text) and text[run_end] == fence[0]:
                run_end += 1
            indent = i - line_start
            if indent <= MAX_INDENT and not text[line_start:i].strip(" \t"):
                lines.append((line_start, fence[0], run_end - i))
            i = text.find(fence, run_end)
    lines.sort()
    regions: list[tuple[int, int]] = []
    opener: tuple[str, int, int] | None = None  # (char, run length, start)
    for line_start, char, run in lines:
        line_end = text.find("\n", line_start)
        if line_end < 0:
            line_end = len(text)
        if opener is None:
            opener = (char, run, line_start)
            continue
        fence_end = text.find(char * run, line_start) + run
        while fence_end < line_end and text[fence_end] == char:
            fence_end += 1
        if char == opener[0] and run >= opener[1] and not text[fence_end:line_end].strip():
            regions.append((opener[2], line_end))
            opener = None
    return regions


def tick_regions(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """Backtick spans within ``text[start:end]`` (one line): each run pairs with the next run
    of the same length; unmatched runs are literal backticks."""
    runs = [(mt.start(), mt.end()) for mt in _TICKS.finditer(text, start, end)]
    if len(runs) < 2:
        return []
    following: list[int | None] = [None] * len(runs)
    last: dict[int, int] = {}
    for i in range(len(runs) - 1, -1, -1):
        size = runs[i][1] - runs[i][0]
        following[i] = last.get(size)
        last[size] = i
    spans: list[tuple[int, int]] = []
    i = 0
    while i < len(runs):
        j = following[i]
        if j is None:
            i += 1
            continue
        spans.append((runs[i][0], runs[j][1]))
        i = j + 1
    return spans
