"""The simulated probe's snapshot files read by the real sidecar: ungated index-K reads and the
gap histogram appear for the racy deployment, zero for the gated one, and a writer that stops
turns dsv4_probe_up to 0."""

from __future__ import annotations

import asyncio

import pytest

from exporter.app import create_app
from exporter.config_loader import load_settings
from exporter.loadgen import LoadGenerator
from exporter.sim.server import create_sim_app
from exporter.sim.settings import SimSettings
from tests.support import ServerThread, sample_value, scrape, wait_for

pytestmark = pytest.mark.e2e


def _run(sim_settings: SimSettings, probe_dir):
    sim_app = create_sim_app(sim_settings)
    sidecar = create_app(
        load_settings(
            {
                "gpu_backend": "fake",
                "canary": False,
                "probe_dir": str(probe_dir),
                "probe_stale_after": 2,
                "sglang_url": "http://127.0.0.1:1",
            }
        )
    )
    return sim_app, sidecar


@pytest.mark.parametrize(("dtype", "racy"), [("bf16", True), ("fp8", False)])
def test_ungated_reads_follow_the_deployment(tmp_path, dtype, racy):
    sim_app, sidecar = _run(
        SimSettings(
            index_k_dtype=dtype, hicache="on", tp_size=2, ttft_ms=1, itl_ms=0, probe_dir=tmp_path
        ),
        tmp_path,
    )
    with ServerThread(sim_app) as sim, ServerThread(sidecar) as sc:
        asyncio.run(LoadGenerator(sim.url).run_level(8, requests=40))

        def reads():
            t = scrape(sc.url)
            gated = sample_value(t, "dsv4_hicache_index_k_reads_total", rank="1", gated="true")
            ungated = sample_value(t, "dsv4_hicache_index_k_reads_total", rank="1", gated="false")
            total = (gated or 0) + (ungated or 0)
            return (t, gated, ungated) if total >= 40 * 21 else None  # 21 c4 layers on Flash

        text, gated, ungated = wait_for(reads)
        assert sample_value(text, "dsv4_probe_up", rank="0") == 1
        gap_count = sample_value(text, "dsv4_hicache_transfer_gap_seconds_count", rank="0")
        if racy:
            assert ungated >= 40 * 21 and gated == 0
            assert gap_count == ungated
        else:
            assert ungated == 0 and gated >= 40 * 21
            assert not gap_count
    # the simulator wrote a closed snapshot on shutdown: the sidecar must see the writer gone
    with ServerThread(sidecar) as sc:
        wait_for(lambda: sample_value(scrape(sc.url), "dsv4_probe_up", rank="0") == 0)
        assert (
            sample_value(
                scrape(sc.url), "dsv4_hicache_index_k_reads_total", rank="0", gated="false"
            )
            is None
        )
