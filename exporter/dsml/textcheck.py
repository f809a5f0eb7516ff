"""Degeneration heuristics over one channel's text: loops, salads, leaks of bytes and controls.

Cost model: a regex that tests a character class at every position runs at roughly a tenth of
``str.find`` speed here, so each check first screens with C-speed primitives (``isascii``,
``bytes.translate``, ``bytes.find``/``count``) and runs its exact, offset-reporting pass only
when the screen says the pattern may be present. Thresholds live in :mod:`thresholds`.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from functools import lru_cache

from exporter.dsml import accel
from exporter.dsml import thresholds as t
from exporter.dsml.accel import ScanResult
from exporter.dsml.loops import MIN_LOOP_CHARS, Loop, find_loops
from exporter.dsml.screen import CONTROL, PUNCT, classify
from exporter.dsml.scripts import GROUP_NAMES, find_script_mix

Hit = tuple[str, int, int, str]  # (reason, start, end, detail)

# --- control characters -------------------------------------------------------------------------
_CTRL = re.compile(r"[\x00-\x08\x0b\x0e-\x1a\x1c-\x1f\x7f-\x9f]|\x1b(?!\[)")
_C1 = re.compile(rb"\xc2[\x80-\x9f]")

# --- byte-level BPE leaks and double-encoded UTF-8 ------------------------------------------
# Continuation bytes 0x80-0xBF as they look after a wrong decode: cp1252 / latin-1 (U+0080-U+00BF
# and cp1252's specials) or GPT-2 style byte-level BPE (U+0122-U+0143 for 0x80-0xA0 and 0xAD).
_CONT = (
    "\u0080-\u00bf\u0122-\u0143"  # latin-1 / byte-level BPE
    "\u0152\u0153\u0160\u0161\u0178\u017d\u017e\u0192\u02c6\u02dc"  # cp1252 letters
    "\u2013\u2014\u2018-\u201a\u201c-\u201e\u2020-\u2022\u2026\u2030\u2039\u203a\u20ac\u2122"
)
_MOJIBAKE = re.compile(
    rf"[\u00c2\u00c3\u00d0\u00d1][{_CONT}]"  # 2-byte sequences: Ã©, Â , Ð¿, Ñ€
    rf"|[\u00e0-\u00ef][{_CONT}]{{2}}"  # 3-byte sequences: â€™, âĢĻ, å¥½
    rf"|\u00f0[{_CONT}]{{3}}"  # 4-byte sequences: ðŸ˜€, ðŁĺĢ
    # byte-level space/newline/tab glued into ASCII text: "theĠmodel", "endĊ", "ĠĠ"
    r"|[a-z0-9.,;:!?)\]}'\"][\u0120\u010a\u0109](?=[A-Za-z0-9])|\u0120\u0120|\u010a\u010a"
)
# The same in UTF-8 bytes, at one character: a lead (Â Ã Ð Ñ à-ï ð) followed by the first byte
# of a continuation look-alike (C2, C4-C6, CB, E2 80/82/84), or Ġ Ċ ĉ. Accented text ("é", "à")
# alone never matches. Every _MOJIBAKE match starts at such a character or one before it.
_MOJIBAKE_LEAD = re.compile(
    rb"\xc3[\x82\x83\x90\x91\xa0-\xb0](?=[\xc2\xc4\xc5\xc6\xcb]|\xe2[\x80\x82\x84])"
    rb"|\xc4[\x89\x8a\xa0]"
)
_MOJIBAKE_WALK = 256  # lead candidates of one kind walked before finditer takes over
# A necessary condition for a lead, with C primitives only: one ``bytes.translate`` names
# the bytes the lead sequences start with (A: C3, B: C4), the second bytes it allows after
# C3 (c; C4's 89/8A also c, A0 is one already) and the bytes that may follow (d: C2 C5 C6 CB, e:
# E2; B is also C4 as a follower). Every screen match leaves one of these strings in the
# translation (superset: "Bc" also stands for C4 82), so text without them skips the regex.
_MOJIBAKE_CLASSES = bytes(
    ord(
        "A"
        if b == 0xC3
        else "B"
        if b == 0xC4
        else "c"
        if b in (0x82, 0x83, 0x89, 0x8A, 0x90, 0x91) or 0xA0 <= b <= 0xB0
        else "d"
        if b in (0xC2, 0xC5, 0xC6, 0xCB)
        else "e"
        if b == 0xE2
        else "."
    )
    for b in range(256)
)
_MOJIBAKE_NEEDLES = (b"Acd", b"AcB", b"Ace", b"Bc")

# --- symbol salad ---------------------------------------------------------------------------------
_SALAD_ASCII = ",.;:!?"
_SALAD_RUN = re.compile(rf"[^\w\s][^\w]{{{t.SALAD_MIN_RUN - 1},}}")


def check_text(text: str) -> list[Hit]:
    """All text-degeneration hits in ``text`` (offsets relative to it); never raises.

    The C accelerator finds the positions when :mod:`accel` runs it; this module turns them into
    hits exactly as :func:`check_text_python` does (the reference, and what runs without it)."""
    if not text:
        return []
    native = accel.scan
    if native is None:
        return check_text_python(text)
    return hits_of(text, native(text))


def hits_of(text: str, found: ScanResult) -> list[Hit]:
    """The hits of the accelerator's ``scan`` answer over ``text``, exactly as
    :func:`check_text_python` reports them."""
    control, replacement, mojibake, mix, salad, loops = found
    if not (control or replacement or mojibake or mix or salad or loops):
        return []  # most channels
    hits: list[Hit] = [("control_chars", i, i + 1, f"U+{ord(text[i]):04X}") for i in control]
    hits.extend(("replacement_char", i, i + 1, "") for i in replacement)
    if len(mojibake) >= t.MOJIBAKE_MIN_HITS:
        hits.extend(("bpe_mojibake", a, b, repr(text[a:b])) for a, b in mojibake)
    if mix is not None:
        start, end, letters = mix
        names = "+".join(sorted(GROUP_NAMES[g] for g in letters))
        hits.append(("script_mix", start, end, f"{names}, {t.SCRIPT_MIN_SWITCHES} switches"))
    if salad:
        hits.extend(_salad(text))
    for start, end, period, repeats in loops:
        loop = Loop(start, end, period, repeats, text[start : start + period])
        hits.append(("ngram_loop", start, end, loop.detail()))
    return hits


def check_text_python(text: str) -> list[Hit]:
    """:func:`check_text` in Python: the specification the C accelerator is tested against.

    Each check's cheapest screen is tested here, before its generator is even created: most
    channels pass every screen, and a grade runs this once per channel."""
    if not text:
        return []
    utf8 = text.encode("utf-8", "surrogatepass")
    screened = classify(utf8)
    hits: list[Hit] = []
    if CONTROL in screened or b"\x1b" in utf8 or b"\xc2" in utf8:
        hits.extend(_control(text, utf8, screened))
    if not text.isascii():
        if "\ufffd" in text:
            hits.extend(_replacement(text))
        if b"\xc3" in utf8 or b"\xc4" in utf8:
            hits.extend(_mojibake(text, utf8))
        mix = find_script_mix(text, utf8, screened)
        if mix is not None:
            detail = f"{'+'.join(mix.groups)}, {mix.switches} switches"
            hits.append(("script_mix", mix.start, mix.end, detail))
    if _SALAD_SCREEN in screened:
        hits.extend(_salad(text))
    if len(text) >= MIN_LOOP_CHARS:
        for loop in find_loops(text):
            hits.append(("ngram_loop", loop.start, loop.end, loop.detail()))
    return hits


_SALAD_SCREEN = PUNCT * t.SALAD_MIN_RUN


def _control(text: str, utf8: bytes, screened: bytes) -> Iterator[Hit]:
    if (
        CONTROL not in screened
        and (b"\x1b" not in utf8 or screened.count(b"\x1b") == utf8.count(b"\x1b["))
        and (b"\xc2" not in utf8 or not _C1.search(utf8))
    ):
        return
    for found, mt in enumerate(_CTRL.finditer(text)):
        if found >= 8:
            break
        yield ("control_chars", mt.start(), mt.end(), f"U+{ord(mt.group()):04X}")


def control_in(text: str) -> str:
    """``U+XXXX`` of the first control character in ``text``, or ""."""
    mt = _CTRL.search(text)
    return f"U+{ord(mt.group()):04X}" if mt else ""


def _replacement(text: str) -> Iterator[Hit]:
    i = text.find("\ufffd")
    shown = 0
    while i >= 0 and shown < 8:
        yield ("replacement_char", i, i + 1, "")
        shown += 1
        i = text.find("\ufffd", i + 1)


def _mojibake(text: str, utf8: bytes) -> Iterator[Hit]:
    if b"\xc3" not in utf8 and b"\xc4" not in utf8:
        return
    # no separate "any needle?" test: the walk's first find per needle is that test
    spans = _mojibake_spans(text, utf8, utf8.translate(_MOJIBAKE_CLASSES))
    if len(spans) >= t.MOJIBAKE_MIN_HITS:
        for a, b in spans:
            yield ("bpe_mojibake", a, b, repr(text[a:b]))


def _mojibake_spans(text: str, utf8: bytes, classes: bytes) -> list[tuple[int, int]]:
    """The first 8 matches of ``_MOJIBAKE`` in ``text``, as ``finditer`` gives them.

    ``finditer`` over the whole text tries every branch at every character (some 80 ns a
    character: 150 µs on a 3 KB Turkish paragraph, whose "çı" passes the screen). Every match
    starts at a character whose UTF-8 opens a screen match (``_MOJIBAKE_LEAD``), or one before
    it (the glued-Ġ branch), so the same left-to-right, non-overlapping walk is done over only
    those positions, found from the translation with ``bytes.find``. Past
    ``_MOJIBAKE_WALK`` candidates of one kind, ``finditer`` takes over from the first one not
    collected: never much slower than scanning everything."""
    leads: set[int] = set()
    horizon = len(utf8)  # candidates past this byte offset were not collected
    for needle in _MOJIBAKE_NEEDLES:
        i, taken = classes.find(needle), 0
        while i >= 0:
            if taken == _MOJIBAKE_WALK:
                horizon = min(horizon, i)
                break
            leads.add(i)
            taken += 1
            i = classes.find(needle, i + 1)
    spans: list[tuple[int, int]] = []
    last_end = char = prev = 0
    match, lead = _MOJIBAKE.match, _MOJIBAKE_LEAD.match
    for at in sorted(x for x in leads if x < horizon):
        if lead(utf8, at) is None:
            continue
        char += len(utf8[prev:at].decode("utf-8", "surrogatepass"))
        prev = at
        # only the glued-Ġ branch starts a character early (at the ASCII before Ġ Ċ ĉ)
        for pos in (char - 1, char) if utf8[at] == 0xC4 else (char,):
            found = match(text, pos) if pos >= last_end else None
            if found is not None:
                spans.append(found.span())
                last_end = found.end()
                if len(spans) >= 8:
                    return spans
    if horizon < len(utf8):  # too many candidates: finditer goes on from the horizon
        char += len(utf8[prev:horizon].decode("utf-8", "surrogatepass"))
        for mt in _MOJIBAKE.finditer(text, max(last_end, char - 1)):
            spans.append(mt.span())
            if len(spans) >= 8:
                break
    return spans


def _salad(text: str) -> Iterator[Hit]:
    """The first salad run, once the screen (24 punctuation classes in a row) has passed."""
    for mt in _SALAD_RUN.finditer(text):
        run = mt.group()
        detail = _salad_detail(run)
        if detail:
            yield ("symbol_salad", mt.start(), mt.end(), detail)
            return


def _salad_detail(run: str) -> str:
    """Why ``run`` (no letters or digits) is salad, or "" when it is a rule, banner or art."""
    chars = "".join(run.split())
    if len(chars) < t.SALAD_MIN_RUN:
        return ""
    punct = {c: chars.count(c) for c in set(chars) if c in _SALAD_ASCII or is_nonascii_punct(c)}
    total = sum(punct.values())
    if total < t.SALAD_MIN_SHARE * len(chars):
        return ""
    non_ascii = sum(n for c, n in punct.items() if not c.isascii())
    if len(punct) >= t.SALAD_MIN_DISTINCT or non_ascii >= t.SALAD_LONG_NONASCII:
        return f"{total}/{len(chars)} punctuation, {len(punct)} kinds"
    return ""


@lru_cache(maxsize=4096)
def is_nonascii_punct(ch: str) -> bool:
    """Unicode punctuation (P*) beyond ASCII: what an em-dash or 。 flood is made of."""
    return not ch.isascii() and unicodedata.category(ch).startswith("P")
