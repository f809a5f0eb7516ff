"""The grading pipeline: counters pre-created and moving, buckets, exemplars, faults."""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics

from exporter.dsml import REASONS, VERDICTS
from exporter.samplers import decode
from exporter.samplers.decode import GradingRequest, TextOutput
from exporter.samplers.grading import SOURCES, GradingPipeline
from exporter.sim.generation import dsml_block
from tests.support import sample_value, wait_for

GOOD = "Checking.</think>" + dsml_block([("get_weather", {"city": "Lisbon"})])
BAD = GOOD.replace("tool_calls>", "toolcalls>", 1)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]


def text_request(source: str, text: str, **kw) -> GradingRequest:
    return GradingRequest(source, TextOutput(text), size=len(text), **kw)


def _text(p: GradingPipeline) -> str:
    class C:
        def collect(self):
            yield from p.collect()

    reg = CollectorRegistry()
    reg.register(C())
    return openmetrics(reg).decode()


def test_all_combinations_precreated_at_zero():
    text = _text(GradingPipeline())
    for source in SOURCES:
        for verdict in VERDICTS:
            assert (
                sample_value(
                    text,
                    "dsv4_dsml_samples_total",
                    source=source,
                    verdict=verdict,
                    concurrency_le="+Inf",
                )
                == 0
            )
        for reason in REASONS:
            assert sample_value(text, "dsv4_dsml_reasons_total", source=source, reason=reason) == 0


def test_counts_by_verdict_bucket_reason_and_exemplar():
    p = GradingPipeline()
    p.grade_now(text_request("tap", text=GOOD, concurrency=1, tools=TOOLS))
    r = p.grade_now(text_request("tap", text=BAD, concurrency=60, request_id="req-60", tools=TOOLS))
    assert r.verdict == "degenerate"
    text = _text(p)
    assert (
        sample_value(
            text, "dsv4_dsml_samples_total", source="tap", verdict="well_formed", concurrency_le="1"
        )
        == 1
    )
    assert (
        sample_value(
            text, "dsv4_dsml_samples_total", source="tap", verdict="degenerate", concurrency_le="64"
        )
        == 1
    )
    reasons = {f.reason for f in r.findings}
    for reason in reasons:
        assert sample_value(text, "dsv4_dsml_reasons_total", source="tap", reason=reason) == 1
    assert '# {request_id="req-60"}' in text
    assert p.store.recent()[0]["request_id"] == "req-60"


def test_grader_raising_is_counted_not_propagated(monkeypatch):
    def boom(_sample):
        raise RuntimeError("grader bug")

    monkeypatch.setattr(decode, "grade", boom)
    p = GradingPipeline()
    assert p.grade_now(text_request("ingest", text="x")) is None
    assert sample_value(_text(p), "dsv4_dsml_grading_errors_total", source="ingest") == 1


def test_full_queue_drops_and_counts():
    p = GradingPipeline(max_pending=2)  # not started: nothing drains the queue
    results = [p.submit(text_request("tap", text=GOOD)) for _ in range(5)]
    assert results == [True, True, False, False, False]
    assert sample_value(_text(p), "dsv4_dsml_samples_dropped_total", source="tap") == 3


def test_worker_thread_grades_in_background():
    p = GradingPipeline()
    p.start()
    try:
        for _ in range(20):
            p.submit(text_request("ingest", text=GOOD, concurrency=5, tools=TOOLS))
        wait_for(
            lambda: (
                sample_value(
                    _text(p),
                    "dsv4_dsml_samples_total",
                    source="ingest",
                    verdict="well_formed",
                    concurrency_le="8",
                )
                == 20
            )
        )
        wait_for(lambda: p.pending == 0 and p.pending_bytes == 0)
    finally:
        p.stop()
