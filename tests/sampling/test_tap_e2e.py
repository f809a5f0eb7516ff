"""The sidecar's tap end to end: the real OpenAI client at 64 concurrent sessions through the
tap to the simulated SGLang; what the grader counts matches the simulator's ground truth, in
the right concurrency buckets, and the tap's own metrics move."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.app import create_app
from exporter.config_loader import load_settings
from exporter.sim.server import create_sim_app
from exporter.sim.settings import SimSettings
from tests.support import ServerThread, openai_chats, sample_value, scrape, wait_for

pytestmark = pytest.mark.e2e
N = 320
CONCURRENCY = 64
SEQUENTIAL = 12


def _tap_counts(text: str) -> dict[tuple[str, str], float]:
    out: dict[tuple[str, str], float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "dsv4_dsml_samples_total" and s.labels["source"] == "tap":
                key = (s.labels["verdict"], s.labels["concurrency_le"])
                out[key] = out.get(key, 0) + s.value
    return out


async def _drive(base_url: str, n: int = N, concurrency: int = CONCURRENCY) -> list[bool]:
    return await openai_chats(base_url, n, concurrency)


def test_tap_counts_match_simulator_ground_truth():
    sim_app = create_sim_app(
        SimSettings(index_k_dtype="bf16", hicache="on", ttft_ms=5, itl_ms=1, seed=11)
    )
    with ServerThread(sim_app) as sim:
        app = create_app(
            load_settings(
                {
                    "sglang_url": sim.url,
                    "gpu_backend": "fake",
                    "canary": False,
                    "tap_port": 0,
                    "tap_host": "127.0.0.1",
                    "tap_sample_rate": 1.0,
                    "sglang_poll_interval": 0.5,
                }
            )
        )
        with ServerThread(app) as sc:
            tap_url = f"http://127.0.0.1:{app.state.sidecar.tap.port}"
            # one session first: every one of its samples must be counted at concurrency 1
            assert all(asyncio.run(_drive(tap_url, SEQUENTIAL, 1)))
            wait_for(lambda: sum(_tap_counts(scrape(sc.url)).values()) >= SEQUENTIAL)
            sequential = _tap_counts(scrape(sc.url))
            assert all(asyncio.run(_drive(tap_url)))
            wait_for(lambda: sum(_tap_counts(scrape(sc.url)).values()) >= N + SEQUENTIAL)
            text = scrape(sc.url)
            truth = httpx.get(sim.url + "/_sim/stats", timeout=5).json()
    assert sum(v for (_, le), v in sequential.items() if le == "1") == SEQUENTIAL
    counts = _tap_counts(text)
    graded = sum(counts.values())
    bad = sum(v for (verdict, _), v in counts.items() if verdict in ("degenerate", "suspect"))
    sim_bad = sum(t["degenerate"] for t in truth["truth"].values())
    assert graded == N + SEQUENTIAL == truth["requests_total"]
    assert sim_bad > 0
    assert abs(bad - sim_bad) <= 2, (bad, sim_bad, truth["phenotypes"])
    # 64 sessions through the tap: most samples see more than 8 in flight, none above 64
    above8 = sum(v for (_, le), v in counts.items() if le in ("16", "32", "64"))
    assert above8 >= 0.5 * N
    assert not any(v for (_, le), v in counts.items() if le in ("128", "+Inf"))
    assert sample_value(text, "dsv4_tap_sampled_total") == N + SEQUENTIAL
    assert sample_value(text, "dsv4_tap_inflight_requests") == 0
    assert sample_value(text, "dsv4_tap_added_latency_seconds_count") >= N + SEQUENTIAL
