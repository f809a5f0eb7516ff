"""The one sample decoder: every shape, every field error with its reason, the JSON bounds,
and the four callers (ingest, scan, sample files, tap) agreeing on the same input."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from exporter.cli import scan
from exporter.oncall import samples as sample_files
from exporter.samplers import ingest
from exporter.samplers.decode import (
    ERROR_REASONS,
    MAX_DEPTH,
    GradingRequest,
    ResponseOutput,
    SampleError,
    TextOutput,
    from_json,
    grade,
    loads_bounded,
    measure,
)
from exporter.sim.generation import dsml_block

GOOD = "Checking.</think>" + dsml_block([("get_weather", {"city": "Lisbon"})])
BAD = GOOD.replace("tool_calls>", "toolcalls>", 1)
COMPLETION = {
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": BAD}, "finish_reason": "stop"}
    ]
}
CHUNKS = [
    {"choices": [{"index": 0, "delta": {"content": BAD[:20]}}]},
    {"choices": [{"index": 0, "delta": {"content": BAD[20:]}, "finish_reason": "stop"}]},
]


def test_every_shape_becomes_one_typed_request() -> None:
    text = from_json(
        {
            "text": GOOD,
            "finish_reason": "stop",
            "concurrency": 4,
            "request_id": "r",
            "grammar": "V4",
        },
        source="ingest",
    )
    assert text.output == TextOutput(GOOD, "stop") and text.grammar == "v4"
    assert (text.concurrency, text.request_id, text.source) == (4, "r", "ingest")
    assert text.size >= len(GOOD)
    assert from_json(COMPLETION, source="scan").output == ResponseOutput(COMPLETION)
    assert from_json(CHUNKS, source="scan").output == ResponseOutput(CHUNKS)
    wrapped = from_json(
        {"response": CHUNKS, "tools": ["get_weather"], "thinking": True}, source="x"
    )
    assert wrapped.output == ResponseOutput(CHUNKS) and wrapped.tools == ["get_weather"]
    assert wrapped.thinking is True
    # caller defaults apply only where the sample does not say
    assert from_json({"text": "a"}, source="s", grammar="v3.2").grammar == "v3.2"
    assert from_json({"text": "a", "grammar": "auto"}, source="s", grammar="v3.2").grammar is None
    assert from_json({"text": "a"}, source="s", thinking=False).thinking is False


@pytest.mark.parametrize(
    ("value", "reason", "words"),
    [
        ("a string", "not_a_sample", "JSON object"),
        (5, "not_a_sample", "JSON object"),
        ({}, "not_a_sample", "exactly one of"),
        ({"text": "a", "response": {}}, "not_a_sample", "exactly one of"),
        ({"text": 1}, "bad_field", "'text' must be a string"),
        ({"response": "x"}, "bad_field", "'response' must be"),
        ({"text": "a", "concurrency": -1}, "bad_field", "'concurrency'"),
        ({"text": "a", "concurrency": 1.5}, "bad_field", "'concurrency'"),
        ({"text": "a", "concurrency": True}, "bad_field", "'concurrency'"),
        ({"text": "a", "request_id": 7}, "bad_field", "'request_id' must be a string"),
        ({"text": "a", "grammar": "v9"}, "bad_field", "'grammar' must be one of"),
        ({"text": "a", "grammar": 4}, "bad_field", "'grammar' must be a string"),
        ({"text": "a", "tools": "get_weather"}, "bad_field", "'tools' must be a list"),
        ({"text": "a", "finish_reason": 1}, "bad_field", "'finish_reason'"),
        ({"text": "a", "thinking": "yes"}, "bad_field", "'thinking'"),
    ],
)
def test_field_errors_name_the_field_and_carry_a_reason(value, reason, words) -> None:
    with pytest.raises(SampleError, match=words) as info:
        from_json(value, source="ingest")
    assert info.value.reason == reason and reason in ERROR_REASONS


def test_json_bounds() -> None:
    assert loads_bounded(b'{"text": "a"}') == {"text": "a"}
    for raw, reason in [
        (b"{nope", "invalid_json"),
        (b'"\xff"', "invalid_json"),
        (b"[" * 100_000 + b"]" * 100_000, "too_deep"),  # RecursionError in the C decoder
        (b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1), "too_deep"),  # over our bound
    ]:
        with pytest.raises(SampleError) as info:
            loads_bounded(raw)
        assert info.value.reason == reason
        assert "\\xff" not in str(info.value)  # the message never quotes the input
    with pytest.raises(SampleError) as info:
        loads_bounded(b"[1, 2]", max_bytes=4)
    assert info.value.reason == "too_large"
    assert loads_bounded(b"[" * MAX_DEPTH + b"]" * MAX_DEPTH) is not None
    assert measure("x" * 1000) > 1000 and measure({"a": ["x" * 1000]}) > 1000


def test_text_samples_are_cut_to_head_and_tail_like_completions() -> None:
    long = BAD + " filler" * 200_000
    result = grade(from_json({"text": long}, source="ingest"), max_chars=100_000)
    assert "oversized" in result.reasons and "tag_unknown" in result.reasons
    assert len(result.text) <= 100_000
    chat = {"choices": [{"index": 0, "message": {"role": "assistant", "content": long}}]}
    assert "oversized" in grade(from_json(chat, source="ingest"), max_chars=100_000).reasons


def _scan_args(**over) -> argparse.Namespace:
    return argparse.Namespace(
        **{"grammar": "auto", "thinking": "auto", "max_chars": 1 << 20, **over}
    )


LINES = [
    {"text": GOOD, "tools": ["get_weather"]},
    {"text": BAD, "concurrency": 64},
    COMPLETION,
    {"response": CHUNKS},
]


def test_the_four_callers_agree(tmp_path: Path) -> None:
    expected = [grade(from_json(line, source="t")).verdict for line in LINES]
    assert expected == ["well_formed", "degenerate", "degenerate", "degenerate"]
    assert [scan.grade_line(line, _scan_args()).verdict for line in LINES] == expected
    assert [sample_files.grade_line(line).verdict for line in LINES] == expected  # type: ignore[union-attr]
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in LINES))
    graded = list(sample_files.read_graded(path))
    assert [g.verdict for g in graded if g] == expected and graded[1].concurrency == 64  # type: ignore[union-attr]
    parsed = ingest.parse_body(json.dumps(LINES).encode())
    assert not parsed.rejected
    assert [grade(r).verdict for r in parsed.samples] == expected
    assert all(isinstance(r, GradingRequest) and r.source == "ingest" for r in parsed.samples)


def test_scan_reports_a_too_deep_line_as_an_error_and_goes_on(tmp_path: Path, capsys) -> None:
    from exporter.cli import main

    path = tmp_path / "in.jsonl"
    path.write_text("[" * 50_000 + "]" * 50_000 + "\n" + json.dumps({"text": GOOD}) + "\n")
    assert main(["scan", str(path), "--json"]) == 0
    rows = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [r["verdict"] for r in rows] == ["error", "well_formed"]
    assert "nested deeper than 64" in rows[0]["error"]


def test_ingest_body_bounds_and_per_item_rejections() -> None:
    deep: object = 1
    for _ in range(MAX_DEPTH + 5):
        deep = [deep]
    parsed = ingest.parse_body(json.dumps([{"text": "a", "tools": deep}, {"text": "b"}]).encode())
    assert [r.reason for r in parsed.rejected] == ["too_deep"] and len(parsed.samples) == 1
    with pytest.raises(ingest.IngestError) as info:
        ingest.parse_body(json.dumps({"samples": 5}).encode())
    assert info.value.reason == "not_a_sample" and info.value.status == 400
    with pytest.raises(ingest.IngestError) as info:
        ingest.parse_body(b"[" * 10_000 + b"]" * 10_000)
    assert info.value.reason == "too_deep" and info.value.status == 400
