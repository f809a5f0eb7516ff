"""Checks that run once per sample, over what the grammar pass found (issue 26).

The field reports of DeepSeek-V4 corruption on long generations (sglang#33397, vllm#50576,
sglang#36179, vllm#48089) show shapes the per-character text checks of :mod:`textcheck` do not
see: a passage repeated verbatim in long prose with a period over 1 KiB, short runs glued to a
word inside one tool-call value, identical calls repeated, think tags inside values, other chat
templates' special tokens, scripts glued inside one word, a generation that ran out of tokens
with tools offered and no call, and a prose answer that stops mid-word when a call was expected.

Each runs once per sample (not per character in a compiled pass), so they are written once, in
Python; every number is in :mod:`exporter.dsml.thresholds`. Pure: text in, findings out. Three
of them first ask a screen whether their exact pass can find anything at all (the glue seams,
the prose-loop probes, the value-loop regex); the C accelerator (:mod:`accel`) answers those
when it runs, and the Python twins here (``_may_glue``, :func:`prose_screens_python`,
:func:`value_screens_python`) are their specification.
"""

from __future__ import annotations

import json
import operator
import re
import unicodedata
from collections.abc import Iterable, Sequence
from itertools import compress, count, islice, pairwise

from exporter.dsml import accel, engines
from exporter.dsml import markers as m
from exporter.dsml import thresholds as t
from exporter.dsml.catalog import STOPS
from exporter.dsml.quoting import Quoting
from exporter.dsml.result import FindingSink, ToolCall
from exporter.dsml.schema import ToolSet
from exporter.dsml.textcheck import Hit, check_text, hits_of, is_nonascii_punct

# --- prose_loop --------------------------------------------------------------------------------


def find_prose_loop(text: str) -> tuple[int, int, str] | None:
    """A passage of words repeated verbatim back to back ``PROSE_LOOP_COPIES`` times, the copies
    after the first holding ``PROSE_LOOP_MIN_WORDS`` words: (start, end, detail) or None.

    Word level and any period (the character-level ``ngram_loop`` stops at 1024 characters):
    shingles of ``PROSE_LOOP_NGRAM`` words; a run of positions whose shingle last occurred
    exactly ``p`` words earlier is a stretch equal to itself shifted by ``p``."""
    if not prose_screens(text)[0]:
        return None  # most prose: no need to build its list of words
    return _loop_in_words(text, text.split())


def prose_screens(text: str) -> tuple[bool, bool, bool]:
    """Whether the prose-loop, template-token and glue passes of :func:`check_prose` can find
    anything in ``text``: the accelerator's one pass over it, or its twin."""
    native = accel.prose_screens
    if native is None:
        return prose_screens_python(text)
    return native(text, *_PROSE_SCREEN_ARGS)


def reasoning_passes(
    text: str, end: int | None = None
) -> tuple[list[Hit], tuple[bool, bool, bool], bool]:
    """``check_text(text)``, :func:`prose_screens` of it, and whether it holds ``<`` or
    ``DSML`` (else ``tokens.scan`` finds no event there): reasoning is read whole by all three
    (the text checks, :func:`check_prose`, the grammar's event scan), so the accelerator runs
    their character passes in one loop (``scan_prose``); without it, the twins one after the
    other. (A plain tuple: this runs once per grade, short reasoning included.)

    ``end``: the same of ``text[:end]``; the accelerator reads it in place, and the head is
    copied only where a hit needs its text."""
    native = accel.scan_prose
    stop = len(text) if end is None else end
    head = text if stop == len(text) else None  # text[:stop], sliced only when needed
    if native is None or not stop:  # check_text has nothing to say about ""
        head = text[:stop] if head is None else head
        return check_text(head), prose_screens(head), "<" in head or "DSML" in head
    found, screens, tagged = native(text, *_PROSE_SCREEN_ARGS, stop)
    if not any(found):  # hits_of's own test: no hit (most reasoning), no head needed
        return [], screens, tagged
    return hits_of(text[:stop] if head is None else head, found), screens, tagged


def prose_screens_python(text: str) -> tuple[bool, bool, bool]:
    """:func:`prose_screens` in Python, the specification of the accelerator's: the prose-loop
    screen (:func:`_may_loop`), one of ``_TEMPLATE_NEEDLES`` present, and :func:`_may_glue`
    on non-ASCII text."""
    return (
        _may_loop(text),
        any(needle in text for needle in _TEMPLATE_NEEDLES),
        not text.isascii() and _may_glue(text),
    )


def _may_loop(text: str) -> bool:
    """Whether :func:`find_prose_loop`'s pass can find a loop: enough characters and words,
    and a probe of the words joined by single spaces that occurs earlier too
    (:func:`_may_repeat`)."""
    n = t.PROSE_LOOP_NGRAM
    need = t.PROSE_LOOP_MIN_WORDS
    if len(text) < need * 2:  # a word and a space at the very least
        return False
    words = text.split()
    return len(words) >= need + n and _may_repeat(" ".join(words), need)


