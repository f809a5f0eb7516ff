"""One ``bytes.translate`` that classifies every UTF-8 byte for the cheap screens.

Screens decide whether an exact (slower, offset-reporting) pass is worth running. Translating
the UTF-8 bytes once costs about as much as copying them, and the result answers three
questions with ``in`` / ``count``: are there control characters (``!``), is there a run of 24
punctuation/symbol characters with no letter or digit (``.`` * 24, whitespace deleted), and
which script groups occur (one letter per group, from UTF-8 lead bytes). Continuation bytes
(0x80-0xBF) are deleted, so each character leaves at most one byte.
"""

from __future__ import annotations

CONTROL = b"!"
PUNCT = b"."
GROUP_IDS = b"LGCAHRIJK"  # latin greek cyrillic armenian hebrew arabic indic/thai cjk hangul


def _class_of(byte: int) -> bytes:
    if byte < 0x80:
        ch = chr(byte)
        if byte == 0x1B:
            return b"\x1b"  # ESC: allowed only as ESC-[ (ANSI colour), counted separately
        if byte < 0x20 or byte == 0x7F:
            return CONTROL
        if ch.isalpha():
            return b"L"
        if ch.isdigit() or ch == "_":
            return b"a"
        return PUNCT
    lead_groups = (
        (range(0xC3, 0xCA), b"L"),  # U+00C0-U+027F Latin-1 letters, Latin Extended
        (range(0xCE, 0xD0), b"G"),
        (range(0xD0, 0xD5), b"C"),
        (range(0xD5, 0xD6), b"A"),
        (range(0xD6, 0xD8), b"H"),
        (range(0xD8, 0xDC), b"R"),
        (range(0xDD, 0xDE), b"R"),
        (range(0xE0, 0xE1), b"I"),  # Indic scripts and Thai (approximate on purpose)
        (range(0xE1, 0xE2), b"L"),  # Latin Extended Additional (Vietnamese) and others
        (range(0xE3, 0xEA), b"J"),  # kana, CJK
        (range(0xEA, 0xEE), b"K"),  # Hangul syllables
    )
    for span, group in lead_groups:
        if byte in span:
            return group
    if byte in (0xC2, 0xE2, 0xEE, 0xEF):
        return PUNCT  # Latin-1 punctuation, general punctuation/symbols, private use, fullwidth
    return b"a"  # other letters, emoji and supplementary planes: neither punctuation nor a group


TABLE = b"".join(_class_of(i) for i in range(256))
# For the script skeleton (one byte per character): group letters kept, a space stays a space,
# anything else becomes ".".
SCRIPT_TABLE = bytes(
    c if bytes([c]) in GROUP_IDS else 0x20 if i == 0x20 else 0x2E for i, c in enumerate(TABLE)
)
DELETE = b" \t\n\r\x0c" + bytes(range(0x80, 0xC0))


def classify(utf8: bytes) -> bytes:
    # U+3000-U+303F (CJK punctuation) shares its lead byte E3 with kana; renaming its two-byte
    # prefix to that of the fullwidth forms (EF BC, punctuation) keeps kana as letters.
    if b"\xe3\x80" in utf8:
        utf8 = utf8.replace(b"\xe3\x80", b"\xef\xbc")
    return utf8.translate(TABLE, DELETE)


def groups_present(screened: bytes) -> int:
    """Approximate number of script groups (the exact pass decides)."""
    return sum(1 for g in GROUP_IDS if g in screened)
