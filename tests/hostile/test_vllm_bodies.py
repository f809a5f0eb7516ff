"""vLLM answering garbage, wrong shapes, errors or oversized bodies (the simulator posing as
vLLM, with its faults): the vLLM source counts a documented reason, never raises, and a bad
/metrics only drops the live numbers while the source stays up."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from exporter.sim.server import create_sim_app
from exporter.sim.settings import SimSettings
from exporter.sources import bounded
from exporter.sources.vllm import ERROR_REASONS, VllmSource
from tests.support import ServerThread


@pytest.fixture(scope="module")
def sim():
    with ServerThread(create_sim_app(SimSettings(engine="vllm", ttft_ms=1))) as srv:
        yield srv


def _poll(url: str, fault: str, **kw: int) -> VllmSource:
    httpx.post(url + "/_sim/control", json={"fault": fault}, timeout=5).raise_for_status()
    src = VllmSource(url, timeout=5, **kw)

    async def go() -> None:
        await src.poll_once()
        await src.close()

    try:
        asyncio.run(go())
    finally:
        httpx.post(url + "/_sim/control", json={"fault": "none"}, timeout=5)
    return src


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
    assert src.live is None and list(src.collect()) == []


def test_garbage_metrics_drop_the_live_numbers_only(sim) -> None:
    src = _poll(sim.url, "metrics_garbage")
    assert src.health.up and src.live is None
    assert src.health.errors["metrics_unavailable"] == 1
    assert [f.name for f in src.collect()] == ["dsv4_vllm"]  # the identity, no live numbers


def test_oversized_metrics_count_too_large(sim) -> None:
    src = _poll(sim.url, "none", max_metrics_bytes=1024)
    assert src.health.up and src.live is None and src.health.errors[bounded.TOO_LARGE] == 1
