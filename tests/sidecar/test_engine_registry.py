"""An engine is a row of the engine table (issue 36, item 1): a stand-in third engine
(tests/sidecar/standin_engine: identify, source, dialect) plus one row is all it takes for the
sidecar to discover it, read its server through its source, take its dialect and report its
footprint as not modelled; nothing else in the sidecar names an engine."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.responses import PlainTextResponse

from exporter.app import create_app
from exporter.config import SidecarSettings
from exporter.sim.fake_nvml import FakeNvml
from exporter.sources import engines
from exporter.sources.discovery import engine_of
from tests.sidecar.standin_engine import INFO, TRTLLM
from tests.support import ServerThread, sample_value, scrape, wait_for

ROOT = Path(__file__).resolve().parents[2]


def _standin_server(running: int) -> FastAPI:
    app = FastAPI()

    @app.get(INFO)
    def info() -> dict:
        return {
            "trtllm_version": "1.2.0",
            "model": "deepseek-v4-flash",
            "tool_parser": "trt_deepseek_v4",
            "running": running,
        }

    @app.get("/metrics")
    def metrics() -> PlainTextResponse:  # neither sglang: nor vllm: families
        return PlainTextResponse("trtllm_requests_running 7\n")

    return app


@pytest.fixture
def with_third_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """The one row: the stand-in appended to the table."""
    monkeypatch.setattr(engines, "ENGINES", (*engines.ENGINES, TRTLLM))


def test_the_table_decides_by_each_rows_own_answers(with_third_engine: None) -> None:
    answers = {"/server_info": None, "/version": None, "/metrics": "x 1\n"}
    assert engine_of({**answers, INFO: {"trtllm_version": "1.2.0"}}) is TRTLLM
    assert engine_of({**answers, INFO: {"version": "1.2.0"}}) is None
    assert engines.setting_values()[-1] == "trtllm"


def test_a_third_engine_is_one_package_and_one_row(with_third_engine: None) -> None:
    settings = SidecarSettings(
        sglang_url="http://127.0.0.1:9",  # replaced below, once the server listens
        canary=False,
        sglang_poll_interval=0.05,
    )
    with ServerThread(_standin_server(running=7)) as server:
        settings = settings.model_copy(update={"server_url": server.url})
        app = create_app(settings, nvml=FakeNvml(count=1))
        with ServerThread(app) as sc:

            def up() -> str | None:
                t = scrape(sc.url)
                return t if sample_value(t, "dsv4_source_up", source="trtllm") == 1 else None

            text = wait_for(up, timeout=30)
            sidecar = app.state.sidecar
            assert sidecar.engine_row is TRTLLM
            assert sidecar.served_model() == "deepseek-v4-flash"
            assert sidecar.server_running() == 7
    info = {"engine": "trtllm", "source": "discovered", "footprint": "not modelled: trtllm"}
    assert sample_value(text, "dsv4_engine_info", **info) == 1
    assert sample_value(text, "dsv4_dsml_dialect_info", dialect="v4", source="tool_call_parser")
    assert sample_value(text, "dsv4_source_up", source="sglang") is None  # swapped out
    assert sample_value(text, "dsv4_footprint_up", reason="not_modelled") == 0


def test_the_engine_setting_takes_the_tables_rows(with_third_engine: None) -> None:
    """A new row is selectable by name as soon as it exists; a name no row has is refused
    naming the rows (no fixed list in the settings)."""
    assert SidecarSettings(engine="trtllm", canary=False).engine == "trtllm"
    with pytest.raises(ValueError, match=r"one of auto, sglang, vllm, trtllm, not 'tensorrt'"):
        SidecarSettings(engine="tensorrt", canary=False)


def _engine_comparisons(path: Path) -> list[str]:
    """``x == "sglang"`` / ``"vllm" in ...``-style tests of an engine's name in ``path``."""
    names = {e.name for e in engines.ENGINES}
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Compare):
            parts = [node.left, *node.comparators]
            if any(isinstance(p, ast.Constant) and p.value in names for p in parts):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_no_production_code_outside_the_engines_compares_an_engine_name() -> None:
    """The seam's modules read the table; only an engine's own package names it."""
    seam = [
        "exporter/sidecar.py",
        "exporter/sources/discovery.py",
        "exporter/sources/engine.py",
        "exporter/sources/engines.py",
        "exporter/sources/footprint.py",
        "exporter/sources/reconcile.py",
        "alerts/rules.py",
    ]
    assert [hit for p in seam for hit in _engine_comparisons(ROOT / p)] == []
