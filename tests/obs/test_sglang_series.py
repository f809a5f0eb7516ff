"""The dashboards read SGLang's own series from SGLang's /metrics (not copies the sidecar
re-exports): every such series is named in dashboards.common.SGLANG_SERIES, the simulator
serves each with SGLang's labels (tp_rank intact), and a real Prometheus finds them under
both name prefixes, `sglang:` (SGLang's exposition) and `sglang_` (setups that rename it)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.responses import PlainTextResponse
from prometheus_client.parser import text_string_to_metric_families

from dashboards.common import SGLANG_PREFIX, SGLANG_SERIES, VLLM_SERIES
from dashboards.queries import iter_queries, substitute, variable_values
from exporter.sim.server import create_sim_app
from exporter.sim.settings import SimSettings
from tests.support import ServerThread, prometheus, promql, scrape, wait_for

REPO = Path(__file__).resolve().parents[2]
SGLANG_READ = re.compile(r'__name__=~"sglang\(:\|_\)(\w+)"')


def _read_by_dashboards() -> set[str]:
    return {m for q in iter_queries() for m in SGLANG_READ.findall(q.expr)}


def test_dashboards_read_sglang_series_by_both_prefixes_only_from_the_list():
    read = _read_by_dashboards()
    assert read == set(SGLANG_SERIES), "SGLANG_SERIES lists exactly what panels read"
    for q in iter_queries():
        # no copy of an SGLang series is read where SGLang's own exists
        for copy in ("dsv4_sglang_running_requests", "dsv4_sglang_queued_requests"):
            assert copy not in q.expr, (q.dashboard, q.title)
        assert "sglang:" not in q.expr.replace(f'"{SGLANG_PREFIX}', ""), (q.dashboard, q.title)


def _sim_text() -> str:
    with ServerThread(create_sim_app(SimSettings(hicache="on"))) as sim:
        return scrape(sim.url)


def test_simulator_serves_every_series_the_dashboards_read():
    served: dict[str, dict[str, str]] = {}
    for fam in text_string_to_metric_families(_sim_text()):
        for s in fam.samples:
            served.setdefault(s.name.removeprefix("sglang:"), s.labels)
    missing = SGLANG_SERIES - set(served)
    assert not missing, f"the simulator does not serve: {missing}"
    for name in SGLANG_SERIES:
        assert "tp_rank" in served[name], name


VLLM_READ = re.compile(r"vllm:(\w+)")


def test_dashboards_read_vllm_series_only_from_the_list_and_the_simulator_serves_them():
    """The same for vLLM's own series: what panels and the $vllm_job variable read is
    VLLM_SERIES, and the simulator posing as vLLM serves every one."""
    read = {m for q in iter_queries() for m in VLLM_READ.findall(q.expr)}
    for board in (REPO / "dashboards").glob("*.json"):  # and the boards' variables
        for var in json.loads(board.read_text()).get("templating", {}).get("list", []):
            read |= set(VLLM_READ.findall(json.dumps(var.get("query", ""))))
    assert read == set(VLLM_SERIES), "VLLM_SERIES lists exactly what the boards read"
    with ServerThread(create_sim_app(SimSettings(engine="vllm"))) as sim:
        served = {
            s.name.removeprefix("vllm:")
            for fam in text_string_to_metric_families(scrape(sim.url))
            for s in fam.samples
        }
    assert not VLLM_SERIES - served, f"the simulated vLLM does not serve: {VLLM_SERIES - served}"


@pytest.mark.e2e
@pytest.mark.parametrize("prefix", ["sglang:", "sglang_"])
def test_prometheus_finds_them_under_either_prefix(prefix):
    """SGLang's text as served, or renamed to `sglang_`: every panel expression over SGLang's
    series returns data from a real Prometheus scraping it."""
    text = _sim_text().replace("sglang:", prefix)
    app = FastAPI()

    @app.get("/metrics")
    def metrics() -> PlainTextResponse:
        return PlainTextResponse(text)

    values = variable_values(sglang_job="sglang", rate_interval="5s", range_="1m")
    with (
        ServerThread(app) as server,
        prometheus(
            [],
            scrape_configs=[
                {
                    "job_name": "sglang",
                    "static_configs": [{"targets": [server.url.removeprefix("http://")]}],
                }
            ],
        ) as prom,
    ):
        for name in sorted(SGLANG_SERIES):
            wait_for(lambda n=name: promql(prom, f'{{__name__=~"{SGLANG_PREFIX}{n}"}}'))
            found = promql(prom, f'{{__name__=~"{SGLANG_PREFIX}{name}", job=~"sglang"}}')
            assert {r["metric"]["__name__"] for r in found} == {prefix + name}
        for q in iter_queries():
            if SGLANG_READ.search(q.expr):  # rate() panels: once two scrapes are in
                expr = substitute(q.expr, values)
                assert wait_for(lambda e=expr: promql(prom, e)), (q.dashboard, q.title)
