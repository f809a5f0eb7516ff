"""Incremental grading: any split gives the whole-text result, memory stays bounded."""

from __future__ import annotations

import pytest

from exporter.dsml import StreamingGrader, grade_text, render_completion
from exporter.dsml.grader import cut
from exporter.dsml.streaming import HeadTail, ThinkTracker
from tests.dsml.builders import EOS

TEXT = render_completion(
    "Sure — I'll read 配置.yaml first.",
    [("read_file", {"path": "配置.yaml", "limit": 50}), ("ls", {})],
    reasoning="The user wants the config. 先读取文件。",
    eos=True,
)


@pytest.mark.parametrize("step", [1, 2, 3, 5, 8, 13, 64, 10_000])
def test_str_chunks_of_any_size(step: int) -> None:
    grader = StreamingGrader(tools=["read_file", "ls"])
    for i in range(0, len(TEXT), step):
        grader.feed(TEXT[i : i + step])
    assert grader.finish("stop") == grade_text(
        TEXT, tools=["read_file", "ls"], finish_reason="stop", max_chars=1 << 20
    )
    assert grader.finish("stop").verdict == "well_formed"


@pytest.mark.parametrize("step", [1, 2, 4, 7])
def test_byte_chunks_split_inside_characters_and_markers(step: int) -> None:
    data = TEXT.encode()
    grader = StreamingGrader()
    for i in range(0, len(data), step):
        grader.feed(data[i : i + step])
    assert grader.finish("stop") == grade_text(TEXT, finish_reason="stop")


def test_invalid_bytes_decode_like_the_whole() -> None:
    data = b"ok \xe6\x88 broken \xff and cut \xe7\x9a"
    grader = StreamingGrader()
    for b in data:
        grader.feed(bytes([b]))
    result = grader.finish()
    assert result == grade_text(data)
    assert "replacement_char" in result.reasons


def test_oversized_stream_grades_head_and_tail() -> None:
    filler = " ".join(f"token{i}" for i in range(5000))
    text = "Planning." + "</think>" + filler + render_completion("", [("ls", {})])
    grader = StreamingGrader(max_chars=2000)
    for i in range(0, len(text), 97):
        grader.feed(text[i : i + 97])
    result = grader.finish("stop")
    assert result == grade_text(text, finish_reason="stop", max_chars=2000)
    assert result.verdict == "well_formed"
    assert result.reasons == ("oversized",)
    assert len(result.text) == 2000
    ((gap, dropped),) = result.cuts
    assert (gap, dropped) == (1000, len(text) - 2000)
    assert result.source_offset(result.calls[0].start) == text.index("<\uff5cDSML\uff5cinvoke")


def test_think_tag_dropped_with_the_middle() -> None:
    text = "r" * 3000 + "</think>" + "c " * 3000 + "end."
    _kept, gap, dropped = cut(text, 1000)
    assert gap == 500 and dropped == len(text) - 1000
    whole = grade_text(text, max_chars=1000, thinking=True)
    channels = [(c.channel, c.start, c.end) for c in whole.channels]
    assert channels == [("reasoning", 0, 500), ("content", 500, 1000)]
    grader = StreamingGrader(max_chars=1000, thinking=True)
    grader.feed(text)
    assert grader.finish() == whole


def test_memory_stays_bounded() -> None:
    buf = HeadTail(1000)
    for i in range(10_000):
        buf.append(f"chunk {i} " * 3)
        assert buf.held <= 1000 + 30
    buf.append("x" * 1_000_000)
    assert buf.held <= 1000
    kept, gap, _dropped = buf.kept()
    assert len(kept) == 1000 and gap == 500


def test_result_can_be_peeked_mid_stream() -> None:
    grader = StreamingGrader()
    half = len(TEXT) // 2
    grader.feed(TEXT[:half])
    assert grader.result("length").verdict == "truncated"
    grader.feed(TEXT[half:])
    assert grader.finish("stop").verdict == "well_formed"


def test_think_tracker_matches_across_chunk_boundaries() -> None:
    value = 'x<\uff5cDSML\uff5cparameter name="c" string="true">s.split("</think>")'
    for text, thinking, expected in [
        ("abc</think>def", None, 3),
        (value, None, -1),
        (value, True, value.index("</think>")),
        ("no tag", None, -1),
        ("a</think>b", False, 1),  # the position; split_think ignores it when thinking=False
    ]:
        for step in (1, 2, 5, 100):
            tracker = ThinkTracker()
            for i in range(0, len(text), step):
                tracker.feed(text[i : i + step])
            assert tracker.end(thinking) == expected


def test_eos_split_across_chunks() -> None:
    text = "Hi." + EOS
    grader = StreamingGrader()
    for ch in text:
        grader.feed(ch)
    assert grader.finish("stop").verdict == "no_tool_call"
