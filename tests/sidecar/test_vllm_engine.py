"""The engine seam and the vLLM source: pure parsers, then the sidecar beside the simulator
posing as vLLM (a real uvicorn on 127.0.0.1), discovered or configured."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TypeVar

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.app import create_app
from exporter.config import SidecarSettings
from exporter.config_loader import load_settings
from exporter.dsml import markers as mk
from exporter.dsml.vllm_releases import rules_for
from exporter.oncall.triage.collect import CollectOptions
from exporter.oncall.triage.report import write_report
from exporter.sidecar import Sidecar
from exporter.sim.server import create_sim_app
from exporter.sim.settings import SimSettings
from exporter.sim.vllm import VERSION as SIM_VLLM_VERSION
from exporter.sources.discovery import EngineDiscovery, engine_of
from exporter.sources.engine import footprint_fact
from exporter.sources.engines import ENGINES, by_name
from exporter.sources.sglang.server_info import ShapeError
from exporter.sources.vllm import (
    VllmFacts,
    VllmSource,
    has_vllm_families,
    parse_models,
    parse_version,
    parse_vllm_metrics,
)
from exporter.sources.vllm.version import release_of
from tests.support import ServerThread, racy_sim, sample_value, scrape, wait_for

FLASH = Path(__file__).parent.parent / "fixtures" / "deepseek-v4-flash.config.json"
# A simulated vLLM serving the corrupting model (bf16 index-K, HiCache) at 60 in flight.
RACY_VLLM = racy_sim(engine="vllm", seed=7)
# dsv4_dsml_dialect_info's engine_rules beside the simulator's default release (the newest)
SIM_RULES = f"vllm {rules_for(SIM_VLLM_VERSION)[0].name} (release)"

# vLLM 0.24's exposition shape (two engine cores, data parallel 2), with hostile values mixed in.
TWO_ENGINES = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="ds"} 12.0
vllm:num_requests_running{engine="1",model_name="ds"} 20.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="ds"} 3.0
vllm:num_requests_waiting{engine="1",model_name="ds"} NaN
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="ds"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="ds"} 0.75
# TYPE vllm:num_preemptions counter
vllm:num_preemptions_total{engine="0",model_name="ds"} 4.0
vllm:num_preemptions_created{engine="0",model_name="ds"} 1.7e9
vllm:num_preemptions_total{engine="1",model_name="ds"} 6.0
# TYPE vllm:prompt_tokens counter
vllm:prompt_tokens_total{engine="0",model_name="ds"} 1000.0
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{engine="0",model_name="ds"} 5000.0
vllm:generation_tokens_total{engine="1",model_name="ds"} +Inf
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="256",cache_dtype="fp8",engine="1",num_gpu_blocks="99"} 1.0
vllm:cache_config_info{block_size="256",cache_dtype="fp8",engine="0",num_gpu_blocks="1000",\
kv_cache_size_tokens="None"} 1.0
"""


def test_metrics_sum_engines_take_the_fullest_and_skip_non_finite() -> None:
    live = parse_vllm_metrics(TWO_ENGINES)
    assert (live.running, live.waiting, live.kv_usage) == (32.0, 3.0, 0.75)
    cache = live.cache
    assert cache is not None and (cache.block_size, cache.num_gpu_blocks) == (256, 1000)
    assert cache.cache_dtype == "fp8" and cache.capacity_tokens == 256_000  # engine 0's
    assert has_vllm_families(TWO_ENGINES)
    assert not has_vllm_families(
        "# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs 1\n"
    )


def test_hostile_cache_config_labels_are_bounded() -> None:
    text = (
        "# TYPE vllm:cache_config_info gauge\n"
        'vllm:cache_config_info{block_size="-1",cache_dtype="<script>",'
        'num_gpu_blocks="99999999999999999999",kv_cache_size_tokens="12345"} 1\n'
    )
    cache = parse_vllm_metrics(text).cache
    assert cache is not None
    assert (cache.block_size, cache.num_gpu_blocks, cache.cache_dtype) == (None, None, "other")
    assert cache.capacity_tokens == 12345  # vLLM's own figure wins when it is reported
    assert parse_vllm_metrics("").cache is None