def _loop_in_words(text: str, words: list[str]) -> tuple[int, int, str] | None:
    """:func:`find_prose_loop`'s pass over the words, without its screens.

    Each shingle is numbered by the position of its first occurrence (equal shingles, equal
    numbers: the pass compares ints, not tuples of words). Only stretches where every shingle
    occurred before can hold a loop: a first occurrence sets both runs of :func:`_loop_pass`
    back to zero (no shingle before it equals it), and a run needs ``PROSE_LOOP_MIN_WORDS -
    PROSE_LOOP_NGRAM + 1`` shingles. So the pass runs only over the stretches between first
    occurrences that are that long, each from a zero state, with the last occurrences before
    it (most prose has none: its shingles are new, or its copies short); a test holds this
    equal to the pass over everything."""
    ids = shingle_ids(words)
    total = len(ids)
    firsts = list(compress(range(total), map(operator.eq, ids, range(total))))
    firsts.append(total)  # where the last stretch ends
    least = t.PROSE_LOOP_MIN_WORDS - t.PROSE_LOOP_NGRAM + 1
    last: dict[int, int] = {}
    done = 0  # shingles entered in `last` so far
    for a, b in pairwise(firsts):
        if b - a > least:  # shingles a+1 .. b-1 all occurred before
            last.update(zip(ids[done : a + 1], range(done, a + 1), strict=True))
            found = _loop_pass(text, words, ids, last, a + 1, b)
            if found is not None:
                return found
            done = b
    return None


def shingle_ids(words: list[str]) -> list[int]:
    """Each ``PROSE_LOOP_NGRAM``-word shingle of ``words`` as the position of its first
    occurrence."""
    first_at: dict[tuple[str, ...], int] = {}
    n = t.PROSE_LOOP_NGRAM
    shingles = zip(*(words[k:] for k in range(n)), strict=False)
    return list(map(first_at.setdefault, shingles, count()))


def _loop_pass(
    text: str,
    words: list[str],
    shingles: list[int],
    last: dict[int, int],
    start: int,
    stop: int,
) -> tuple[int, int, str] | None:
    """The shingle pass over ``shingles[start:stop]`` (numbered: :func:`shingle_ids`) from a
    zero state; ``last`` holds each shingle's last position before ``start`` (it is updated).
    Over everything (``0, len(shingles)`` and an empty ``last``) it is the whole of the
    prose-loop check."""
    n = t.PROSE_LOOP_NGRAM
    need = t.PROSE_LOOP_MIN_WORDS
    # Two runs: the period that has held longest, and the nearest recurrence's once it is
    # shorter. A passage that also occurs earlier in the text starts its first copy on the far
    # period, which can hold into the second copy by chance (one word alike at the seam); the
    # loop's own period is the nearer one.
    run_p = run_len = near_p = near_len = 0
    for i in range(start, stop):
        shingle = shingles[i]
        j = last.get(shingle)
        last[shingle] = i
        if run_p and shingles[i - run_p] == shingle:
            run_len += 1  # the current period holds (a nearer recurrence inside it is no break)
        elif j is None:
            run_p = run_len = 0
        else:
            run_p = i - j
            run_len = 1 + _held_before(shingles, i, run_p)
        if near_p and shingles[i - near_p] == shingle:
            near_len += 1
        elif j is not None and i - j < run_p:
            near_p = i - j
            near_len = 1 + _held_before(shingles, i, near_p)
        else:
            near_p = near_len = 0
        if max(run_len, near_len) + n - 1 < need:
            continue  # neither run is long enough yet (most shingles)
        for near, p, length in ((False, run_p, run_len), (True, near_p, near_len)):
            repeated = length + n - 1  # words equal to the words p before them
            # the copies after the first (a shingle's worth of slack where one copy meets the next)
            if not p or repeated < need or repeated < (t.PROSE_LOOP_COPIES - 1) * p - n:
                continue
            if _data_rows(words, i, p):  # rows of data: never a prose loop
                if near:
                    near_p = near_len = 0
                else:
                    run_p = run_len = 0
                continue
            first = i + n - repeated - p  # first word of the first copy
            begin, end = _word_span(text, first, i + n)
            return begin, end, f"{p}-word passage x{1 + repeated // p}"
    return None


_PROBE = 32  # characters of each probe of the prose-loop screen
# Longest text the screen is tried on: below it the probes cost less than the shingle pass
# (about 75 µs against 250 on a 4 KiB sample), above it their searches would grow with the
# square of the length while the pass stays linear.
_SCREEN_MAX = 8192


def _may_repeat(joined: str, need: int) -> bool:
    """Whether some probe of the words joined by single spaces occurs earlier too: a loop's
    copies after the first are ``need`` words or more (at least ``2 * need - 1`` characters),
    each equal to the text a fixed distance before it, so probes of ``_PROBE`` characters every
    ``2 * need - _PROBE`` characters put at least one inside them. ``str.find`` only."""
    if len(joined) > _SCREEN_MAX:
        return True  # each probe searches the text before it: quadratic, so short texts only
    stride = 2 * need - _PROBE
    find = joined.find
    for pos in range(stride, len(joined) - _PROBE + 1, stride):
        if find(joined[pos : pos + _PROBE], 0, pos + _PROBE - 1) >= 0:
            return True
    return False


_BACK = 64  # shingles looked back when a period starts: bounded, so the pass stays linear


def _held_before(shingles: list[int], i: int, p: int) -> int:
    """How many shingles just before ``i`` also equal the ones ``p`` before them (up to
    ``_BACK``): a period found late, after a nearer repeat inside the passage broke the run,
    still counts the words it held from the start of its copy."""
    k = i - 1
    while k - p >= 0 and i - k <= _BACK and shingles[k] == shingles[k - p]:
        k -= 1
    return i - 1 - k


