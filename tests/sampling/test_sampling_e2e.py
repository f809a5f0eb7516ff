"""Canary and ingest end to end: the real sidecar against the simulated SGLang."""

from __future__ import annotations

import json

import httpx
import pytest

from exporter.app import create_app
from exporter.config_loader import load_settings
from exporter.sim.generation import dsml_block
from exporter.sim.server import create_sim_app
from exporter.sim.settings import SimSettings
from tests.support import ServerThread, dead_url, racy_sim, sample_value, scrape, wait_for

pytestmark = pytest.mark.e2e
TOKEN = "s3cret-token-for-tests"


def _app(sim_url: str, **over):
    return create_app(
        load_settings(
            {
                "sglang_url": sim_url,
                "host": "127.0.0.1",  # as ServerThread binds: ingest answers without a token
                "gpu_backend": "fake",
                "sglang_poll_interval": 0.1,
                "nvml_poll_interval": 1,
                "canary_interval": 0.05,
                "canary_concurrency": 4,
                "samples_token": TOKEN,
                **over,
            }
        )
    )


def _canary_total(text: str, verdict: str | None = None) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    total = 0.0
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if (
                s.name == "dsv4_dsml_samples_total"
                and s.labels["source"] == "canary"
                and (verdict is None or s.labels["verdict"] == verdict)
            ):
                total += s.value
    return total


def test_canary_sees_corruption_at_high_concurrency_only():
    sim_app = create_sim_app(racy_sim(seed=7))
    with ServerThread(sim_app) as sim, ServerThread(_app(sim.url)) as sc:
        wait_for(lambda: _canary_total(scrape(sc.url)) >= 150, timeout=60)
        text = scrape(sc.url)
        truth = httpx.get(sim.url + "/_sim/stats", timeout=5).json()["truth"]
    graded = _canary_total(text)
    bad = _canary_total(text, "degenerate") + _canary_total(text, "suspect")
    sim_bad = sum(v["degenerate"] for v in truth.values())
    sim_n = sum(v["requests"] for v in truth.values())
    # every canary answer at 60+ in flight is counted in the 64 bucket
    in64 = sum(
        sample_value(
            text, "dsv4_dsml_samples_total", source="canary", verdict=v, concurrency_le="64"
        )
        or 0
        for v in ("well_formed", "degenerate", "suspect", "no_tool_call", "truncated")
    )
    # all but the first few (sent before SGLang's running count was first polled: unknown
    # concurrency counts as 1) land in the 64 bucket
    assert in64 >= graded - 4
    assert 0.08 < bad / graded < 0.30  # the simulator's model gives ~0.17 at 60
    assert abs(bad / graded - sim_bad / sim_n) < 0.08
    assert sample_value(text, "dsv4_canary_requests_total", result="success") >= 150
    assert sample_value(text, "dsv4_source_last_success_timestamp_seconds", source="canary") > 0
    assert sample_value(text, "dsv4_canary_latency_seconds_count") >= 150


def test_clean_deployment_grades_clean():
    sim_app = create_sim_app(
        SimSettings(index_k_dtype="fp8", hicache="off", ttft_ms=1, itl_ms=0, background_running=60)
    )
    with ServerThread(sim_app) as sim, ServerThread(_app(sim.url)) as sc:
        wait_for(lambda: _canary_total(scrape(sc.url)) >= 60, timeout=60)
        text = scrape(sc.url)
    assert _canary_total(text, "well_formed") == _canary_total(text)


def test_canary_failures_counted():
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    def canary(url: str, result: str) -> float:
        return sample_value(scrape(url), "dsv4_canary_requests_total", result=result) or 0

    with ServerThread(_app(dead_url())) as sc:
        wait_for(lambda: canary(sc.url, "error") >= 2)
    overloaded = FastAPI()

    @overloaded.post("/v1/chat/completions")
    async def busy():
        return JSONResponse({"error": "overloaded"}, status_code=503)

    with ServerThread(overloaded) as up, ServerThread(_app(up.url)) as sc:
        wait_for(lambda: canary(sc.url, "http_error") >= 2)
    slow = create_sim_app(SimSettings(ttft_ms=3000))
    with ServerThread(slow) as sim, ServerThread(_app(sim.url, canary_timeout=0.2)) as sc:
        wait_for(lambda: canary(sc.url, "timeout") >= 1, timeout=20)


def test_ingest_and_samples_endpoint_auth():
    sim_app = create_sim_app(SimSettings())
    good = "ok</think>" + dsml_block([("get_weather", {"city": "Lisbon"})])
    bad = good.replace("tool_calls>", "toolcalls>", 1) + " mail ops@example.com"
    with ServerThread(sim_app) as sim, ServerThread(_app(sim.url, canary=False)) as sc:
        r = httpx.post(
            sc.url + "/api/v1/samples",
            json={
                "samples": [
                    {"text": good, "concurrency": 1},
                    {"text": bad, "concurrency": 40, "request_id": "gw-1"},
                    {"text": 5},
                ]
            },
            timeout=5,
        )
        assert r.status_code == 200 and r.json()["accepted"] == 2
        assert r.json()["rejected"][0]["index"] == 2
        r = httpx.post(sc.url + "/api/v1/samples", content=b"{not json", timeout=5)
        assert r.status_code == 400 and "not valid JSON" in r.json()["error"]
        r = httpx.post(sc.url + "/api/v1/samples", content=b"x" * (9 << 20), timeout=10)
        assert r.status_code == 413
        huge = {"text": good + " " + "lorem ipsum dolor " * 200_000}  # ~3.6 MB: graded
        assert httpx.post(sc.url + "/api/v1/samples", json=huge, timeout=10).status_code == 200

        def degenerate_in_64():
            return sample_value(
                scrape(sc.url),
                "dsv4_dsml_samples_total",
                source="ingest",
                verdict="degenerate",
                concurrency_le="64",
            )

        wait_for(degenerate_in_64)
        assert httpx.get(sc.url + "/api/v1/samples", timeout=5).status_code == 401
        wrong = {"Authorization": "Bearer nope"}
        assert httpx.get(sc.url + "/api/v1/samples", headers=wrong, timeout=5).status_code == 401
        ok = httpx.get(
            sc.url + "/api/v1/samples", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=5
        )
        assert ok.status_code == 200
        items = {i["request_id"]: i for i in ok.json()["samples"]}
        assert (
            "ops@example.com" not in items["gw-1"]["text"] and "[REDACTED]" in items["gw-1"]["text"]
        )
        assert items["gw-1"]["spans"] and json.dumps(items)  # spans present, all serialisable
        assert items["gw-1"]["concurrency"] == 40


def test_samples_endpoint_off_without_token():
    sim_app = create_sim_app(SimSettings())
    with (
        ServerThread(sim_app) as sim,
        ServerThread(
            create_app(
                load_settings({"sglang_url": sim.url, "gpu_backend": "fake", "canary": False})
            )
        ) as sc,
    ):
        r = httpx.get(sc.url + "/api/v1/samples", timeout=5)
        assert r.status_code == 404 and "DSV4_SIDECAR_SAMPLES_TOKEN" in r.json()["hint"]
