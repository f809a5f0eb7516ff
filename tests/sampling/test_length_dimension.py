"""Length as a dimension (issue 26): every graded sample carries its output tokens (and how they
were counted) and finish reason; each new family is pre-created at 0 and moves."""

from __future__ import annotations

import json

from exporter.dsml import VERDICTS
from exporter.samplers import decode
from exporter.samplers.decode import GradingRequest, ResponseOutput, TextOutput, output_tokens
from exporter.samplers.grading import SOURCES, GradingPipeline
from exporter.samplers.length import (
    FINISH_REASONS,
    LENGTH_LABELS,
    estimate_tokens,
    finish_label,
    length_label,
)
from tests.sampling.test_pipeline import GOOD, TOOLS, _text
from tests.support import sample_value


def completion(content: str, finish: str, tokens: int | None) -> dict:
    body: dict = {
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"content": content}, "finish_reason": finish}],
    }
    if tokens is not None:
        body["usage"] = {"prompt_tokens": 10, "completion_tokens": tokens}
    return body


def test_labels_are_bounded_and_non_cumulative() -> None:
    assert [length_label(n) for n in (0, 256, 257, 4096, 16385)] == [
        "256", "256", "1024", "4096", "+Inf"
    ]  # fmt: skip
    assert {finish_label(f) for f in ("stop", "eos", "length", "tool_calls", "x", None)} == set(
        FINISH_REASONS
    )
    assert estimate_tokens("abcdefghi") == 3


def test_every_new_series_exists_at_zero() -> None:
    text = _text(GradingPipeline())
    for source in SOURCES:
        for verdict in VERDICTS:
            for le in LENGTH_LABELS:
                labels = {"source": source, "verdict": verdict, "output_tokens_le": le}
                assert sample_value(text, "dsv4_dsml_length_samples_total", **labels) == 0
    for f in FINISH_REASONS:
        assert (
            sample_value(
                text, "dsv4_dsml_finish_reasons_total", finish_reason=f, verdict="degenerate"
            )
            == 0
        )
    assert sample_value(text, "dsv4_dsml_output_tokens_count", concurrency_le="16") == 0
    for how in ("usage", "stream", "estimate"):
        assert sample_value(text, "dsv4_dsml_output_tokens_counted_total", counted=how) == 0


def test_usage_tokens_finish_reason_and_length_bucket_are_counted() -> None:
    p = GradingPipeline()
    long_prose = " ".join(f"item{i}" for i in range(2500))
    p.grade_now(
        GradingRequest(
            "tap", ResponseOutput(completion(long_prose, "length", 5000)), concurrency=12,
            tools=TOOLS,
        )
    )  # fmt: skip
    p.grade_now(GradingRequest("canary", TextOutput(GOOD, "stop"), concurrency=1, tools=TOOLS))
    text = _text(p)
    # the long answer: 5000 tokens from usage, length with tools and no call -> suspect
    assert sample_value(
        text, "dsv4_dsml_length_samples_total", source="tap", verdict="suspect",
        output_tokens_le="16384",
    ) == 1  # fmt: skip
    assert (
        sample_value(
            text, "dsv4_dsml_finish_reasons_total", finish_reason="length", verdict="suspect"
        )
        == 1
    )
    assert sample_value(text, "dsv4_dsml_output_tokens_bucket", concurrency_le="16", le="4096") == 0
    assert (
        sample_value(text, "dsv4_dsml_output_tokens_bucket", concurrency_le="16", le="16384") == 1
    )
    assert sample_value(text, "dsv4_dsml_output_tokens_sum", concurrency_le="16") == 5000
    assert sample_value(text, "dsv4_dsml_output_tokens_counted_total", counted="usage") == 1
    # the short canary answer: estimated from its characters, well formed, stop
    assert sample_value(
        text, "dsv4_dsml_length_samples_total", source="canary", verdict="well_formed",
        output_tokens_le="256",
    ) == 1  # fmt: skip
    assert sample_value(text, "dsv4_dsml_output_tokens_counted_total", counted="estimate") == 1
    assert (
        sample_value(
            text, "dsv4_dsml_finish_reasons_total", finish_reason="stop", verdict="well_formed"
        )
        == 1
    )
    assert sample_value(text, "dsv4_dsml_output_tokens_count", concurrency_le="1") == 1


def test_tokens_from_a_stream_usage_or_deltas() -> None:
    chunks = [
        {"choices": [{"index": 0, "delta": {"content": w}, "finish_reason": None}]}
        for w in ("Hel", "lo", " there")
    ]
    chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    sse = (
        b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
    )
    req = GradingRequest("tap", ResponseOutput(sse))
    result = decode.grade(req)
    assert output_tokens(req, result) == (3, "stream")
    assert output_tokens(GradingRequest("tap", ResponseOutput(chunks)), result) == (3, "stream")
    usage = {"choices": [], "usage": {"completion_tokens": 42}}
    with_usage = sse.replace(
        b"data: [DONE]", b"data: " + json.dumps(usage).encode() + b"\n\ndata: [DONE]"
    )
    assert output_tokens(GradingRequest("tap", ResponseOutput(with_usage)), result) == (42, "usage")
    generate = TextOutput("abc", "stop", completion_tokens=7)
    assert output_tokens(GradingRequest("tap", generate), result) == (7, "usage")


def test_stored_samples_carry_length_and_finish() -> None:
    p = GradingPipeline()
    p.grade_now(
        GradingRequest(
            "ingest",
            ResponseOutput(completion(" ".join(f"w{i}" for i in range(300)), "length", 900)),
            tools=TOOLS,
        )
    )
    item = p.store.recent(1)[0]
    assert (item["output_tokens"], item["tokens_counted"], item["finish_reason"]) == (
        900,
        "usage",
        "length",
    )