def test_the_release_is_what_version_reported() -> None:
    """The release the DSML grader's vLLM rules are picked by: /version's, when sane."""
    assert release_of(None) is None
    assert release_of(VllmFacts(parse_version({"version": "0.30.1"}))) == "0.30.1"
    assert release_of(VllmFacts(parse_version({"version": "0.30.1; x"}))) is None


def test_version_and_models_shapes() -> None:
    assert parse_version({"version": "0.24.0"}) == "0.24.0"
    assert parse_version({"version": "0.24.0; rm -rf /"}) == "unparseable"
    with pytest.raises(ShapeError, match="/version"):
        parse_version(["0.24.0"])
    models = {"data": [{"id": 3}, {"id": "deepseek-ai/DeepSeek-V4-Flash", "max_model_len": 65536}]}
    assert parse_models(models) == ("deepseek-ai/DeepSeek-V4-Flash", 65536)
    assert parse_models({"data": [{"id": "x", "max_model_len": True}]}) == ("x", None)
    with pytest.raises(ShapeError, match="/v1/models"):
        parse_models({"data": "nope"})


def _decide(server_info: object, version: object, metrics_text: object) -> str | None:
    """The engine table's decision on these answers (None: a probe not answered usably)."""
    answers = {"/server_info": server_info, "/version": version, "/metrics": metrics_text}
    found = engine_of(answers)
    return found.name if found is not None else None


def test_engine_decision() -> None:
    assert _decide({"model_path": "m", "tp_size": 8}, None, None) == "sglang"
    assert _decide(None, {"version": "0.24.0"}, TWO_ENGINES) == "vllm"
    # vLLM's dev-mode /server_info answers vllm_config, never model_path
    assert _decide({"vllm_config": "..."}, {"version": "0.24.0"}, TWO_ENGINES) == "vllm"
    assert _decide(None, {"version": "0.24.0"}, "sglang_x 1\n") is None  # no vllm: families
    assert _decide(None, {"version": "0.24.0"}, "garbage{ not exposition") is None
    assert _decide(None, None, TWO_ENGINES) is None
    facts = tuple(footprint_fact(by_name(n)) for n in ("sglang", "vllm"))
    assert facts == ("modelled", "not modelled: vllm")
    assert footprint_fact(None) == "unknown" and [e.name for e in ENGINES] == ["sglang", "vllm"]
    with pytest.raises(ValueError, match="engine must be one of"):
        EngineDiscovery("tgi", "http://127.0.0.1:9")


@pytest.fixture(scope="module")
def sim_vllm():
    app = create_sim_app(SimSettings(engine="vllm", ttft_ms=1, itl_ms=0, background_running=5))
    with ServerThread(app) as srv:
        yield srv


@pytest.fixture(scope="module")
def sim_sglang():
    with ServerThread(create_sim_app(SimSettings(ttft_ms=1, itl_ms=0))) as srv:
        yield srv


P = TypeVar("P", VllmSource, EngineDiscovery)


def _polled(src: P) -> P:
    """``src`` after one poll cycle (its client closed)."""

    async def once() -> None:
        await src.poll_once()
        await src.close()

    asyncio.run(once())
    return src


def test_simulated_vllm_serves_vllms_endpoints(sim_vllm: ServerThread) -> None:
    assert httpx.get(sim_vllm.url + "/server_info").status_code == 404
    assert httpx.get(sim_vllm.url + "/version").json() == {"version": SIM_VLLM_VERSION}
    models = httpx.get(sim_vllm.url + "/v1/models").json()
    assert models["data"][0]["owned_by"] == "vllm (simulator)"
    text = httpx.get(sim_vllm.url + "/metrics").text
    live = parse_vllm_metrics(text)
    assert live.running == 5 and live.cache is not None and live.cache.block_size == 256


def test_vllm_source_polls_the_simulator(sim_vllm: ServerThread) -> None:
    src = _polled(VllmSource(sim_vllm.url, timeout=2))
    assert src.health.up and src.facts is not None and src.facts.version == SIM_VLLM_VERSION
    assert src.facts.served_model_name and src.running() == 5
    names = {fam.name for fam in src.collect()}
    assert {"dsv4_vllm", "dsv4_vllm_running_requests", "dsv4_vllm_cache_config"} <= names