def _data_rows(words: list[str], i: int, p: int) -> bool:
    """Fewer than ``PROSE_LOOP_MIN_DISTINCT`` lettered words in the repeated unit."""
    n = t.PROSE_LOOP_NGRAM
    unit = words[i + n - p : i + n]
    lettered = {w for w in unit if any(ch.isalpha() for ch in w)}
    return len(lettered) < t.PROSE_LOOP_MIN_DISTINCT


_WORD = re.compile(r"\S+")


def _word_span(text: str, first: int, stop: int) -> tuple[int, int]:
    """Character offsets of words ``first`` .. ``stop - 1`` (only computed on a hit); the
    words before them are skipped by ``islice``, in C."""
    words = _WORD.finditer(text)
    start = end = 0
    if first >= 0:
        at = next(islice(words, first, None), None)
        if at is None:
            return 0, 0
        start = at.start()
        if stop - 1 == first:
            return start, max(start, at.end())
        skip = stop - 2 - first  # words between the first and the last
    else:
        skip = stop - 1
    at = next(islice(words, skip, None), None) if skip >= 0 else None
    if at is not None:
        end = at.end()
    return start, max(start, end)


# --- template_token_leak ---------------------------------------------------------------------

_TEMPLATE = re.compile(
    r"<\|(?:im_start|im_end|im_sep|endoftext|eot_id|eom_id|start_header_id|end_header_id"
    r"|begin_of_text|end_of_text|fim_prefix|fim_middle|fim_suffix|fim_pad|file_sep|repo_name"
    r"|system|user|assistant|end|pad|python_tag)\|>|\[/?INST\]|<</?SYS>>"
)


# Every _TEMPLATE match holds one of these (not "<<" alone: C++ streams and shell
# here-documents hold it): the template screen.
_TEMPLATE_NEEDLES = ("<|", "[INST]", "[/INST]", "<<SYS>>", "<</SYS>>")
# what the accelerator's prose_screens and scan_prose take after the text
_PROSE_SCREEN_ARGS = (
    t.PROSE_LOOP_MIN_WORDS,
    t.PROSE_LOOP_NGRAM,
    _PROBE,
    _SCREEN_MAX,
    _TEMPLATE_NEEDLES,
)


def find_template_tokens(text: str) -> Iterable[tuple[int, int, str]]:
    """Other chat templates' special tokens (ChatML, Llama 3, Llama 2, Phi, FIM) outside
    Markdown quotes: leaked pretraining or template fragments (vllm#50576, vllm#48089).
    DeepSeek's own tokens are ``special_token_leak`` (the grammar pass)."""
    if any(needle in text for needle in _TEMPLATE_NEEDLES):
        yield from _template_tokens(text)


def _template_tokens(text: str) -> Iterable[tuple[int, int, str]]:
    """:func:`find_template_tokens` without its screen."""
    quoting: Quoting | None = None
    for mt in _TEMPLATE.finditer(text):
        quoting = quoting or Quoting(text)
        if not quoting.covers(mt.start()):
            yield mt.start(), mt.end(), mt.group()


# --- script_glued / value_salad ----------------------------------------------------------------

_LAT = "A-Za-z\u00c0-\u024f"
_ALPHA = {
    "latin": _LAT,
    "greek": "\u0370-\u03ff",
    "cyrillic": "\u0400-\u04ff",
    "hebrew": "\u05d0-\u05ea",
    "arabic": "\u0620-\u065f",
    "indic": "\u0900-\u0dff",
}
_THAI = "\u0e00-\u0e7f"  # no spaces between Thai words: counted in salad, never as glued
_EAST = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af"  # kana, Han, Hangul


def _glued_pattern() -> re.Pattern[str]:
    k = t.GLUED_MIN_LETTERS
    parts = []
    for a, ra in _ALPHA.items():
        for b, rb in _ALPHA.items():
            # a Latin word with an Indic case ending glued on is how Tamil, Bengali, Telugu
            # and Malayalam write loanwords (``daemonக்கு``, Debian's Tamil catalogs): the
            # ending is 2-3 letters, each with its vowel sign, so it passes the letter count
            if a != b and not (a == "latin" and b == "indic"):
                parts.append(f"[{ra}]{{{k}}}[{rb}]{{{k}}}")
        if a != "latin":  # Latin glued to CJK, kana or Hangul is ordinary writing
            parts.append(f"[{ra}]{{{k}}}[{_EAST}]|[{_EAST}][{ra}]{{{k}}}")
    return re.compile("|".join(parts))


_GLUED = _glued_pattern()


def _glue_table() -> bytes:
    """A script class per UTF-8 lead byte: ``a`` Latin, ``g`` Greek, ``c`` Cyrillic, ``h``
    Hebrew, ``r`` Arabic, ``i`` U+0800-U+0FFF (Indic and its neighbours), ``e`` kana, Han and
    Hangul (U+3000-U+DFFF), space for anything else. Each class holds its ``_ALPHA`` range (and
    some neighbours: a screen may let through, never hold back)."""
    table = bytearray(b" " * 256)
    for b in b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz":
        table[b] = ord("a")
    for lead, cls in (
        (range(0xC3, 0xCA), "a"),  # U+00C0-U+027F
        (range(0xCD, 0xD0), "g"),  # U+0340-U+03FF
        (range(0xD0, 0xD4), "c"),  # U+0400-U+04FF
        (range(0xD7, 0xD8), "h"),  # U+05C0-U+05FF
        (range(0xD8, 0xDA), "r"),  # U+0600-U+067F
        (range(0xE0, 0xE1), "i"),  # U+0800-U+0FFF
        (range(0xE3, 0xEE), "e"),  # U+3000-U+DFFF
    ):
        for b in lead:
            table[b] = ord(cls)
    return bytes(table)


