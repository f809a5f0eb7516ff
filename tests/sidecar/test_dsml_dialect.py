"""The sidecar learns the deployment's DSML dialect from SGLang's /server_info (the simulator,
served by a real uvicorn on 127.0.0.1) and grades samples with it; a setting overrides it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from exporter.config import SidecarSettings
from exporter.dsml import render_completion
from exporter.samplers.decode import GradingRequest, TextOutput
from exporter.sidecar import Sidecar
from exporter.sim.server import create_sim_app
from exporter.sim.settings import SimSettings
from exporter.sources.sglang import tool_call_parser_of
from tests.support import ServerThread

V4_CALL = render_completion("Checking.", [("ls", {"path": "."})], grammar="v4")
V41_CALL = render_completion("Checking.", [("ls", {"path": "."})], grammar="v4.1")


def _text(text: str, grammar: str | None = None) -> GradingRequest:
    return GradingRequest(source="ingest", output=TextOutput(text), grammar=grammar)


@pytest.fixture(scope="module")
def sim():
    app = create_sim_app(SimSettings())
    with ServerThread(app) as srv:
        yield srv


def _sidecar(url: str, **kw: object) -> Sidecar:
    settings = SidecarSettings(sglang_url=url, gpu_backend="fake", canary=False, **kw)
    sc = Sidecar(settings)

    async def poll() -> None:
        await sc.servers["sglang"].poll_once()
        await sc.servers["sglang"].close()

    asyncio.run(poll())
    return sc


def test_tool_call_parser_of_tolerates_odd_shapes() -> None:
    assert tool_call_parser_of({"tool_call_parser": "deepseekv41"}) == "deepseekv41"
    assert tool_call_parser_of({"tool_call_parser": None}) is None
    assert tool_call_parser_of({"tool_call_parser": 3}) is None
    assert tool_call_parser_of([]) is None


def test_dialect_from_server_info(sim) -> None:
    sc = _sidecar(sim.url)
    assert sc.servers["sglang"].health.up and sc.servers["sglang"].tool_call_parser == "deepseekv4"
    assert sc.dsml_dialect() == ("v4", "server_info")
    ok = sc.pipeline.grade_now(_text(V4_CALL))
    assert ok.verdict == "well_formed"
    wrong = sc.pipeline.grade_now(_text(V41_CALL))
    assert wrong.verdict == "degenerate" and "dialect_mismatch" in wrong.reasons
    assert sc.pipeline.reasons[("ingest", "dialect_mismatch")] == 1


def test_setting_overrides_and_sample_grammar_wins(sim) -> None:
    sc = _sidecar(sim.url, dsml_dialect="v4.1")
    assert sc.dsml_dialect() == ("v4.1", "configured")
    assert sc.pipeline.grade_now(_text(V41_CALL)).verdict == "well_formed"
    named = _text(V4_CALL, grammar="v4")
    assert sc.pipeline.grade_now(named).verdict == "well_formed"


def test_dialect_from_model_config_when_sglang_is_down(tmp_path: Path) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(
        json.dumps({"architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v41"})
    )
    sc = _sidecar("http://127.0.0.1:9", model_config_path=cfg, sglang_timeout=0.3)
    assert not sc.servers["sglang"].health.up
    assert sc.dsml_dialect() == ("v4.1", "model_config")


def _dialect_series(sc: Sidecar) -> list[tuple[str, str]]:
    """The dsv4_dsml_dialect_info series of a scrape of the sidecar's registry."""
    from prometheus_client.exposition import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    text = generate_latest(sc.registry).decode()
    return [
        (s.labels["dialect"], s.labels["source"])
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name == "dsv4_dsml_dialect_info" and s.value == 1.0
    ]


def test_dialect_info_moves_with_what_the_sidecar_learns(sim) -> None:
    settings = SidecarSettings(sglang_url=sim.url, gpu_backend="fake", canary=False)
    sc = Sidecar(settings)
    assert _dialect_series(sc) == [("auto", "unknown")]  # before SGLang answered

    async def poll() -> None:
        await sc.servers["sglang"].poll_once()
        await sc.servers["sglang"].close()

    asyncio.run(poll())
    assert _dialect_series(sc) == [("v4", "server_info")]
    assert _dialect_series(_sidecar(sim.url, dsml_dialect="v4.1")) == [("v4.1", "configured")]


def test_dialect_info_from_model_config(tmp_path: Path) -> None:
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "deepseek_v32"}))
    sc = _sidecar("http://127.0.0.1:9", model_config_path=cfg, sglang_timeout=0.3)
    assert _dialect_series(sc) == [("v3.2", "model_config")]
