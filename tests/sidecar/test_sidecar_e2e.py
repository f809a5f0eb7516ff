"""The real sidecar (uvicorn) against the simulated SGLang (uvicorn), scraped over HTTP, and a
real Prometheus scraping the sidecar."""

from __future__ import annotations

import httpx
import pytest

from exporter.app import create_app
from exporter.config_loader import load_settings
from exporter.footprint.pools import BASE_POOLS
from exporter.sim.fake_nvml import FakeNvml
from exporter.sim.server import create_sim_app
from exporter.sim.settings import SimSettings
from exporter.units import GIB
from tests.support import ServerThread, prometheus, promql, sample_value, scrape, wait_for

pytestmark = pytest.mark.e2e


def _sidecar(sim_url: str, nvml=None, **over):
    settings = load_settings(
        {
            "sglang_url": sim_url,
            "gpu_backend": "fake",
            "sglang_poll_interval": 0.2,
            "nvml_poll_interval": 0.2,
            "nvml_timeout": 0.5,
            **over,
        }
    )
    kwargs = {"nvml": nvml} if nvml is not None else {}
    return create_app(settings, **kwargs)


@pytest.fixture(scope="module")
def legacy_sim():
    with ServerThread(
        create_sim_app(SimSettings(index_k_dtype="bf16", configurator="legacy"))
    ) as s:
        yield s


@pytest.fixture(scope="module")
def fixed_sim():
    with ServerThread(create_sim_app(SimSettings(index_k_dtype="bf16", configurator="fixed"))) as s:
        yield s


def _overcommit(url: str, rank: str = "0") -> float | None:
    return sample_value(scrape(url), "dsv4_kv_pool_overcommit_bytes", rank=rank)


def test_legacy_bf16_shows_about_4_gib_per_rank(legacy_sim):
    with ServerThread(_sidecar(legacy_sim.url, index_k_dtype="bf16")) as sc:
        over = wait_for(lambda: _overcommit(sc.url, "7"))
        text = scrape(sc.url)
        assert 4.0 * GIB < over < 4.7 * GIB
        ik = sample_value(
            text, "dsv4_kv_pool_allocated_bytes", rank="3", pool="c4_index_k"
        ) - sample_value(text, "dsv4_kv_pool_planned_bytes", rank="3", pool="c4_index_k")
        assert ik / GIB == pytest.approx(4.01, abs=0.01)
        assert (
            sample_value(
                text,
                "dsv4_deployment_info",
                index_k_dtype="bf16",
                configurator="legacy",
                hicache="true",
            )
            == 1
        )
        assert sample_value(text, "dsv4_sglang_max_total_num_tokens") == 6_614_784
        assert sample_value(text, "dsv4_kv_correct_full_tokens", rank="0") == 6_099_456
        assert sample_value(text, "dsv4_kv_bytes_per_full_token", pricing="fixed") == 8356.45
        assert sample_value(text, "dsv4_gpus_visible") == 8  # fake GPUs follow SGLang's tp_size
        # fake NVML's used memory includes the allocated pools (from its next poll on)
        alloc = sum(
            sample_value(text, "dsv4_kv_pool_allocated_bytes", rank="0", pool=p) for p in BASE_POOLS
        )
        wait_for(
            lambda: (
                sample_value(scrape(sc.url), "dsv4_gpu_memory_used_bytes", rank="0")
                > alloc + 70 * GIB
            )
        )
        reserve = sample_value(text, "dsv4_memory_reserve_bytes", rank="0")
        fraction = sample_value(text, "dsv4_sglang_mem_fraction_static_ratio")
        assert fraction == pytest.approx(120 / 139.5)  # the simulator's 50 GiB budget
        assert reserve == pytest.approx(140 * GIB * (1 - fraction), rel=1e-6)
        assert sample_value(text, "dsv4_memory_reserve_remaining_bytes", rank="0") == pytest.approx(
            reserve - over
        )
        api = httpx.get(sc.url + "/api/v1/footprint", timeout=5).json()
        assert api["status"] == "ok" and len(api["ranks"]) == 8
        # nothing configured the pricing: the budget SGLang's profiler gave settles it
        assert api["deployment"]["sources"]["configurator"].startswith("inferred legacy")
        assert (api["sglang_version"], api["rules"]) == ("0.5.20+sim", "0.5.15-0.5.20")
        assert api["ranks"][0]["overcommit_bytes"] == over
        page = httpx.get(sc.url + "/", timeout=5).text
        assert "Worst rank over-commit" in page and "/metrics" in page