_GLUE_TABLE = _glue_table()
_CONTINUATION = bytes(range(0x80, 0xC0))  # deleted: one class byte per character remains
_NON_LATIN_CLASSES = b"gchri"
_CLASSES = b"agchrie"


def _may_glue(text: str) -> bool:
    """Whether two scripts can touch inside a word, with C primitives only: at the seam of
    every :data:`_GLUED` match two adjacent characters have different classes, one of them a
    non-Latin alphabet. The regex tests dozens of alternatives at every position (it was most
    of a clean sample's grading time); this translates the UTF-8 bytes once, then looks for
    the classes present (``memchr``) and the two-byte seams between them."""
    classes = text.encode("utf-8", "surrogatepass").translate(_GLUE_TABLE, _CONTINUATION)
    # the accelerator's may_glue: adjacent classes differ, neither is space, and not both are
    # in "ae" (the loops below, written as one test over the class of each character)
    present = [c for c in _CLASSES if c in classes]
    for x in present:
        if x not in _NON_LATIN_CLASSES:
            continue
        for y in present:
            if y == x:
                continue
            if bytes((x, y)) in classes or (
                y not in _NON_LATIN_CLASSES and bytes((y, x)) in classes
            ):
                return True
    return False


def find_glued(text: str) -> Iterable[tuple[int, int, str]]:
    """Letters of two alphabetic scripts glued inside one word (``returnданных``)."""
    if text.isascii() or not (accel.may_glue or _may_glue)(text):
        return
    yield from _glued(text)


def _glued(text: str) -> Iterable[tuple[int, int, str]]:
    """:func:`find_glued` without its screens."""
    for mt in _GLUED.finditer(text):
        yield mt.start(), mt.end(), mt.group()


_GROUPS = {
    **{k: re.compile(f"[{v}]") for k, v in _ALPHA.items()},
    "thai": re.compile(f"[{_THAI}]"),
    "east": re.compile(f"[{_EAST}]"),
}


def _group(word: str) -> str | None:
    found = [g for g, rx in _GROUPS.items() if rx.search(word)]
    return found[0] if len(found) == 1 else None


# every group but Latin and the east (Greek to Thai): a value with none of them has two groups
_BETWEEN = re.compile("[" + "".join(v for k, v in _ALPHA.items() if k != "latin") + _THAI + "]")
_CLAUSE_END = tuple(",.;:!?，。、；：！？")


def find_value_salad(value: str) -> tuple[int, int, str] | None:
    """Words of ``SCRIPT_MIN_GROUPS`` or more scripts switching ``VALUE_SALAD_MIN_SWITCHES``
    times between words joined only by spaces, inside one value (one switch fewer across
    ``VALUE_SALAD_MANY_GROUPS`` groups)."""
    if value.isascii() and t.SCRIPT_MIN_GROUPS > 1:
        return None  # ASCII letters are one group (Latin): most values, and no regex run
    if t.SCRIPT_MIN_GROUPS > 2 and _BETWEEN.search(value) is None:
        return None  # Latin and the east at most (most non-ASCII values): one regex run
    return _value_salad(value)


def _value_salad(value: str) -> tuple[int, int, str] | None:
    """:func:`find_value_salad` without its screens."""
    if sum(1 for rx in _GROUPS.values() if rx.search(value)) < t.SCRIPT_MIN_GROUPS:
        return None
    chain: list[str] = []
    start = prev_end = 0
    prev: str | None = None
    for mt in _WORD.finditer(value):
        word = mt.group()
        g = _group(word)
        joined = prev is not None and value[prev_end : mt.start()].strip(" ") == ""
        if g is None or not joined or g == prev:
            chain = [g] if g else []
            start = mt.start()
        else:
            chain.append(g)
            switches, groups = len(chain) - 1, len(set(chain))
            if (switches >= t.VALUE_SALAD_MIN_SWITCHES and groups >= t.SCRIPT_MIN_GROUPS) or (
                switches >= t.VALUE_SALAD_MIN_SWITCHES - 1 and groups >= t.VALUE_SALAD_MANY_GROUPS
            ):
                return start, mt.end(), f"{len(chain) - 1} switches"
        prev, prev_end = g, mt.end()
        if word.endswith(_CLAUSE_END):
            prev = None  # punctuation separates: a list of translations is not salad
    return None


# --- value_loop --------------------------------------------------------------------------------

_VALUE_LOOP = re.compile(
    "(?<=[\\w.,;:!?)\\]])"  # glued: a word character or sentence punctuation before the run
    f"(\\S{{1,{t.VALUE_LOOP_MAX_UNIT}}}?)\\1{{{t.VALUE_LOOP_UNIT_REPEATS - 1},}}"
)
_HEX = re.compile("[0-9a-fA-F]+")
_PLAIN_ONE = frozenset("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_.")


def find_value_loop(value: str, flags: int | None = None) -> tuple[int, int, str] | None:
    """A short unit repeated back to back, glued to the word (or the sentence punctuation)
    before it, inside one value: ``startupabcabcabc...``, ``README.md的的的...``,
    ``Paris------...``. After a space or a line break a run is a rule or a banner, except a
    letter run (:func:`_letter_run`) and a run that ends the value far wider than its text
    (:func:`_closing_run`). ``flags``: :func:`value_flags` of ``value``, when the caller has
    them (:func:`check_values` screens a block's values in one call)."""
    if flags is None:
        flags = value_flags(value)
    # the screens say no (most values): no exact pass runs
    return (
        (_glued_run(value) if flags & V_GLUED else None)
        or (_letter_run(value) if flags & V_LETTERS else None)
        or (_closing_run(value) if flags & V_CLOSING else None)
        or (_word_run_exact(value) if flags & V_WORDS else None)
    )


