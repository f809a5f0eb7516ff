"""vLLM answering garbage, wrong shapes, errors or oversized bodies (the simulator posing as
vLLM, with its faults): the vLLM source counts a documented reason, never raises, and a bad
/metrics only drops the live numbers while the source stays up."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import PlainTextResponse

from exporter.sim.server import create_sim_app
from exporter.sim.settings import SimSettings
from exporter.sources import bounded
from exporter.sources.base import health_families
from exporter.sources.vllm import ERROR_REASONS, VllmSource
from tests.support import ServerThread


@pytest.fixture(scope="module")
def sim():
    with ServerThread(create_sim_app(SimSettings(engine="vllm", ttft_ms=1))) as srv:
        yield srv


def _polled(url: str, cycles: int = 1, **kw: int) -> VllmSource:
    src = VllmSource(url, timeout=10, **kw)

    async def go() -> None:
        for _ in range(cycles):
            await src.poll_once()
        await src.close()

    asyncio.run(go())
    return src


def _poll(url: str, fault: str, **kw: int) -> VllmSource:
    """One cycle against the simulator with ``fault`` set (and cleared after)."""
    httpx.post(url + "/_sim/control", json={"fault": fault}, timeout=5).raise_for_status()
    try:
        return _polled(url, **kw)
    finally:
        httpx.post(url + "/_sim/control", json={"fault": "none"}, timeout=5)


def _fake_vllm(metrics: str) -> FastAPI:
    """vLLM's identity endpoints, and ``metrics`` as its /metrics."""
    app = FastAPI()
    app.get("/version")(lambda: {"version": "0.24.0"})
    app.get("/v1/models")(lambda: {"data": [{"id": "m"}]})
    app.get("/metrics")(lambda: PlainTextResponse(metrics))
    return app


def _families(src: VllmSource) -> list[str]:
    return [f.name for f in src.collect()]


def test_documented_reasons_cover_the_bounds() -> None:
    assert set(bounded.REASONS) <= set(ERROR_REASONS)
    assert {"bad_shape", "metrics_unavailable", "models_unavailable"} <= set(ERROR_REASONS)


@pytest.mark.parametrize(
    ("fault", "reason"),
    [("garbage", "bad_json"), ("http_500", "http_status"), ("bad_shape", "bad_shape")],
)
def test_a_bad_version_answer_is_down_with_its_reason(sim, fault: str, reason: str) -> None:
    src = _poll(sim.url, fault)
    assert not src.health.up and src.health.errors[reason] == 1
    assert src.live is None and _families(src) == []


def test_garbage_metrics_drop_the_live_numbers_only(sim) -> None:
    src = _poll(sim.url, "metrics_garbage")
    assert src.health.up and src.live is None
    assert src.health.errors["metrics_unavailable"] == 1
    # the identity, no live numbers
    assert _families(src) == ["dsv4_vllm"]


def test_oversized_metrics_count_too_large(sim) -> None:
    src = _poll(sim.url, "none", max_metrics_bytes=1024)
    assert src.health.up and src.live is None and src.health.errors[bounded.TOO_LARGE] == 1


def test_a_family_past_the_cap_is_dropped_unparsed_and_counted() -> None:
    """100,000 series of one family (a hostile or misconfigured server): the first
    MAX_SAMPLES_PER_FAMILY are read, the rest counted in dsv4_source_samples_dropped_total."""
    from exporter.sources.exposition_filter import MAX_SAMPLES_PER_FAMILY
    from exporter.sources.vllm import parse_vllm_metrics

    lines = ["# TYPE vllm:num_requests_running gauge"]
    lines += [f'vllm:num_requests_running{{engine="{i}"}} 1' for i in range(100_000)]
    flood = "\n".join(lines) + "\n"
    live = parse_vllm_metrics(flood)
    assert live.running == MAX_SAMPLES_PER_FAMILY
    assert live.dropped_samples == 100_000 - MAX_SAMPLES_PER_FAMILY
    with ServerThread(_fake_vllm(flood)) as srv:
        src = _polled(srv.url, cycles=2)
    dropped = next(
        f for f in health_families([src.health]) if f.name == "dsv4_source_samples_dropped"
    )
    assert [s.value for s in dropped.samples] == [2 * (100_000 - MAX_SAMPLES_PER_FAMILY)]
    assert src.health.up and src.running() == MAX_SAMPLES_PER_FAMILY


def test_metrics_without_vllm_families_are_unavailable() -> None:
    """A /metrics that parses but holds none of vLLM's families (a proxy's, SGLang's) is not
    vLLM's load: no live numbers, counted, the source stays up on /version."""
    with ServerThread(
        _fake_vllm("# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs 3\n")
    ) as srv:
        src = _polled(srv.url)
    assert src.health.up and src.live is None and src.health.errors["metrics_unavailable"] == 1