def test_fixed_configurator_shows_only_page_padding(fixed_sim):
    # A fork with the dtype-aware fix cannot be told from /server_info: the operator says so.
    with ServerThread(_sidecar(fixed_sim.url, index_k_dtype="bf16", configurator="fixed")) as sc:
        over = wait_for(lambda: _overcommit(sc.url))
        assert 0 < over < 0.5 * GIB
        assert sample_value(scrape(sc.url), "dsv4_deployment_info", configurator="fixed") == 1


def test_readyz_healthz_and_openmetrics_gzip(legacy_sim):
    with ServerThread(_sidecar(legacy_sim.url)) as sc:
        wait_for(lambda: httpx.get(sc.url + "/readyz", timeout=2).status_code == 200)
        body = httpx.get(sc.url + "/readyz", timeout=2).json()
        assert set(body["sources"]) >= {"nvml", "sglang", "footprint"}
        assert httpx.get(sc.url + "/healthz", timeout=2).json() == {"status": "ok"}
        r = httpx.get(
            sc.url + "/metrics",
            headers={
                "Accept": "application/openmetrics-text;version=1.0.0,text/plain;q=0.5",
                "Accept-Encoding": "gzip",
            },
            timeout=5,
        )
        assert r.headers["content-type"].startswith("application/openmetrics-text")
        assert r.text.rstrip().endswith("# EOF")  # httpx decoded the gzip body
        assert "dsv4_sidecar_build_info" in r.text
        # which DSML text checks this process runs: the subprocess imports the same build
        from exporter.dsml import KERNEL

        assert f'dsml_kernel="{KERNEL}"' in r.text


def test_not_ready_until_sources_cycle_and_sglang_down_visible():
    from tests.support import dead_url

    # GPUs that do not depend on the server (the simulator's own GPUs would vanish with it)
    app = _sidecar(dead_url(), nvml=FakeNvml(count=8))
    with ServerThread(app) as sc:

        def unreachable_counted():
            t = scrape(sc.url)
            return (
                t
                if sample_value(
                    t, "dsv4_source_errors_total", source="sglang", reason="unreachable"
                )
                else None
            )

        text = wait_for(unreachable_counted)
        assert sample_value(text, "dsv4_source_up", source="sglang") == 0
        assert sample_value(text, "dsv4_footprint_up", reason="no_sglang") == 0
        assert sample_value(text, "dsv4_source_up", source="nvml") == 1  # the rest keeps working
        assert sample_value(text, "dsv4_kv_pool_overcommit_bytes", rank="0") is None
        assert sample_value(text, "dsv4_source_up", source="sglang") == 0


def test_sglang_recovers_and_counter_moves(legacy_sim):
    with ServerThread(_sidecar(legacy_sim.url)) as sc:
        wait_for(lambda: _overcommit(sc.url))
        httpx.post(legacy_sim.url + "/_sim/control", json={"fault": "http_500"}, timeout=5)
        try:
            wait_for(lambda: sample_value(scrape(sc.url), "dsv4_source_up", source="sglang") == 0)
            text = scrape(sc.url)
            assert (
                sample_value(
                    text, "dsv4_source_errors_total", source="sglang", reason="http_status"
                )
                >= 1
            )
            assert (
                sample_value(
                    text, "dsv4_source_errors_total", source="sglang", reason="http_status"
                )
                >= 1
            )
        finally:
            httpx.post(legacy_sim.url + "/_sim/control", json={"fault": "none"}, timeout=5)
        wait_for(lambda: sample_value(scrape(sc.url), "dsv4_source_up", source="sglang") == 1)