# The screens of check_value over one value, as bits: value_screens' three, then whether a
# character is above 127 (salad, glue: non-ASCII values only), whether "think>" occurs
# (find_think_in_value's screen) and whether the value ends in a closing run's shortest tail
# (_closing_run's screen). 0 (most values): check_value has nothing to find.
V_GLUED, V_WORDS, V_LETTERS, V_NON_ASCII, V_THINK, V_CLOSING = 1, 2, 4, 8, 16, 32
_V_LOOP = V_GLUED | V_WORDS | V_LETTERS | V_CLOSING  # find_value_loop has something to run


def value_flags(value: str) -> int:
    """:func:`value_flags_python` of one value: the accelerator's, or the twin."""
    native = accel.value_flags
    if native is None:
        return value_flags_python(value)
    return native(value, ((0, len(value)),), *_VALUE_FLAG_NUMBERS)[0]


def values_flags(text: str, spans: Sequence[tuple[int, int]]) -> bytes:
    """:func:`value_flags_python` of ``text[a:b]`` for each span, one byte each: the
    accelerator's ``value_flags`` over the spans in one call (no slice, no call per value), or
    the twin."""
    native = accel.value_flags
    if native is None:
        return bytes(value_flags_python(text[a:b]) for a, b in spans)
    return native(text, spans, *_VALUE_FLAG_NUMBERS)


def value_flags_python(value: str) -> int:
    """The ``V_*`` bits of ``value``: the specification of the accelerator's ``value_flags``."""
    glued, words, letters = value_screens_python(value)
    tail = value.rstrip()  # str.rstrip's whitespace is re's \s
    closing = len(tail) >= _CLOSING_MIN and tail.endswith(tail[-1] * _CLOSING_MIN)
    return (
        (V_GLUED if glued else 0)
        | (V_WORDS if words else 0)
        | (V_LETTERS if letters else 0)
        | (0 if value.isascii() else V_NON_ASCII)
        | (V_THINK if "think>" in value else 0)
        | (V_CLOSING if closing else 0)
    )


def value_screens_python(value: str) -> tuple[bool, bool, bool]:
    """Whether ``_VALUE_LOOP`` matches anywhere in ``value``, whether :func:`_word_run`'s
    screens pass, and whether ``_LETTER_RUN`` matches: the specification of the first three bits
    of the accelerator's ``value_flags`` (each regex tries every unit at every position)."""
    return (
        _VALUE_LOOP.search(value) is not None,
        _word_run_screened(value),
        not value.isascii() and _LETTER_RUN.search(value) is not None,
    )


def _glued_run(value: str) -> tuple[int, int, str] | None:
    """The first ``_VALUE_LOOP`` match :func:`find_value_loop` does not pass over."""
    for mt in _VALUE_LOOP.finditer(value):
        unit = mt.group(1)
        copies = len(mt.group()) // len(unit)
        if len(unit) == 1:
            need = t.VALUE_LOOP_CHAR_REPEATS if ord(unit) > 127 else t.VALUE_LOOP_ASCII_RUN
            if unit in _PLAIN_ONE or copies < need:
                continue
        elif (
            "\\" in unit  # escapes written out: \x00\x00..., \n\n...
            or unit[0] == "%"  # printf conversions written out: %s%s%s... (message catalogs)
            or (_HEX.fullmatch(unit) and any(ch.isdigit() for ch in unit))  # hex: a7a7a7...
            or not any(ch.isalpha() or ord(ch) > 127 for ch in unit)
        ):
            continue
        return mt.start(), mt.end(), f"{unit[:16]!r} x{copies}"
    return None


_LETTERS_ONLY = re.compile(r"[^\W\d_]+")
# a unit of 1-3 letter words four times in a row: the screen (one regex pass in C, bounded
# backtracking) before the exact pass builds a list of the value's words
_WORD_UNIT_MAX = 3
_WORD_SCREEN_COPIES = 4
# value_screens' numbers, in the accelerator's order: read once, not per value
_VALUE_SCREEN_NUMBERS = (
    t.VALUE_LOOP_MAX_UNIT,
    t.VALUE_LOOP_UNIT_REPEATS,
    _WORD_UNIT_MAX,
    _WORD_SCREEN_COPIES,
    t.VALUE_WORD_LOOP_REPEATS - 1,
    t.VALUE_LOOP_CHAR_REPEATS,
)
_WORD_RUN_SCREEN = re.compile(
    rf"(?<!\S)((?:[^\W\d_]+ ){{1,{_WORD_UNIT_MAX}}}?)\1{{{_WORD_SCREEN_COPIES - 1}}}"
)


def _word_run(value: str) -> tuple[int, int, str] | None:
    """One to three words (letters only) repeated ``VALUE_WORD_LOOP_REPEATS`` times back to
    back, single spaces between: ``the the the ...`` inside a search query (issue 32). One pass
    per unit size over the words: linear."""
    return _word_run_exact(value) if _word_run_screened(value) else None


