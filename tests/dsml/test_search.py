"""``search.find`` answers what ``str.find`` answers (it only gets there sooner on prose)."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from exporter.dsml import search
from exporter.dsml.markers import MARKER, THINK_CLOSE

_TEXT = st.sampled_from([*"<D/thinkSML>x 中｜", THINK_CLOSE, MARKER, "DSM"])
_NEEDLES = st.sampled_from([THINK_CLOSE, "DSML", f"<{MARKER}", "<", "D", "DSMLx", "中｜"])


@given(st.lists(_TEXT, max_size=30).map("".join), _NEEDLES, st.integers(0, 80), st.integers(0, 90))
@example("<" * 20 + THINK_CLOSE, THINK_CLOSE, 0, 90)  # past the false starts: str.find goes on
@example("<" * 20, THINK_CLOSE, 0, 90)
@example("x</think>", THINK_CLOSE, 0, 8)  # the needle does not fit before the end
@settings(max_examples=800, deadline=None)
def test_find_is_str_find(text: str, needle: str, start: int, end: int) -> None:
    assert search.find(text, needle, start, end) == text.find(needle, start, end)
    assert search.find(text, needle, start) == text.find(needle, start)
    # at the length its callers use it from
    long = "x" * search.LONG + text
    for at in (start, start + search.LONG):
        expected = long.find(needle, at, end + search.LONG)
        assert search.find(long, needle, at, end + search.LONG) == expected