def test_scrapes_stay_fast_while_nvml_hangs_30s(legacy_sim):
    fake = FakeNvml(count=8)
    app = _sidecar(legacy_sim.url, nvml=fake)
    with ServerThread(app) as sc:
        wait_for(lambda: sample_value(scrape(sc.url), "dsv4_source_up", source="nvml") == 1)
        fake.hang_next(30.0)
        wait_for(
            lambda: (
                sample_value(
                    scrape(sc.url), "dsv4_source_errors_total", source="nvml", reason="timeout"
                )
                == 1
            ),
            timeout=5,
        )
        # every scrape answers while NVML hangs (how fast is bench/'s question, not a test's)
        with httpx.Client(timeout=10) as client:
            for _ in range(40):
                assert client.get(sc.url + "/metrics").status_code == 200
        text = scrape(sc.url)
        assert sample_value(text, "dsv4_source_up", source="nvml") == 0
        assert sample_value(text, "dsv4_gpu_memory_used_bytes", rank="0") is None
        assert (
            sample_value(text, "dsv4_source_up", source="sglang") == 1
        )  # other sources unaffected
        fake.faults.hang_seconds = 0  # nothing further pending; the wedged thread sleeps on


def test_prometheus_scrapes_sidecar_and_promql_sees_overcommit(legacy_sim):
    with ServerThread(_sidecar(legacy_sim.url, index_k_dtype="bf16")) as sc:
        wait_for(lambda: _overcommit(sc.url))
        expected = _overcommit(sc.url)
        target = sc.url.removeprefix("http://")
        with prometheus([target]) as prom:
            res = wait_for(lambda: promql(prom, "max(dsv4_kv_pool_overcommit_bytes)"), timeout=30)
            assert float(res[0]["value"][1]) == pytest.approx(expected)
            ranks = promql(prom, "count(dsv4_kv_pool_overcommit_bytes > 4 * 1024^3)")
            assert float(ranks[0]["value"][1]) == 8
            up = promql(prom, 'up{job="dsv4-sidecar"}')
            assert float(up[0]["value"][1]) == 1


def test_slow_canary_does_not_hold_back_readiness():
    slow = create_sim_app(SimSettings(ttft_ms=20_000))
    with ServerThread(slow) as sim, ServerThread(_sidecar(sim.url, canary_timeout=30)) as sc:
        r = wait_for(
            lambda: (r := httpx.get(sc.url + "/readyz", timeout=2)).status_code == 200 and r,
            timeout=10,
        )
        canary = r.json()["sources"]["canary"]
        assert canary["cycles"] == 0 and canary["ready"]  # still waiting for its answer


def test_hicache_activity_from_sglang_metrics_moves(legacy_sim):
    """Load-backs counted from SGLang's own metrics grow with HiCache traffic; the pure copies
    of SGLang's series are gone from the sidecar's exposition."""
    import asyncio

    from exporter.loadgen import LoadGenerator

    with ServerThread(_sidecar(legacy_sim.url, canary=False)) as sc:
        wait_for(lambda: sample_value(scrape(sc.url), "dsv4_source_up", source="sglang") == 1)
        before = sample_value(scrape(sc.url), "dsv4_sglang_hicache_load_backs_total") or 0
        asyncio.run(LoadGenerator(legacy_sim.url).run_level(4, requests=12))

        def grown():
            t = scrape(sc.url)
            n = sample_value(t, "dsv4_sglang_hicache_load_backs_total") or 0
            return t if n >= before + 12 else None

        text = wait_for(grown)
        # SGLang's own series are not copied (the dashboards read them from SGLang's /metrics):
        # they grew there, and the sidecar has no re-export of them.
        own = scrape(legacy_sim.url)
        assert sample_value(own, "sglang:load_back_duration_seconds_sum") > 0
        for pool in ("kv", "deepseek_v4_c4_indexer"):
            assert sample_value(own, "sglang:load_back_tokens_total", pool=pool) > 0
        assert sample_value(own, "sglang:hicache_host_total_tokens") > 0
        for copy in (
            "dsv4_sglang_hicache_load_back_duration_seconds_total",
            "dsv4_sglang_hicache_load_back_tokens_total",
            "dsv4_sglang_hicache_host_total_tokens",
            "dsv4_sglang_hicache_host_used_tokens",
            "dsv4_sglang_queued_requests",
            "dsv4_sglang_token_usage_ratio",
        ):
            assert f"\n{copy}" not in text, copy
