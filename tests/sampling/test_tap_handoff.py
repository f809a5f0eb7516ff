"""The sidecar's tap hands exchanges straight to the grading queue: filtered before counting
(``dsv4_tap_sampled_total`` equals what the grader counts for the tap), no second queue and
no extra thread, the tap's exchange and the grading request told apart by type."""

from __future__ import annotations

import asyncio
import threading

import pytest

from exporter.config_loader import load_settings
from exporter.samplers.decode import (
    ExchangeOutput,
    GradingRequest,
    ResponseOutput,
    TextOutput,
    from_exchange,
    resolve,
)
from exporter.samplers.tap.sampling import CapturedExchange, Handoff
from exporter.sidecar import Sidecar
from tests.tap.fake_upstream import FakeUpstream
from tests.tap.support import FAST, chat_body, counter, one_request, settle

pytestmark = pytest.mark.e2e
CHAT = "/v1/chat/completions"


def _tap_sidecar(upstream_port: int, **over: object) -> Sidecar:
    """A sidecar whose tap samples every exchange, in front of the fake upstream."""
    return Sidecar(
        load_settings(
            {
                "sglang_url": f"http://127.0.0.1:{upstream_port}",
                "gpu_backend": "fake",
                "canary": False,
                "tap_port": 0,
                "tap_host": "127.0.0.1",
                "tap_sample_rate": 1.0,
                **over,
            }
        )
    )


def _tap_graded(sc: Sidecar) -> int:
    return sum(n for (source, _, _), n in sc.pipeline.samples.items() if source == "tap")


def test_only_complete_200_answers_are_sampled_and_every_sampled_one_is_graded() -> None:
    async def scenario() -> None:
        fake = FakeUpstream()
        port = await fake.start()
        sc = _tap_sidecar(port)
        await sc.start()
        try:
            tap_port = sc.tap.port
            bodies = [
                chat_body(1, stream=False, **FAST),
                chat_body(2, stream=True, **FAST),
                chat_body(3, stream=True, status=500),  # an error page
                chat_body(4, stream=True, reset_after=3, **FAST),  # cut short
                chat_body(5, stream=False, status=429),
            ]
            for body in bodies:
                await one_request(tap_port, "POST", CHAT, body)
            tap = sc.tap
            assert await settle(lambda: _tap_graded(sc) == 2)
            assert counter(tap, "dsv4_tap_sampled_total") == 2 == _tap_graded(sc)
            assert counter(tap, "dsv4_tap_samples_dropped_total", reason="not_ok") == 2
            assert counter(tap, "dsv4_tap_samples_dropped_total", reason="incomplete") == 1
            assert counter(tap, "dsv4_tap_samples_dropped_total", reason="queue_full") == 0
            # no dispatcher thread between the tap and the grader
            assert not [t for t in threading.enumerate() if t.name.startswith("tap-sample")]
            assert sc.pipeline.pending == 0
        finally:
            await sc.stop()
            await fake.stop()

    asyncio.run(scenario())


def test_a_full_grading_queue_is_counted_by_the_tap_as_queue_full() -> None:
    async def scenario() -> None:
        fake = FakeUpstream()
        port = await fake.start()
        sc = _tap_sidecar(port, grading_queue=1)
        await sc.tap.start("127.0.0.1", 0)  # the tap alone: the grader thread is not running
        try:
            for i in range(3):
                await one_request(sc.tap.port, "POST", CHAT, chat_body(i, stream=False, **FAST))
            assert await settle(lambda: counter(sc.tap, "dsv4_tap_sampled_total") == 1)
            assert counter(sc.tap, "dsv4_tap_samples_dropped_total", reason="queue_full") == 2
            assert sc.pipeline.dropped["tap"] == 2
        finally:
            await sc.tap.stop(grace=0.5)
            await fake.stop()

    asyncio.run(scenario())


def _exchange(request: bytes, response: bytes, streaming: bool = False) -> CapturedExchange:
    return CapturedExchange.whole(
        request,
        response,
        status=200,
        content_type="application/json",
        streaming=streaming,
        concurrency=3,
        request_id="r1",
        method="POST",
        path=CHAT,
        complete=True,
        started_at=0.0,
        duration_seconds=0.0,
    )


def test_exchange_and_request_are_distinct_types_and_decoding_waits_for_the_grader() -> None:
    assert CapturedExchange is CapturedExchange and not issubclass(CapturedExchange, GradingRequest)
    tools = b'{"tools": [{"type": "function", "function": {"name": "f"}}]}'
    req = from_exchange(_exchange(tools, b'{"choices": []}'))
    assert isinstance(req.output, ExchangeOutput) and req.tools is None  # nothing parsed yet
    assert req.concurrency == 3 and req.request_id == "r1" and req.size > 0
    done = resolve(req)
    assert done.output == ResponseOutput({"choices": []}) and done.tools is not None
    # /generate's answer, a non-JSON body, a too-deep body, a malformed request
    gen = resolve(from_exchange(_exchange(b"{", b'{"text": "hi", "meta_info": {}}')))
    assert gen.output == TextOutput("hi") and gen.tools is None
    assert resolve(from_exchange(_exchange(b"", b"plain"))).output == TextOutput("plain")
    deep = b"[" * 5000 + b"]" * 5000
    assert resolve(from_exchange(_exchange(b"", deep))).output == TextOutput(deep.decode())
    sse = resolve(from_exchange(_exchange(b"", b"data: {}\n\n", streaming=True)))
    assert sse.output == ResponseOutput(b"data: {}\n\n")


def test_the_sidecars_handoff_is_a_handoff() -> None:
    from exporter.samplers.grading import GradingPipeline, TapHandoff

    assert isinstance(TapHandoff(GradingPipeline()), Handoff)