def _word_run_screened(value: str) -> bool:
    """:func:`_word_run`'s screens: enough spaces, and a unit of words four times."""
    return (
        value.count(" ") >= t.VALUE_WORD_LOOP_REPEATS - 1
        and _WORD_RUN_SCREEN.search(value) is not None
    )


def _word_run_exact(value: str) -> tuple[int, int, str] | None:
    """:func:`_word_run`'s pass over the words, without its screens."""
    spans = [(mt.start(), mt.end()) for mt in _WORD.finditer(value)]
    words = [value[a:b] for a, b in spans]
    for k in (1, 2, 3):
        run = 0  # words equal to the word k before them, in a row, single spaces between
        few_letters = False  # this run's unit was judged: too few distinct letters
        for i in range(k, len(words)):
            same = (
                words[i] == words[i - k]
                and spans[i][0] == spans[i - 1][1] + 1
                and value[spans[i][0] - 1] == " "
                and _LETTERS_ONLY.fullmatch(words[i]) is not None
            )
            run = run + 1 if same else 0
            if not same:
                few_letters = False
            elif not few_letters and (run + k) // k >= t.VALUE_WORD_LOOP_REPEATS:
                unit = words[i - k + 1 : i + 1]
                if len({c.lower() for w in unit for c in w}) < t.LOOP_MIN_LETTERS:
                    few_letters = True  # ha ha ha...: the whole run is judged once
                    continue
                first = i - run - k + 1
                copies = (run + k) // k
                return spans[first][0], spans[i][1], f"{' '.join(unit)[:16]!r} x{copies}"
    return None


_LETTER_RUN = re.compile(f"([^\\x00-\\x7f])\\1{{{t.VALUE_LOOP_CHAR_REPEATS - 1},}}")
# the shortest closing run of either kind (the exact pass then asks the kind's own length)
_CLOSING_MIN = min(t.VALUE_LOOP_ASCII_RUN, t.VALUE_CLOSING_PUNCT_RUN)
# value_flags' numbers, in the accelerator's order: value_screens' and the closing run's tail
_VALUE_FLAG_NUMBERS = (*_VALUE_SCREEN_NUMBERS, _CLOSING_MIN)
_CLOSING_RUN = re.compile(f"(?:\\A|\\n)[ \\t]*(([^\\w\\s])\\2{{{_CLOSING_MIN - 1},}})\\s*\\Z")


def _letter_run(value: str) -> tuple[int, int, str] | None:
    """One non-ASCII letter (a CJK character, a Cyrillic letter) repeated
    ``VALUE_LOOP_CHAR_REPEATS`` times anywhere in the value, glued or not (``\\n了了了...``):
    no script writes a word so. Modifier letters (``ー``, ``々``) and symbols (box drawing
    ``────``, ``——``) are rules, not letters."""
    if value.isascii():
        return None  # the run is of one non-ASCII character
    for mt in _LETTER_RUN.finditer(value):
        ch = mt.group(1)
        if unicodedata.category(ch) in ("Lu", "Ll", "Lo"):
            return mt.start(), mt.end(), f"{ch!r} x{len(mt.group())}"
    return None


def _closing_need(ch: str) -> int:
    """How long a run of ``ch`` closing a value must be: non-ASCII punctuation (an em-dash)
    ``VALUE_CLOSING_PUNCT_RUN`` at any width, any other symbol ``VALUE_LOOP_ASCII_RUN``."""
    return t.VALUE_CLOSING_PUNCT_RUN if is_nonascii_punct(ch) else t.VALUE_LOOP_ASCII_RUN


def _closing_run(value: str) -> tuple[int, int, str] | None:
    """One symbol (not a letter, digit or ``_``) repeated alone on the value's last line, with
    nothing after it: ``VALUE_LOOP_ASCII_RUN`` times and more than twice as wide as any other
    line of the value (``print(f(3))`` then 150 dashes; a closing rule or banner is as wide as
    the text it frames), or non-ASCII punctuation ``VALUE_CLOSING_PUNCT_RUN`` times at any
    width (code, then 27 em-dashes: text uses those between sections, not to end)."""
    if len(value) < _CLOSING_MIN:
        return None  # shorter than the run (most values): no copy stripped for the test below
    tail = value.rstrip()  # str.rstrip's whitespace is re's \s
    need = _closing_need(tail[-1]) if tail else _CLOSING_MIN
    if len(tail) < need or not tail.endswith(tail[-1] * need):
        return None  # the run ends the value, but for whitespace: most values end otherwise
    return _closing_run_exact(value)


def _closing_run_exact(value: str) -> tuple[int, int, str] | None:
    """:func:`_closing_run` without its screen."""
    mt = _CLOSING_RUN.search(value)
    if mt is None:
        return None
    start, end = mt.span(1)
    ch = mt.group(2)
    if end - start < _closing_need(ch):
        return None
    if not is_nonascii_punct(ch):
        widest = max((len(line) for line in value[:start].splitlines()), default=0)
        if end - start <= 2 * widest:
            return None
    return start, end, f"{ch!r} x{end - start} closing the value"


# --- think_in_value ----------------------------------------------------------------------------

_THINK = re.compile(r"</?think>")
_CODE_BEFORE = frozenset("\"'`\\?*")
_CODE_AFTER = frozenset("\"'`\\")


