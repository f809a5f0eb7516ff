"""Thresholds of the text heuristics, at and just below each boundary."""

from __future__ import annotations

import pytest

from exporter.dsml import thresholds as t
from exporter.dsml.loops import find_loops, min_repeats
from exporter.dsml.quoting import Quoting, fence_regions, tick_regions
from exporter.dsml.screen import classify, groups_present
from exporter.dsml.scripts import find_script_mix
from exporter.dsml.textcheck import check_text
from tests.dsml.opcount import calls_made


def codes(text: str) -> set[str]:
    return {h[0] for h in check_text(text)}


@pytest.mark.parametrize(
    ("unit", "need"),
    [
        ("the ", t.LOOP_REPEATS_SHORT),
        ("I will call it now. ", t.LOOP_REPEATS_MEDIUM),
        (" ".join(f"step{i}" for i in range(50)) + ". ", t.LOOP_REPEATS_LONG),
        ("ha", t.LOOP_REPEATS_FEW_LETTERS),
    ],
)
def test_loop_threshold_boundaries(unit: str, need: int) -> None:
    assert min_repeats(unit) == need
    assert "ngram_loop" in codes(unit * need + "end")
    assert "ngram_loop" not in codes(unit * (need - 1) + "end")


def test_letterless_units_never_loop_and_are_skipped_fast() -> None:
    assert min_repeats("0, ") is None
    assert find_loops("-=" * 100_000) == []


def test_loop_found_wherever_it_starts() -> None:
    unit = "call the tool again. "
    for offset in range(0, 300, 37):
        prefix = " ".join(f"w{i}" for i in range(offset))
        loops = find_loops(prefix + " " + unit * 10 + "done")
        assert loops and loops[0].period == len(unit)


@pytest.mark.parametrize(
    "text",
    [
        "x " + "—" * t.SALAD_LONG_NONASCII,
        "y " + ".,;:!?" * 4,
        "z " + "，。、" * 8,
    ],
)
def test_salad_triggers(text: str) -> None:
    assert "symbol_salad" in codes(text)


@pytest.mark.parametrize(
    "text",
    [
        "x " + "—" * (t.SALAD_LONG_NONASCII - 1),  # one kind, below the flood length
        "y " + ".,;:!?" * 3 + ".,;:!",  # 23 characters: one short of a run
        "z " + "!" * 100,  # emphasis, one kind
        "|:---|:---:|---:|" * 4,  # table rules are not punctuation
        "🎉✨🔥" * 20,  # emoji rows
        "└── src/\n    ├── app.py\n    └── util.py\n" + "─" * 60,  # box drawing
    ],
)
def test_salad_near_misses(text: str) -> None:
    assert "symbol_salad" not in codes(text)


def test_script_mix_needs_three_groups_and_space_joined_switches() -> None:
    def mix(text: str) -> object:
        return find_script_mix(text, text.encode(), classify(text.encode()))

    assert mix(" ".join(["data", "данные", "数据"] * 5)) is not None
    assert mix(" ".join(["data", "данные"] * 12)) is None
    assert mix(", ".join(["data", "данные", "数据"] * 5)) is None
    assert mix(". ".join(["data данные", "数据 data"] * 6)) is None
    assert mix(" ".join(["пусть", "x", "и", "α", "такие", "что", "y"] * 4)) is None


def test_script_screen_counts_groups() -> None:
    assert groups_present(classify(b"abc")) == 1
    assert groups_present(classify("abc данные 数据 데이터".encode())) == 4


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("theĠmodel and theĠrest", True),
        ("one Ã© only", False),
        ("Ã© and Ã¨", True),
        ("ðŸ˜€ ðŸ˜€", True),
        ("Ġużeppi u Ġorġ", False),
    ],
)
def test_mojibake(text: str, expected: bool) -> None:
    assert ("bpe_mojibake" in codes(text)) is expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("\x00", True),
        ("\x7f", True),
        ("\x9b", True),
        ("\x1bZ", True),
        ("\x1b[1m", False),
        ("\t\r\n\x0c", False),
    ],
)
def test_control_chars(text: str, expected: bool) -> None:
    assert ("control_chars" in codes("a" + text + "b")) is expected


def test_fences_and_ticks() -> None:
    text = "a\n```py\n<x>\n```\nb `<y>` c ``d`e`` f ` g\n~~~\nopen"
    q = Quoting(text)
    assert q.covers(text.index("<x>"))
    assert q.covers(text.index("<y>"))
    assert q.covers(text.index("e`"))
    assert not q.covers(text.index(" f"))
    assert not q.covers(text.index("open"))  # an unclosed fence quotes nothing
    assert fence_regions("```\nx\n````\n") == [(0, 10)]
    assert fence_regions("````\nx\n```\n") == []  # closer shorter than opener
    assert tick_regions("`a` `b", 0, 6) == [(0, 3)]


def test_quoting_queries_on_one_long_line_stay_linear() -> None:
    """Counted, not timed (tests/dsml/opcount.py); bench/bench_dsml.py times it."""

    def queries(reps: int) -> int:
        line = "`x` <y> " * reps
        q = Quoting(line)
        hits = sum(q.covers(i) for i in range(4, len(line), 8))
        assert hits == 0
        return calls_made(lambda: [q.covers(i) for i in range(4, len(line), 8)])

    small, large = queries(12_500), queries(50_000)
    assert large <= 5 * small, (small, large)