def test_vllm_source_down_on_sglang_counts_the_reason(sim_sglang: ServerThread) -> None:
    src = _polled(VllmSource(sim_sglang.url, timeout=2))
    assert not src.health.up and src.health.errors["http_status"] == 1
    assert [f.name for f in src.collect()] == []  # down: no family of its own


def _discover(url: str) -> EngineDiscovery:
    found: list[str] = []
    seam = EngineDiscovery("auto", url, poll_interval=0.05, on_found=lambda e: found.append(e.name))

    async def go() -> None:
        await asyncio.wait_for(seam.run(asyncio.Event()), timeout=10)

    asyncio.run(go())
    assert found == [seam.engine]
    return seam


def test_discovery_tells_the_engines_apart(
    sim_vllm: ServerThread, sim_sglang: ServerThread
) -> None:
    assert (_discover(sim_vllm.url).engine, _discover(sim_sglang.url).engine) == ("vllm", "sglang")
    undecided = _polled(EngineDiscovery("auto", "http://127.0.0.1:9", timeout=0.3))
    assert undecided.engine is None and undecided.health.errors["unreachable"] == 1


def test_discovery_finds_vllm_in_dev_mode_which_answers_server_info(
    sim_vllm: ServerThread,
) -> None:
    """vLLM with VLLM_SERVER_DEV_MODE=1 answers /server_info ({"vllm_config": ...}): not
    SGLang's shape, so /version and /metrics still decide."""
    from fastapi import FastAPI
    from fastapi.responses import PlainTextResponse

    dev = FastAPI()

    @dev.get("/server_info")
    def server_info() -> dict:
        return {"vllm_config": {"model_config": {"model": "deepseek-ai/DeepSeek-V4-Flash"}}}

    @dev.get("/version")
    def version() -> dict:
        return httpx.get(sim_vllm.url + "/version").json()

    @dev.get("/metrics")
    def metrics() -> PlainTextResponse:
        return PlainTextResponse(httpx.get(sim_vllm.url + "/metrics").text)

    with ServerThread(dev) as server:
        assert _discover(server.url).engine == "vllm"


def _labels(text: str, name: str) -> list[dict[str, str]]:
    return [
        s.labels for f in text_string_to_metric_families(text) for s in f.samples if s.name == name
    ]


def scrape_registry(sc: Sidecar) -> str:
    """The sidecar's registry rendered as a scrape would (no HTTP server)."""
    from prometheus_client.exposition import generate_latest

    return generate_latest(sc.registry).decode()


def test_configured_vllm_needs_no_discovery(sim_vllm: ServerThread) -> None:
    sc = Sidecar(
        SidecarSettings(
            sglang_url=sim_vllm.url,
            engine="vllm",
            gpu_backend="fake",
            canary=False,
            model_config_path=FLASH,
        )
    )
    assert "sglang" not in sc.sources and "engine" not in sc.sources
    assert sc.dsml_dialect() == ("v4@vllm", "model_config")  # /version not read yet: newest
    _polled(sc.servers["vllm"])
    # the release from /version picks the grader's vLLM rules (exporter/dsml/vllm_releases.py)
    assert sc.dsml_dialect() == (f"v4@vllm-{SIM_VLLM_VERSION}", "model_config")
    assert _labels(scrape_registry(sc), "dsv4_dsml_dialect_info") == [
        {
            "dialect": f"v4@vllm-{SIM_VLLM_VERSION}",
            "source": "model_config",
            "engine_rules": SIM_RULES,
        }
    ]
    assert sc.served_model() == sc.servers["vllm"].facts.served_model_name  # type: ignore[union-attr]
    assert sc.server_running() == 5
    assert sc.footprint.status == "not_modelled"
    assert sc.footprint.detail == "not modelled: vllm"