def find_think_in_value(value: str) -> tuple[int, int, str] | None:
    """``<think>`` or ``</think>`` inside a value, not in a code literal: a quote, backtick or
    backslash next to it, or a regex's ``?``/``*`` before it (``text.split("</think>")``,
    ``r"<think>.*?</think>"``)."""
    if "think>" not in value:
        return None  # every match ends so (most values)
    for mt in _THINK.finditer(value):
        before = value[mt.start() - 1] if mt.start() else ""
        after = value[mt.end()] if mt.end() < len(value) else ""
        if before in _CODE_BEFORE or after in _CODE_AFTER:
            continue
        return mt.start(), mt.end(), mt.group()
    return None


# --- phrase_loop ------------------------------------------------------------------------------

# a sentence ends in ASCII terminators before whitespace or the end (not ``wintypes.ULONG``,
# ``v1.2``), or in CJK ones before anything; the lead lookahead (either branch's first
# character) spares trying both branches at every other character: 2.5x faster split
_TERMINATOR_CHARS = ".!?。！？"  # every _TERMINATOR run holds one of them
_TERMINATOR_RUN = r"([.!?]+(?=\s|\Z)|[。！？]+[.!?]*)"
_TERMINATOR = re.compile(f"(?=[{_TERMINATOR_CHARS}])" + _TERMINATOR_RUN)


def _width(text: str) -> int:
    """Display width: a CJK character (U+2E80 and up) is two columns, and says about as much
    as a short word."""
    return len(text) + sum(1 for c in text if c >= "\u2e80")


def find_phrase_loop(text: str) -> tuple[int, int, str] | None:
    """One sentence written ``PHRASE_LOOP_COPIES`` times back to back (whitespace between):
    the short loop a damaged sampler falls into before it emits a valid block, below
    ``ngram_loop``'s repeat counts and ``prose_loop``'s passage length (issue 32).

    A sentence is the text since the previous terminator run, stripped, with its own
    terminators. ``re.split``, ``map(str.strip)`` and ``map(operator.eq)`` (all in C) cut the
    text and look for two equal neighbours; only then does a Python loop count the run."""
    need = t.PHRASE_LOOP_COPIES
    if 2 * len(text) < need * t.PHRASE_LOOP_MIN_CHARS:  # a CJK character is two wide
        return None
    if sum(map(text.count, _TERMINATOR_CHARS)) < need:
        return None  # fewer terminators than copies (most short prose): no split
    return _phrase_loop(text)


def _phrase_loop(text: str) -> tuple[int, int, str] | None:
    """:func:`find_phrase_loop`'s pass, without its screens."""
    need = t.PHRASE_LOOP_COPIES
    parts = _TERMINATOR.split(text)  # text, terminators, text, terminators, ..., text
    terms = parts[1::2]
    said = list(map(str.strip, parts[0:-1:2]))  # the sentence before each terminator run
    if not any(map(operator.eq, said, said[1:])):
        return None
    run = 1
    for j in range(1, len(terms)):
        if not said[j] or said[j] != said[j - 1] or terms[j] != terms[j - 1]:
            run = 1
            continue
        run += 1
        sentence = said[j] + terms[j]
        if (
            run >= need
            and _width(sentence) >= t.PHRASE_LOOP_MIN_CHARS
            and len({c for c in sentence if c.isalpha()}) >= t.LOOP_MIN_LETTERS
        ):
            first = j - run + 1
            before = sum(map(len, parts[: 2 * first + 1]))  # through the first copy's text
            start = (
                before - len(said[first]) - (len(parts[2 * first]) - len(parts[2 * first].rstrip()))
            )
            end = sum(map(len, parts[: 2 * j + 2]))
            return start, end, f"{sentence[:40]!r} x{run}"
    return None


# --- quoted_block ----------------------------------------------------------------------------


def _openers(grammar: str | None) -> tuple[str, ...]:
    """The block openers the deployment's parser looks for: V3.2 and V4 read each other's
    invokes, V4.1 only its own; unknown: all three; plus what the deployment's vLLM release
    also runs (:func:`exporter.dsml.engines.openers`: other block names, a bare invoke)."""
    if grammar == "v4.1":
        return (m.block_open("v4.1"), *engines.openers(grammar))
    if grammar in ("v3.2", "v4"):
        return (m.block_open("v3.2"), m.block_open("v4"), *engines.openers(grammar))
    return tuple(m.block_open(g) for g in m.GRAMMARS)


def find_quoted_block(text: str, grammar: str | None) -> tuple[int, int, str] | None:
    """A block opener inside a Markdown fence or a backtick span of the prose: the grader reads
    it as quoted text, but SGLang 0.5.23 and vLLM (0.24 and 0.30+) look for the opener
    anywhere in content: they cut the content there and run the example as a real call."""
    if "DSML" not in text:
        return None
    quoting: Quoting | None = None
    for opener in _openers(grammar):
        at = text.find(opener)
        while at >= 0:
            quoting = quoting or Quoting(text)
            if quoting.covers(at):
                return at, at + len(opener), opener
            at = text.find(opener, at + 1)
    return None


# --- the per-sample entry points -----------------------------------------------------------------


def check_prose(
    sink: FindingSink,
    text: str,
    base: int,
    channel: str,
    screens: tuple[bool, bool, bool] | None = None,
) -> None:
    """Reasoning, or content outside any block. ``screens``: :func:`prose_screens` of
    ``text`` when the caller has it already (:func:`reasoning_passes`)."""
    if not text:
        return  # a content channel that opens with its block: no prose
    # one pass: most prose stops here
    may_loop, may_template, may_glue = prose_screens(text) if screens is None else screens
    loop = _loop_in_words(text, text.split()) if may_loop else None
    if loop is not None:
        sink.add("prose_loop", loop[0] + base, loop[1] + base, channel, loop[2])
    elif channel == "content" and (phrase := find_phrase_loop(text)) is not None:
        # content only: what the client reads before the call (reasoning is long, and its
        # loops are ngram_loop's and prose_loop's)
        sink.add("phrase_loop", phrase[0] + base, phrase[1] + base, channel, phrase[2])
    for a, b, detail in _template_tokens(text) if may_template else ():
        sink.add("template_token_leak", a + base, b + base, channel, detail)
    for a, b, detail in _glued(text) if may_glue else ():
        sink.add("script_glued", a + base, b + base, channel, detail)


