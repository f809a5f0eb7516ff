"""Word-piece soup: a run of bare sub-word pieces ("ation ment ness ity ous") joined by spaces.

A decoder reading wrong KV entries samples tokens that are plausible in isolation: common
English BPE continuation pieces, each decoded with its leading space. The result has letters,
no punctuation run and one script, so neither ``symbol_salad`` nor ``script_mix`` sees it, and
no exact repeat, so ``ngram_loop`` does not either. Real text never strings six of these pieces
together: each is a suffix or bound stem, not a word, in English or in the languages whose short
function words look alike (French ``est``, German ``ist``/``er``, Spanish ``es``/``al``/``de``
are left out of the list for that reason).

Cost: ``str.split`` and a set lookup per space-separated word, mapped in C into one byte per
word; a run is then a ``bytes.find``. Offsets are computed only when a run is found.
"""

from __future__ import annotations

from collections.abc import Sequence

from exporter.dsml import accel
from exporter.dsml import thresholds as t

PIECES: frozenset[str] = frozenset(
    [
        "ing",
        "ings",
        "tion",
        "tions",
        "ation",
        "ations",
        "ition",
        "ution",
        "ment",
        "ments",
        "ness",
        "nesses",
        "ity",
        "ities",
        "ous",
        "eous",
        "ious",
        "ive",
        "ives",
        "ize",
        "ized",
        "izes",
        "ise",
        "ised",
        "ly",
        "ily",
        "ally",
        "ers",
        "ible",
        "ical",
        "ial",
        "ism",
        "isms",
        "ance",
        "ence",
        "ancy",
        "ency",
        "ure",
        "ures",
        "ology",
        "ular",
        "ative",
        "atives",
        "ify",
        "ified",
        "ifies",
        "ish",
        "ic",
        "ics",
        "ated",
        "ating",
        "ization",
        "isation",
        "ibility",
        "ability",
        "iness",
    ]
)


accel.set_pieces(PIECES)


def first_soup(text: str, spans: Sequence[tuple[int, int]]) -> tuple[int, int, int] | None:
    """:func:`find_soup` over ``text[a:b]`` for each span in turn: the first run found, in
    ``text``'s offsets. The accelerator's ``soup_screen`` (:func:`may_soup_python`) says which
    span is the first that can hold one, in one call for a block's values: the spans before it
    are not sliced or split."""
    native = accel.soup_screen
    first = native(text, spans, t.SOUP_MIN_PIECES, _WINDOW) if native is not None else 0
    for a, b in spans[first:]:
        if text.count(" ", a, b) < t.SOUP_MIN_PIECES - 1:
            continue  # a run of pieces needs that many spaces between them
        soup = find_soup(text[a:b])
        if soup is not None:
            return a + soup[0], a + soup[1], soup[2]
    return None


def may_soup_python(value: str) -> bool:
    """Whether :func:`find_soup` can find a run in ``value``: longer than a window (the windows
    are read apart), or ``SOUP_MIN_PIECES`` words of ``value.split(" ")`` in a row are pieces.
    The specification of the accelerator's ``soup_screen``."""
    if len(value) > _WINDOW:
        return True
    run = 0
    for word in value.split(" "):
        run = run + 1 if word in PIECES else 0
        if run >= t.SOUP_MIN_PIECES:
            return True
    return False


def find_soup(text: str) -> tuple[int, int, int] | None:
    """(start, end, pieces) of the first run of ``SOUP_MIN_PIECES`` word pieces, or None.

    Long values are read in windows (overlapping by more than a minimal run), so the word list
    ``split`` builds stays small on a multi-megabyte value."""
    if text.count(" ") < t.SOUP_MIN_PIECES - 1:
        return None  # fewer spaces than a run has between its pieces
    if len(text) <= _WINDOW:
        return _soup_in(text)  # one window, the whole text (most values): no copy of it
    for at in range(0, max(1, len(text)), _WINDOW):
        hit = _soup_in(text[at : at + _WINDOW + _OVERLAP])
        if hit is not None:
            return hit[0] + at, hit[1] + at, hit[2]
    return None


_WINDOW = 1 << 16
_OVERLAP = 256  # > SOUP_MIN_PIECES x the longest piece + separators


def _soup_in(text: str) -> tuple[int, int, int] | None:
    words = text.split(" ")
    if len(words) < t.SOUP_MIN_PIECES or PIECES.isdisjoint(words):
        return None
    flags = bytes(map(PIECES.__contains__, words))
    k = flags.find(b"\x01" * t.SOUP_MIN_PIECES)
    if k < 0:
        return None
    n = k
    while n < len(flags) and flags[n]:
        n += 1
    start = sum(len(w) + 1 for w in words[:k])
    end = start + sum(len(w) + 1 for w in words[k:n]) - 1
    return start, end, n - k