def test_sidecar_beside_simulated_vllm_discovers_it_and_grades_by_concurrency(
    tmp_path: Path,
) -> None:
    """engine auto: the sidecar finds vLLM, swaps SGLang's source for vLLM's and exports
    corruption by concurrency (the canary through vLLM's parser), NVML's GPU memory and vLLM's
    KV figures; the footprint is the fact `not modelled: vllm`; triage reads it back."""
    sim_app = create_sim_app(RACY_VLLM)
    settings = {
        "gpu_backend": "fake",
        "sglang_poll_interval": 0.1,
        "nvml_poll_interval": 0.2,
        "canary_interval": 0.05,
        "canary_concurrency": 4,
        "model_config_path": str(FLASH),
    }
    with ServerThread(sim_app) as sim:
        app = create_app(load_settings({"sglang_url": sim.url, **settings}))
        with ServerThread(app) as sc:

            def graded() -> float:
                text = scrape(sc.url)
                n = sum(
                    sample_value(
                        text,
                        "dsv4_dsml_samples_total",
                        source="canary",
                        verdict=v,
                        **{"concurrency_le": "64"},
                    )
                    or 0
                    for v in ("degenerate", "suspect", "well_formed")
                )
                return n if n >= 80 and sample_value(text, "dsv4_vllm_running_requests") else 0

            wait_for(graded, timeout=90)
            text = scrape(sc.url)
            ready = httpx.get(sc.url + "/readyz", timeout=5)
            triage = write_report(CollectOptions(sidecar_url=sc.url), tmp_path / "triage")
    engine = _labels(text, "dsv4_engine_info")
    assert engine == [{"engine": "vllm", "source": "discovered", "footprint": "not modelled: vllm"}]
    assert sample_value(text, "dsv4_source_up", source="vllm") == 1
    assert sample_value(text, "dsv4_source_up", source="sglang") is None  # swapped out
    assert sample_value(text, "dsv4_vllm_running_requests") >= 60  # + canaries in flight
    assert sample_value(text, "dsv4_vllm_kv_cache_capacity_tokens") > 0
    cache = _labels(text, "dsv4_vllm_cache_config_info")
    assert cache and cache[0]["block_size"] == "256" and cache[0]["cache_dtype"] == "fp8"
    assert sample_value(text, "dsv4_vllm_kv_cache_usage_ratio") is None  # not copied
    assert sample_value(text, "dsv4_gpu_memory_used_bytes", gpu="0") > 0
    assert sample_value(text, "dsv4_footprint_up", reason="not_modelled") == 0
    assert _labels(text, "dsv4_dsml_dialect_info") == [
        {
            "dialect": f"v4@vllm-{SIM_VLLM_VERSION}",
            "source": "model_config",
            "engine_rules": SIM_RULES,
        }
    ]
    bad = sum(
        sample_value(
            text, "dsv4_dsml_samples_total", source="canary", verdict=v, concurrency_le="64"
        )
        or 0
        for v in ("degenerate", "suspect")
    )
    assert bad > 0  # the simulated model corrupts at 60 in flight, vLLM hands it on
    assert ready.status_code == 200
    # triage from the sidecar alone names the engine and the footprint fact
    ev = triage.evidence
    assert ev.engine == {
        "engine": "vllm",
        "source": "discovered",
        "footprint": "not modelled: vllm",
    }
    assert ev.engine_version == SIM_VLLM_VERSION and ev.corruption is not None
    assert ev.corruption.degenerate > 0
    report = triage.md_path.read_text()
    assert f"vllm {SIM_VLLM_VERSION} (discovered)" in report and "not modelled: vllm" in report


def test_streamed_vllm_reasoning_deltas_count_as_output_tokens() -> None:
    """vLLM streams reasoning under ``reasoning`` (SGLang: ``reasoning_content``): each such
    delta is a decode step of the output, as each content delta is."""
    from exporter.dsml import grade_openai_response
    from exporter.samplers.decode import GradingRequest, ResponseOutput, output_tokens

    chunks = [
        {"choices": [{"index": 0, "delta": {"reasoning": "Think"}}]},
        {"choices": [{"index": 0, "delta": {"reasoning": "ing."}}]},
        {"choices": [{"index": 0, "delta": {"content": "Done."}, "finish_reason": "stop"}]},
    ]
    request = GradingRequest(source="tap", output=ResponseOutput(list(chunks)))
    assert output_tokens(request, grade_openai_response(chunks)) == (3, "stream")