def check_values(
    sink: FindingSink, text: str, spans: Sequence[tuple[int, int]], base: int, channel: str
) -> None:
    """:func:`check_value` of ``text[a:b]`` for each span in order (offsets shifted by
    ``base``), but a span that starts before the previous one checked ends (overlapping spans
    of unclosed values: each character is read once). The values are screened together first
    (:func:`values_flags`); one with no flag (most) is not sliced."""
    if not spans:
        return  # no call, no tool values (most short answers)
    kept: list[tuple[int, int]] = []
    done = 0
    for a, b in spans:
        if a >= done:
            kept.append((a, b))
            done = b
    for (a, b), flags in zip(kept, values_flags(text, kept), strict=True):
        if flags:
            check_value(sink, text[a:b], base + a, channel, flags)


def check_value(
    sink: FindingSink, value: str, base: int, channel: str, flags: int | None = None
) -> None:
    """One string value of a tool call (a ``string="true"`` parameter, a parsed string).
    ``flags``: :func:`value_flags` of ``value`` when the caller has them."""
    if flags is None:
        flags = value_flags(value)
    if flags & _V_LOOP and (found := find_value_loop(value, flags)) is not None:
        sink.add("value_loop", found[0] + base, found[1] + base, channel, found[2])
    if not flags & V_NON_ASCII:  # no salad (one script) and nothing glued: most values
        # find_think_in_value's own screen first: no call for most values
        if flags & V_THINK and (found := find_think_in_value(value)) is not None:
            sink.add("think_in_value", found[0] + base, found[1] + base, channel, found[2])
        return
    if (found := find_value_salad(value)) is not None:
        sink.add("value_salad", found[0] + base, found[1] + base, channel, found[2])
    if flags & V_THINK and (found := find_think_in_value(value)) is not None:
        sink.add("think_in_value", found[0] + base, found[1] + base, channel, found[2])
    for a, b, detail in find_glued(value):
        sink.add("script_glued", a + base, b + base, channel, detail)


def check_calls(sink: FindingSink, calls: Sequence[ToolCall], channel: str) -> None:
    """The same tool with the same arguments more than once in one response. Both copies reach
    the client intact (SGLang and vLLM deliver every parsed invoke), so repetition alone is
    judged by what the client receives: a loop of ``DUPLICATE_MIN_COPIES`` copies back to back
    is ``duplicate_call``; any other repeat is the ``repeated_call`` signal (agents poll, retry
    and fan out with the same arguments)."""
    if len({call.name for call in calls}) == len(calls) and t.DUPLICATE_MIN_COPIES > 1:
        # no two calls of one tool (most responses): no key below can repeat, as a key is
        # the name, NUL, then JSON (which escapes NUL), so no arguments need serialising
        return
    _call_repeats(sink, calls, channel)


def _call_repeats(sink: FindingSink, calls: Sequence[ToolCall], channel: str) -> None:
    """:func:`check_calls` without its screen."""
    seen: dict[str, int] = {}
    prev, run, looped = "", 0, False
    repeat: ToolCall | None = None
    for call in calls:
        key = call.name + "\0" + json.dumps(call.arguments, sort_keys=True, default=str)
        run = run + 1 if key == prev else 1
        prev = key
        seen[key] = seen.get(key, 0) + 1
        if run == t.DUPLICATE_MIN_COPIES:
            looped = True
            sink.add("duplicate_call", call.start, call.end, channel, f"{call.name} x{run}")
        elif seen[key] == 2 and repeat is None:
            repeat = call
    if repeat is not None and not looped:
        sink.add("repeated_call", repeat.start, repeat.end, channel, repeat.name)


def check_end(
    sink: FindingSink,
    *,
    finish_reason: str | None,
    tools: ToolSet | None,
    has_call: bool,
    dsml_seen: bool,
    prose: str,
    n: int,
) -> None:
    """How the generation ended, when tools were offered and no call was even started:
    ``length`` spent on prose or reasoning (sglang#33397: long answers hit ``max_tokens`` with
    zero tool calls), or a prose answer under ``stop`` that ends in a letter, ``,`` or ``:``.

    The second is a signal, not a verdict (issue 32): on clean answers from independent text in
    14 scripts, answers ending in a list item, a URL, a heading, a table row, a label or a CJK
    sentence without its ``。`` are the norm, and a cut mid-word looks the same."""
    if not tools or has_call or dsml_seen:
        return  # a cut inside a started block is length_in_block: truncation, not this
    if finish_reason == "length":
        sink.add("length_tools_no_call", n, n, "content", "finish_reason length, tools offered")
        return
    if finish_reason not in STOPS:
        return
    tail = prose.rstrip()
    if len(tail) >= t.CUT_MIN_CHARS and (tail[-1].isalpha() or tail[-1] in ",:"):
        sink.add("cut_under_stop", n, n, "content", f"ends in {tail[-12:]!r}")
