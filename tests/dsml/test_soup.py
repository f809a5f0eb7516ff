"""Word-piece soup: runs found with their offsets, across the scan windows of a long value."""

from __future__ import annotations

import pytest

from exporter.dsml import thresholds as t
from exporter.dsml.soup import find_soup

RUN = "ation ment ness ity ous ly"


@pytest.mark.parametrize(
    "pad", [0, 7, 65_504, 65_505, 65_530, 65_536 - len(RUN) // 2, 200_003]
)  # 65_504: one window exactly, 65_505: two
def test_run_found_at_its_offset(pad: int) -> None:
    text = "y" * pad + " " + RUN + " tail"
    hit = find_soup(text)
    assert hit is not None
    start, end, pieces = hit
    assert text[start:end] == RUN and pieces == t.SOUP_MIN_PIECES


@pytest.mark.parametrize(
    "text",
    [
        "",
        "ation ment ness ity ous",  # one piece short
        "ation, ment, ness, ity, ous, ly",  # a list of suffixes
        "ation ment ness ity ous est",  # French 'est' is not a piece
        "word " * 50_000,
    ],
)
def test_near_misses(text: str) -> None:
    assert find_soup(text) is None
