"""``str.find`` for the grader's markers in long text, led by the marker's first character.

CPython's ``str.find`` looks for a string of several characters at about half a nanosecond a
character in 2-byte text (most multilingual reasoning: 1.6 µs for ``</think>`` in 3 KiB), but
for one character at ``memchr`` speed (a tenth of that). The grader's markers (``</think>``,
``DSML``, the block opener) start with a character that is rare in prose (``<``, ``D``), so
finding that character first and testing the marker there gives the same answer sooner; after
a few false starts (code full of ``<``) it hands over to ``str.find`` from where it stands, so
it is never much slower. Below :data:`LONG` characters (most content) the call itself costs
more than it saves: callers use ``str.find`` there. ``tests/dsml/test_search.py`` holds it
equal to ``str.find``.
"""

from __future__ import annotations

_TRIES = 8  # false starts before str.find takes over
LONG = 1024  # from this many characters on find() is sooner; below, the call costs more


def find(text: str, needle: str, start: int = 0, end: int | None = None) -> int:
    """``text.find(needle, start, end)`` for a non-empty ``needle`` and ``0 <= start``,
    ``end`` (None: the end of the text)."""
    if end is None:
        end = len(text)
    first = needle[0]
    at = text.find(first, start, end)
    for _ in range(_TRIES):
        if at < 0 or text.startswith(needle, at, end):
            return at
        at = text.find(first, at + 1, end)
    return at if at < 0 else text.find(needle, at, end)
