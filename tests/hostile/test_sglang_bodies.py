"""SGLang answering huge, deep or slow bodies: the poller and the canary read at most their cap,
count a documented reason, never raise, and keep counting (issue 15, items 3 and 5)."""

from __future__ import annotations

import asyncio
import json

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from exporter.samplers.canary import RESULTS, CanaryProber
from exporter.samplers.grading import GradingPipeline
from exporter.sources import bounded
from exporter.sources.sglang import ERROR_REASONS, SglangSource
from tests.hostile.hostile_sglang import MIB, HostileSglang, deep_json
from tests.support import sample_value, settle


def _poll(url: str, **kw: object) -> SglangSource:
    src = SglangSource(url, timeout=10.0, **kw)  # type: ignore[arg-type]

    async def go() -> None:
        await src.poll_once()
        await src.close()

    asyncio.run(go())
    return src


@pytest.fixture
def hostile():
    h = HostileSglang()
    with h.serve() as srv:
        h.url = srv.url  # type: ignore[attr-defined]
        yield h


def test_documented_reasons_cover_the_bounds():
    assert set(bounded.REASONS) <= set(ERROR_REASONS)
    assert set(bounded.REASONS) <= set(RESULTS)


@pytest.mark.parametrize("mode", ["huge", "huge_declared"])
def test_huge_server_info_is_cut_at_the_cap(hostile, mode):
    hostile.mode["server_info"] = mode
    src = _poll(hostile.url, max_info_bytes=MIB)
    assert not src.health.up
    assert src.health.errors["too_large"] == 1, src.health.last_error
    # 1 GiB offered; the reader stopped near the cap (socket buffers aside)
    assert hostile.sent["server_info"] < 64 * MIB


def test_huge_metrics_keep_facts_and_count_too_large(hostile):
    hostile.mode["metrics"] = "huge"
    src = _poll(hostile.url, max_metrics_bytes=2 * MIB)
    assert src.health.up and src.facts is not None and src.live is None
    assert src.health.errors["too_large"] == 1
    assert src.health.errors["metrics_unavailable"] == 0
    assert hostile.sent["metrics"] < 64 * MIB


@pytest.mark.parametrize("depth", [50_000, 200])
def test_deep_server_info_is_a_reason_not_a_crash(hostile, depth):
    hostile.mode["server_info"] = "deep"
    hostile.depth = depth
    src = _poll(hostile.url)  # must not raise RecursionError
    assert not src.health.up and src.health.errors["too_deep"] == 1
    assert "crash" not in src.health.errors


def test_loads_bounded_limits():
    assert bounded.loads_bounded(b'{"a": [1, {"b": 2}]}', 100) == {"a": [1, {"b": 2}]}
    assert bounded.json_depth({"a": [1, {"b": 2}]}) == 3
    with pytest.raises(bounded.BodyRejected) as e:
        bounded.loads_bounded(deep_json(65), 1000)
    assert e.value.reason == "too_deep"
    assert bounded.loads_bounded(deep_json(64), 1000) is not None
    with pytest.raises(bounded.BodyRejected) as e:
        bounded.loads_bounded(b"[" + b" " * 100 + b"]", 50)
    assert e.value.reason == "too_large"
    with pytest.raises(ValueError):
        bounded.loads_bounded(b"\xff\xfe", 50)


def _canary(url: str, **kw: object) -> CanaryProber:
    return CanaryProber(url, GradingPipeline(), timeout=10.0, seed=1, **kw)  # type: ignore[arg-type]


def _probe(canary: CanaryProber) -> str:
    async def go() -> str:
        return await canary._probe_counted()

    return asyncio.run(go())


@pytest.mark.parametrize(
    ("mode", "result"),
    [("huge", "too_large"), ("huge_declared", "too_large"), ("deep", "too_deep")],
)
def test_canary_counts_hostile_answers(hostile, mode, result):
    hostile.mode["chat"] = mode
    canary = _canary(hostile.url, max_answer_bytes=MIB)
    assert _probe(canary) == result
    assert canary.results[result] == 1 and canary.results["success"] == 0
    assert hostile.sent["chat"] < 64 * MIB


def test_canary_counts_a_probe_that_raises(hostile, caplog):
    """Whatever breaks inside a probe, it is counted and logged once, never lost."""
    canary = _canary(hostile.url)

    def broken(_sample: object) -> None:
        raise RuntimeError("grader bug")

    canary.pipeline.submit = broken  # type: ignore[method-assign]
    with caplog.at_level("DEBUG"):
        assert _probe(canary) == "error"
        assert _probe(canary) == "error"
    assert canary.results["error"] == 2
    logged = [r for r in caplog.records if "canary probe raised RuntimeError" in r.getMessage()]
    assert len(logged) == 1


def test_canary_loop_keeps_counting_under_deep_answers(hostile):
    """The issue's case: the canary task died silently and requests_total stayed 0."""
    hostile.mode["chat"] = "deep"
    canary = _canary(hostile.url, interval=0.2, concurrency=1)

    async def go() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(canary.run(stop))
        # two rounds, however long a loaded machine takes (settle's bound is a hang guard)
        await settle(lambda: canary.results["too_deep"] >= 2)
        stop.set()
        await task

    asyncio.run(go())
    assert canary.results["too_deep"] >= 2
    reg = CollectorRegistry()
    reg.register(canary)
    text = generate_latest(reg).decode()
    assert sample_value(text, "dsv4_canary_requests_total", result="too_deep") >= 2


def test_normal_answers_still_pass(hostile):
    src = _poll(hostile.url)
    assert src.health.up and src.live is not None and src.live.running == 3
    canary = _canary(hostile.url)
    assert _probe(canary) == "success"
    assert json.loads(json.dumps(hostile.sent))["chat"] > 0


def test_slow_sglang_times_out_for_the_poller_and_the_canary(hostile):
    hostile.mode.update(server_info="slow", chat="slow")
    hostile.delay = 1.5
    src = SglangSource(hostile.url, timeout=0.3)

    async def go() -> str:
        await src.poll_once()
        await src.close()
        canary = CanaryProber(hostile.url, GradingPipeline(), timeout=0.3, seed=1)
        return await canary._probe_counted()

    assert asyncio.run(go()) == "timeout"
    assert src.health.errors["timeout"] == 1 and not src.health.up
