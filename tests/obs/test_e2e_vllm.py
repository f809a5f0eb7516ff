"""Proof against a real Prometheus beside the simulator posing as vLLM: the sidecar discovers
the engine, and the boards render corruption by concurrency (canary and tap, graded as vLLM's
parser delivers the calls), NVML's GPU memory and vLLM's KV figures. The panels that are
SGLang's alone (the footprint model's pools, HiCache, the probe) are the ones left empty."""

from __future__ import annotations

import pytest

from dashboards.memory import VLLM_PANELS
from dashboards.queries import panel_queries
from exporter.app import create_app
from exporter.config_loader import load_settings
from exporter.sim.server import create_sim_app
from exporter.sim.vllm import VERSION as SIM_VERSION
from tests.support import ServerThread, prometheus, promql, racy_sim, tap_load, wait_for

pytestmark = pytest.mark.e2e

# Panels that must render beside vLLM: the whole corruption board, and on the memory board
# NVML's memory and the engine's own figures.
MEMORY_PANELS = (
    "GPU memory used / total",
    "GPU memory free",
    "Running requests",
    "Engine",
    *VLLM_PANELS,
)


def test_boards_render_beside_a_simulated_vllm() -> None:
    with ServerThread(create_sim_app(racy_sim(engine="vllm", seed=7))) as server:
        app = create_app(
            load_settings(
                {
                    "sglang_url": server.url,
                    "gpu_backend": "fake",
                    "sglang_poll_interval": 0.5,
                    "nvml_poll_interval": 0.5,
                    "canary_interval": 0.2,
                    "canary_concurrency": 4,
                    "tap_port": 0,
                    "tap_host": "127.0.0.1",
                    "tap_sample_rate": 0.5,
                    "dsml_dialect": "v4",
                }
            )
        )
        with (
            ServerThread(app) as sc,
            prometheus(
                [],
                scrape_configs=[
                    {
                        "job_name": "dsv4-sidecar",
                        "static_configs": [{"targets": [sc.url.removeprefix("http://")]}],
                    },
                    {  # vLLM's own /metrics, its own job (the boards' $vllm_job)
                        "job_name": "vllm",
                        "static_configs": [{"targets": [server.url.removeprefix("http://")]}],
                    },
                ],
            ) as prom,
            tap_load(sc),
        ):
            wait_for(
                lambda: promql(
                    prom,
                    'sum(dsv4_dsml_samples_total{verdict="degenerate"}) > 5 '
                    'and on() dsv4_engine_info{engine="vllm", source="discovered"}',
                ),
                timeout=90,
                interval=1,
            )
            queries = panel_queries(job="dsv4-sidecar", rate_interval="30s", range_="5m")
            wanted = list(queries["tool-call-corruption"]) + [
                (title, expr)
                for title, expr in queries["memory-overcommit"]
                if title.rsplit(" [", 1)[0] in MEMORY_PANELS
            ]

            # range-based panel queries need a few samples: wait until every one has data
            def panels_have_data() -> bool:
                missing = [f"{t}: {expr}" for t, expr in wanted if not promql(prom, expr)]
                assert not missing, "panels without data beside vLLM:\n" + "\n".join(missing)
                return True

            wait_for(panels_have_data, timeout=30, interval=1)
            dialect = promql(prom, f'dsv4_dsml_dialect_info{{dialect="v4@vllm-{SIM_VERSION}"}}')
            footprint = promql(prom, 'dsv4_engine_info{footprint="not modelled: vllm"}')
    assert len(wanted) >= len(MEMORY_PANELS) + 20
    assert dialect and footprint