# An invoke quoted in a Markdown fence: content to vLLM 0.23-0.29, a call to 0.30+ (the table's
# invoke_outside_block), so graded a quoted block only under 0.30+'s rules.
FENCED_INVOKE = f"For example:\n```\n{mk.invoke_open('read_file')}\n{mk.INVOKE_CLOSE}\n```\nDone."
READ_FILE = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
]


def _summed(text: str, name: str, **labels: str) -> float:
    """The sum of ``name``'s series whose labels include ``labels``."""
    return sum(
        s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == name and labels.items() <= s.labels.items()
    )


def _first_phenotype(url: str, phenotype: str) -> dict:
    """The message of the first answer of ``phenotype`` the simulated model gives, asked one
    request at a time (the seeded model answers in the same order every run)."""
    for _ in range(400):
        before = httpx.get(url + "/_sim/stats").json()["phenotypes"].get(phenotype, 0)
        body = {"model": "m", "messages": [{"role": "user", "content": "weather?"}]}
        answer = httpx.post(url + "/v1/chat/completions", json={**body, "tools": READ_FILE})
        if httpx.get(url + "/_sim/stats").json()["phenotypes"].get(phenotype, 0) > before:
            return dict(answer.json()["choices"][0]["message"])
    raise AssertionError(f"no {phenotype} answer in 400")


@pytest.mark.parametrize(
    ("release", "rules", "fenced_flagged", "wrapper_delivered"),
    [("0.24.0", "0.23-0.24", False, False), ("0.34.0", "0.34", True, True)],
)
def test_sidecar_reads_and_grades_by_the_simulated_release(
    release: str, rules: str, fenced_flagged: bool, wrapper_delivered: bool
) -> None:
    """The simulated vLLM of two releases: /version reports each, each delivers the same model
    answer by its own rules (0.30+ take ``<｜DSML｜toolcalls>`` as a block opener, 0.24 hands
    the block on as content), and the sidecar beside it shows the release's rules on
    ``dsv4_dsml_dialect_info`` and grades by them (an invoke quoted in a fence is a call to
    0.34, so a quoted block there; prose to 0.24)."""
    sim_app = create_sim_app(racy_sim(engine="vllm", seed=11, vllm_version=release))
    settings = {
        "host": "127.0.0.1",  # as ServerThread binds: ingest answers without a token
        "engine": "vllm",
        "gpu_backend": "fake",
        "canary": False,
        "sglang_poll_interval": 0.1,
        "model_config_path": str(FLASH),
    }
    with ServerThread(sim_app) as sim:
        assert httpx.get(sim.url + "/version").json() == {"version": release}
        wrapper = _first_phenotype(sim.url, "damaged_wrapper")
        app = create_app(load_settings({"sglang_url": sim.url, **settings}))
        with ServerThread(app) as sc:
            dialect = f"v4@vllm-{release}"
            wait_for(lambda: dialect in scrape(sc.url), timeout=30)
            samples = [
                {"text": FENCED_INVOKE, "finish_reason": "stop", "tools": READ_FILE},
                {"response": {"choices": [{"message": wrapper, "finish_reason": "stop"}]}},
            ]
            posted = httpx.post(sc.url + "/api/v1/samples", json={"samples": samples})
            assert posted.json()["accepted"] == 2, posted.text

            def graded() -> str | None:
                text = scrape(sc.url)
                done = _summed(text, "dsv4_dsml_samples_total", source="ingest") >= 2
                return text if done else None

            text = wait_for(graded, timeout=30)
    assert _labels(text, "dsv4_dsml_dialect_info") == [
        {"dialect": dialect, "source": "model_config", "engine_rules": f"vllm {rules} (release)"}
    ]
    assert bool(wrapper.get("tool_calls")) == wrapper_delivered, wrapper
    assert (mk.MARKER in (wrapper.get("content") or "")) != wrapper_delivered, wrapper
    quoted = _summed(text, "dsv4_dsml_reasons_total", source="ingest", reason="quoted_block")
    assert (quoted > 0) == fenced_flagged
    # flagged: the 0.24 client got the block as content, the 0.34 one a fenced example it
    # would have received as a call; well formed: 0.34 delivered the damaged wrapper's call
    ok = sum(
        _summed(text, "dsv4_dsml_samples_total", source="ingest", verdict=v)
        for v in ("well_formed", "no_tool_call")
    )
    assert ok == 1
