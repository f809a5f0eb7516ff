"""Cross-script word salad: words of three or more scripts switching inside one sentence.

Bilingual text is normal (Chinese or Russian with English terms, Japanese kana with kanji), and
so are translation lists, where scripts are separated by punctuation, and paragraphs that
switch language from one sentence to the next (the window restarts at every sentence end).
Salad from a damaged decoder glues words of unrelated scripts together with only spaces between
them. A cheap screen (UTF-8 lead bytes, see :mod:`screen`) decides whether three script groups
occur at all; only then are single-script letter runs walked in a sliding window.
"""

from __future__ import annotations

import re
from collections import Counter, deque
from dataclasses import dataclass

from exporter.dsml import thresholds as t
from exporter.dsml.screen import groups_present

# Letter ranges per script group (the exact pass). CJK joins Han, kana and bopomofo: Japanese
# mixes them in every sentence. Latin excludes the multiplication and division signs.
GROUP_RANGES: dict[str, str] = {
    "latin": "A-Za-z\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u024f\u1e00-\u1eff",
    "greek": "\u0370-\u03ff\u1f00-\u1fff",
    "cyrillic": "\u0400-\u052f",
    "armenian": "\u0531-\u058f",
    "hebrew": "\u0590-\u05ff",
    "arabic": "\u0600-\u06ff\u0750-\u077f\u08a0-\u08ff\ufb50-\ufdff\ufe70-\ufeff",
    "indic": "\u0900-\u0dff",
    "thai": "\u0e00-\u0eff",
    "georgian": "\u10a0-\u10ff",
    "hangul": "\u1100-\u11ff\u3130-\u318f\uac00-\ud7af",
    "cjk": "\u3040-\u30ff\u3100-\u312f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff",
}
_RUNS = re.compile("|".join(f"(?P<{g}>[{r}]+)" for g, r in GROUP_RANGES.items()))
_SPACES = " \u3000\u00a0"  # what may join two words for a switch to count
_SENTENCE_END = re.compile("[.!?\n\u3002\uff01\uff1f\u0964\u06d4\u061f]")


@dataclass(frozen=True, slots=True)
class ScriptMix:
    start: int
    end: int
    groups: tuple[str, ...]
    switches: int


def find_script_mix(text: str, screened: bytes) -> ScriptMix | None:
    """The first window of ``SCRIPT_WINDOW`` words with 3+ groups and 8+ space-joined switches.

    ``screened`` is :func:`screen.classify` of the text's UTF-8."""
    if text.isascii() or groups_present(screened) < t.SCRIPT_MIN_GROUPS:
        return None
    window: deque[tuple[str, int, int, bool]] = deque()  # (group, start, end, switched)
    counts: Counter[str] = Counter()
    switches = 0
    prev_group, prev_end = "", -1
    for seen, mt in enumerate(_RUNS.finditer(text)):
        if seen >= t.SCRIPT_MAX_WORDS:
            break
        group = mt.lastgroup or ""
        start, end = mt.span()
        if end - start < 2 and group != "cjk":
            continue  # one-letter words: math variables, initials
        gap = text[prev_end:start] if prev_end >= 0 else "x"
        if _SENTENCE_END.search(gap):
            window.clear()  # a new sentence: scripts of the previous one do not count
            counts.clear()
            switches = 0
        switched = group != prev_group and not gap.strip(_SPACES)
        window.append((group, start, end, switched))
        counts[group] += 1
        switches += switched
        if len(window) > t.SCRIPT_WINDOW:
            old = window.popleft()
            counts[old[0]] -= 1
            if not counts[old[0]]:
                del counts[old[0]]
            switches -= old[3]
        if len(counts) >= t.SCRIPT_MIN_GROUPS and switches >= t.SCRIPT_MIN_SWITCHES:
            return ScriptMix(window[0][1], end, tuple(sorted(counts)), switches)
        prev_group, prev_end = group, end
    return None
