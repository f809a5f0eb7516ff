"""Cross-script word salad: words of three or more scripts switching inside one sentence.

Bilingual text is normal (Chinese or Russian with English terms, Japanese kana with kanji), and
so are translation lists, where scripts are separated by punctuation, and paragraphs that
switch language from one sentence to the next. Salad from a damaged decoder glues words of
unrelated scripts together with only spaces between them.

Cost: walking words in Python costs about a microsecond per word, too much for every
multilingual answer. Instead the UTF-8 bytes are translated into a *skeleton* with exactly one
byte per character (continuation bytes deleted): a script-group letter for letters, a space for
spaces, ``.`` for anything else. Switch points (``X *Y``, groups X != Y) are then found by one
bytes regex, and only those points, few in normal text, are looked at in Python.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from exporter.dsml import thresholds as t
from exporter.dsml.screen import GROUP_IDS, SCRIPT_TABLE, groups_present

GROUP_NAMES = dict(
    zip(
        GROUP_IDS,
        ("latin", "greek", "cyrillic", "armenian", "hebrew", "arabic", "indic", "cjk", "hangul"),
        strict=True,
    )
)
_G = GROUP_IDS.decode()
# the last letter of a word, followed (after only spaces) by a letter of another group
_SWITCH = re.compile(f"([{_G}])(?= *((?!\\1)[{_G}]))".encode())
_SENTENCE_END = re.compile("[.!?\n\u3002\uff01\uff1f\u0964\u06d4\u061f]")
_CJK = GROUP_IDS[GROUP_IDS.index(b"J") : GROUP_IDS.index(b"J") + 1][0]


@dataclass(frozen=True, slots=True)
class ScriptMix:
    start: int
    end: int
    groups: tuple[str, ...]
    switches: int


def skeleton(utf8: bytes) -> bytes:
    """One byte per character of the text the UTF-8 came from (see module docstring)."""
    if b"\xe3\x80" in utf8:  # CJK punctuation is not a letter (see screen.classify)
        utf8 = utf8.replace(b"\xe3\x80", b"\xef\xbc")
    return utf8.translate(SCRIPT_TABLE, bytes(range(0x80, 0xC0)))


def find_script_mix(text: str, utf8: bytes, screened: bytes) -> ScriptMix | None:
    """The first run of ``SCRIPT_MIN_SWITCHES`` switches between words (not one-letter words,
    except CJK) joined only by spaces, within ``SCRIPT_SPAN`` characters and one sentence,
    involving ``SCRIPT_MIN_GROUPS`` or more script groups."""
    if text.isascii() or groups_present(screened) < t.SCRIPT_MIN_GROUPS:
        return None
    skel = skeleton(utf8)
    if len(skel) != len(text):  # not valid UTF-8 one-to-one (cannot happen for str input)
        return None
    points: list[tuple[int, int, int]] = []  # (offset, group before, group after)
    need = t.SCRIPT_MIN_SWITCHES
    for seen, mt in enumerate(_SWITCH.finditer(skel)):
        if seen >= t.SCRIPT_MAX_SWITCHES:
            break
        pos, nxt = mt.start(), mt.start(2)
        before, after = skel[pos], skel[nxt]
        if not _word(skel, pos, before, -1) or not _word(skel, nxt, after, 1):
            continue  # one-letter words (math variables, initials) do not count
        points.append((pos, before, after))
        if len(points) >= need:
            first, last = points[-need], points[-1]
            if last[0] - first[0] <= t.SCRIPT_SPAN:
                groups = {g for p in points[-need:] for g in p[1:]}
                if len(groups) >= t.SCRIPT_MIN_GROUPS and not _SENTENCE_END.search(
                    text, first[0], last[0] + 1
                ):
                    names = tuple(sorted(GROUP_NAMES[g] for g in groups))
                    return ScriptMix(first[0], last[0] + 1, names, need)
    return None


def _word(skel: bytes, pos: int, group: int, step: int) -> bool:
    """The word at ``pos`` has two letters of ``group`` going in ``step`` direction (CJK: one)."""
    if group == _CJK:
        return True
    other = pos + step
    return 0 <= other < len(skel) and skel[other] == group
