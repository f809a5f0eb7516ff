"""SGLang source: recorded /server_info shapes of several versions, and a real simulated
server (plus faults) over HTTP."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import urllib.request
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from exporter.sim.server import create_sim_app
from exporter.sim.settings import SimSettings
from exporter.sources.sglang import (
    SglangSource,
    ShapeError,
    parse_server_info,
    parse_sglang_metrics,
)
from tests.support import ServerThread, dead_url

FIX = Path(__file__).parent.parent / "fixtures" / "sglang"


def _fixture(v: str) -> dict:
    return json.loads((FIX / f"server_info_v{v}.json").read_text())


def test_v04_flat_shape():
    f = parse_server_info(_fixture("0.4"))
    assert f.version.startswith("0.4") and f.max_total_num_tokens == 6_614_784
    assert f.swa_full_tokens_ratio == 0.1  # no field: DSV4 default
    assert f.max_running_requests == 256 and not f.hicache and not f.speculative


def test_v05_internal_states():
    f = parse_server_info(_fixture("0.5"))
    assert f.hicache and f.weights_gb == pytest.approx(70.12)
    assert f.mem_fraction_static == 0.88 and f.tp_size == 8


def test_v06_tokens_only_in_internal_states_and_dsv4_swa_override():
    f = parse_server_info(_fixture("0.6"))
    assert f.max_total_num_tokens == 2_883_584
    assert f.swa_full_tokens_ratio == 0.1  # 0.8 global default -> SGLang's DSV4 0.1
    assert f.speculative and f.fp4_indexer and f.max_running_requests == 128
    assert f.model == "DeepSeek-V4-Pro"


@pytest.mark.parametrize(
    ("bad", "match"),
    [
        ([], "not a JSON object"),
        ({"version": "1"}, "model_path"),
        ({"model_path": "x", "tp_size": "eight"}, "tp_size"),
    ],
)
def test_bad_shapes_name_the_field(bad, match):
    with pytest.raises(ShapeError, match=match):
        parse_server_info(bad)


def test_parse_metrics_sums_dp_and_skips_other_tp_ranks():
    text = (
        "# TYPE sglang:num_running_reqs gauge\n"
        'sglang:num_running_reqs{tp_rank="0",dp_rank="0"} 5\n'
        'sglang:num_running_reqs{tp_rank="0",dp_rank="1"} 7\n'
        'sglang:num_running_reqs{tp_rank="1",dp_rank="0"} 5\n'
        "# TYPE sglang:token_usage gauge\n"
        'sglang:token_usage{tp_rank="0",dp_rank="0"} 0.2\n'
        'sglang:token_usage{tp_rank="0",dp_rank="1"} 0.4\n'
        "# TYPE sglang:load_back_tokens_total counter\n"
        'sglang:load_back_tokens_total{tp_rank="0",pool="kv"} 100\n'
    )
    live = parse_sglang_metrics(text)
    assert live.running == 12  # tp_rank 0 of each DP group; the series it does not read are left


def _sim_metrics_text(sim) -> str:
    with urllib.request.urlopen(sim.url + "/metrics", timeout=10) as resp:
        return resp.read().decode()


def test_both_name_prefixes_parse_alike(sim):
    """``sglang_`` (colons renamed, as llm-d's newer setups export) reads as ``sglang:``."""
    text = _sim_metrics_text(sim)
    colon = parse_sglang_metrics(text)
    underscore = parse_sglang_metrics(text.replace("sglang:", "sglang_"))
    assert colon.prefix == "sglang:" and underscore.prefix == "sglang_"
    assert colon.running is not None and colon.memory
    assert dataclasses.replace(underscore, prefix="sglang:") == colon


def test_a_family_under_both_prefixes_is_read_once():
    text = (
        "# TYPE sglang:num_running_reqs gauge\n"
        'sglang:num_running_reqs{tp_rank="0"} 5\n'
        "# TYPE sglang_num_running_reqs gauge\n"
        'sglang_num_running_reqs{tp_rank="0"} 5\n'
    )
    assert parse_sglang_metrics(text).running == 5


@pytest.mark.parametrize("value", ["NaN", "+Inf", "-Inf"])
def test_non_finite_samples_are_skipped(value):
    text = (
        "# TYPE sglang:num_running_reqs gauge\n"
        f'sglang:num_running_reqs{{tp_rank="0",dp_rank="0"}} {value}\n'
        'sglang:num_running_reqs{tp_rank="0",dp_rank="1"} 3\n'
        "# TYPE sglang:weight_memory_usage_gb gauge\n"
        f'sglang:weight_memory_usage_gb{{tp_rank="0",pp_rank="0"}} {value}\n'
    )
    live = parse_sglang_metrics(text)
    assert live.running == 3 and live.memory == {}


@pytest.fixture(scope="module")
def sim():
    app = create_sim_app(SimSettings(hicache="on"))
    with ServerThread(app) as srv:
        srv.state = app.state.sim
        yield srv


def _poll(url: str, timeout: float = 1.0) -> SglangSource:
    src = SglangSource(url, timeout=timeout)

    async def go():
        await src.poll_once()
        await src.close()

    asyncio.run(go())
    return src


def _control(sim, **kw):
    httpx.post(sim.url + "/_sim/control", json=kw, timeout=5).raise_for_status()


def test_live_simulator(sim):
    _control(sim, fault="none", delay=0, background_running=9)
    src = _poll(sim.url)
    assert src.health.up and src.facts.hicache and src.facts.max_total_num_tokens == 6_614_784
    assert src.live.running == 9 and src.live.prefix == "sglang:"


@pytest.mark.parametrize(
    ("fault", "reason"),
    [("http_500", "http_status"), ("garbage", "bad_json"), ("bad_shape", "bad_shape")],
)
def test_faults_mark_down_with_reason(sim, fault, reason):
    _control(sim, fault=fault, delay=0)
    try:
        src = _poll(sim.url)
    finally:
        _control(sim, fault="none")
    assert not src.health.up and src.health.errors[reason] == 1
    assert src.live is None


def test_slow_server_times_out(sim):
    _control(sim, fault="none", delay=1.5)
    try:
        src = _poll(sim.url, timeout=0.3)
    finally:
        _control(sim, delay=0)
    assert src.health.errors["timeout"] == 1 and not src.health.up


def test_garbage_metrics_keep_server_facts(sim):
    _control(sim, fault="metrics_garbage", delay=0)
    try:
        src = _poll(sim.url)
    finally:
        _control(sim, fault="none")
    assert src.health.up and src.facts is not None
    assert src.live is None and src.health.errors["metrics_unavailable"] == 1


def test_unreachable():
    src = _poll(dead_url())
    assert src.health.errors["unreachable"] == 1 and not src.health.up


def test_old_server_with_only_get_server_info():
    app = FastAPI()
    info = _fixture("0.4")

    @app.get("/get_server_info")
    async def gsi():
        return info

    with ServerThread(app) as srv:
        src = _poll(srv.url)
    assert src.health.up and src.facts.version == "0.4.10.post2"
    assert src._info_path == "/get_server_info"
    assert src.health.errors["metrics_unavailable"] == 1  # that server has no /metrics
