"""`promtool check metrics` (the Prometheus project's own lint for exposition) on what the
sidecar serves against the simulated SGLang: names, suffixes, units and HELP as Prometheus
expects them (a gauge named ``*_count`` reads as a histogram's count to every tool)."""

from __future__ import annotations

import subprocess

import pytest

from exporter.app import create_app
from exporter.config_loader import load_settings
from exporter.sim.server import create_sim_app
from exporter.sim.settings import SimSettings
from tests.support import ServerThread, require, sample_value, scrape, wait_for

pytestmark = pytest.mark.e2e


def _promtool() -> str:
    return require("promtool")


def test_sidecar_exposition_passes_promtool_check_metrics():
    sim_settings = SimSettings(index_k_dtype="bf16", configurator="legacy")
    with ServerThread(create_sim_app(sim_settings)) as sim:
        settings = load_settings(
            {"sglang_url": sim.url, "gpu_backend": "fake", "sglang_poll_interval": 0.2}
        )
        with ServerThread(create_app(settings)) as sc:
            wait_for(
                lambda: sample_value(scrape(sc.url), "dsv4_kv_pool_overcommit_bytes", rank="7")
            )
            text = scrape(sc.url)
    assert sample_value(text, "dsv4_gpus_visible") == 8
    r = subprocess.run(
        [_promtool(), "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stdout + r.stderr
