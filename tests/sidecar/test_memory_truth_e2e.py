"""Measured memory truth end to end: a sidecar told nothing about the deployment, beside a
simulated SGLang whose ground truth (index-K dtype, configurator pricing, budget, weights,
graphs) it is not told, on GPUs whose NVML memory is that ground truth.

Real uvicorn servers on loopback for both; the simulator reports only what the real release
reports (/server_info internal_states memory_usage, the sglang:*_gb constants of 0.5.17+). The
sidecar must find the bf16 fork's ~4.3 GiB over-commit per rank from the probe's measurement,
and, without a probe, from reconciling SGLang's memory figures with NVML alone, with every
deployment fact saying where its value came from.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.app import create_app
from exporter.config_loader import load_settings
from exporter.sim.deployment import SimDeployment
from exporter.sim.server import create_sim_app
from exporter.sim.settings import SimSettings
from exporter.units import GIB
from tests.support import ServerThread, sample_value, scrape, wait_for

pytestmark = pytest.mark.e2e

MIB = 1 << 20


def _scrape(
    sim_settings: SimSettings,
    probe_dir: Path | None,
    need: str | tuple[str, ...],
    told: dict[str, object] | None = None,
) -> tuple[str, dict[str, Any]]:
    """One scrape of a sidecar (told only SGLang's URL, plus ``told``) once ``need`` (one
    metric or several) has a value on rank 1, and its /api/v1/footprint deployment section.
    Its GPUs are the simulator's (the ``fake`` backend reads them from ``/_sim/gpus``): the
    ground truth."""
    with ServerThread(create_sim_app(sim_settings)) as sim:
        cfg: dict[str, object] = {
            "sglang_url": sim.url,
            "gpu_backend": "fake",
            "canary": False,
            "sglang_poll_interval": 0.2,
            "nvml_poll_interval": 0.2,
            **(told or {}),
        }
        if probe_dir is not None:
            cfg["probe_dir"] = str(probe_dir)
        app = create_app(load_settings(cfg), env={})
        with ServerThread(app) as sc:

            def ready() -> str | None:
                t = scrape(sc.url)
                names = (need,) if isinstance(need, str) else need
                ok = all(sample_value(t, name, rank="1") is not None for name in names)
                return t if ok else None

            text = wait_for(ready)
            api = httpx.get(sc.url + "/api/v1/footprint", timeout=5).json()["deployment"]
            return text, api


def _fact(text: str, fact: str) -> tuple[str, str] | None:
    """(value, source) of one deployment fact in a text exposition."""
    for fam in text_string_to_metric_families(text):
        for sample in fam.samples:
            if sample.name == "dsv4_deployment_fact_info" and sample.labels["fact"] == fact:
                assert sample.value == 1
                return sample.labels["value"], sample.labels["source"]
    return None


def _bf16_fork(probe_dir: Path | None = None, version: str = "0.5.20") -> SimSettings:
    return SimSettings(
        index_k_dtype="bf16",
        configurator="legacy",
        sglang_version=version,
        available_gib=50,
        tp_size=2,
        probe_dir=probe_dir,
        seed=1,
    )


def test_probe_measures_the_bf16_fork_overcommit(tmp_path):
    # the pricing is inferred from SGLang's memory figures against NVML's total: wait for the
    # reconciliation too (the probe's file can land before NVML's first poll)
    need = ("dsv4_probe_overcommit_bytes", "dsv4_memory_unexplained_bytes")
    text, api = _scrape(_bf16_fork(tmp_path), tmp_path, need)
    assert api["sources"]["index_k_dtype"].startswith("probe")
    truth = SimDeployment(_bf16_fork()).true_footprint(0).overcommit_bytes
    assert 4.2 * GIB < truth < 4.5 * GIB  # the ground truth the sidecar was not told
    for rank in ("0", "1"):
        measured = sample_value(text, "dsv4_probe_overcommit_bytes", rank=rank)
        assert measured is not None and abs(measured - truth) < 16 * MIB
        model = sample_value(text, "dsv4_kv_pool_overcommit_bytes", rank=rank)
        assert model == truth  # the model, told the measured dtype, agrees to the byte
    assert _fact(text, "index_k_dtype") == ("bf16", "probe")
    assert _fact(text, "pricing") == ("legacy", "inferred")
    assert _fact(text, "release_rules") == ("0.5.15-0.5.20", "inferred")
    # the state pools' measured bytes are float32's (bfloat16 would be half)
    assert _fact(text, "compress_state_dtype") == ("float32", "probe")
    assert _fact(text, "speculative") == ("false", "configured")


def test_nvml_reconciliation_alone_finds_the_bf16_fork(tmp_path):
    text, api = _scrape(_bf16_fork(), None, "dsv4_memory_unexplained_bytes")
    truth = SimDeployment(_bf16_fork()).true_footprint(0).overcommit_bytes
    assert _fact(text, "index_k_dtype") == ("bf16", "inferred")
    assert _fact(text, "pricing") == ("legacy", "inferred")
    assert _fact(text, "compress_state_dtype") == ("float32", "assumed")  # a probe tells
    assert api["facts"]["index_k_dtype"] == {"value": "bf16", "source": "inferred"}
    assert api["sources"]["index_k_dtype"].startswith("inferred bf16")
    margin = sample_value(text, "dsv4_index_k_inference_margin_bytes", rank="0")
    assert margin is not None and margin > 3.5 * GIB  # bf16 vs fp8 pools at 50 GiB
    for rank in ("0", "1"):
        model = sample_value(text, "dsv4_kv_pool_overcommit_bytes", rank=rank)
        # the stated margin: right dtype and pricing give the exact figure
        assert model is not None and abs(model - truth) < 16 * MIB
        # NVML used = weights + pools + graphs + the rest: here the simulated CUDA context
        rest = sample_value(text, "dsv4_memory_unexplained_bytes", rank=rank)
        assert rest == pytest.approx(0.5 * GIB, abs=2 * MIB)
        assert sample_value(
            text, "dsv4_memory_accounted_bytes", rank=rank, part="weights"
        ) == pytest.approx(70 * GIB, abs=2 * MIB)
        assert sample_value(
            text, "dsv4_memory_accounted_bytes", rank=rank, part="cuda_graphs"
        ) == pytest.approx(2 * GIB, abs=2 * MIB)
    assert sample_value(text, "dsv4_sglang_kv_cache_memory_reported_bytes", rank="0") == 0
    for field in ("weight", "graph", "startup_available", "swa_tokens", "context_len"):
        assert sample_value(text, "dsv4_sglang_memory_field_present", field=field) == 1


def test_matching_fp8_deployment_is_inferred_fp8(tmp_path):
    settings = SimSettings(index_k_dtype="fp8", sglang_version="0.5.23", tp_size=2)
    text, _ = _scrape(settings, None, "dsv4_memory_unexplained_bytes")
    assert _fact(text, "index_k_dtype") == ("fp8", "inferred")
    over = sample_value(text, "dsv4_kv_pool_overcommit_bytes", rank="0")
    assert over is not None and over < 0.05 * GIB


def test_older_release_degrades_per_field(tmp_path):
    """0.5.12: no sglang:weight/graph gauges, no startup_available in internal_states; the
    weights and one graph total come from internal_states, free-at-start-up from /metrics."""
    text, _ = _scrape(_bf16_fork(version="0.5.12"), None, "dsv4_memory_unexplained_bytes")
    assert sample_value(text, "dsv4_sglang_memory_field_present", field="swa_tokens") == 0
    assert sample_value(text, "dsv4_sglang_memory_field_present", field="weight") == 1
    assert sample_value(text, "dsv4_sglang_graph_memory_bytes", rank="0", phase="all") == (
        pytest.approx(2 * GIB, abs=8 * MIB)
    )
    assert _fact(text, "index_k_dtype") == ("bf16", "inferred")


def test_fixed_pricing_fork_is_inferred_fixed(tmp_path):
    """A fork with the dtype-aware configurator: its budget matches the fixed plan; the
    over-commit left is what 0.5.20's configurator leaves unpriced besides index-K (~0.3 GiB)."""
    settings = _bf16_fork().model_copy(update={"configurator": "fixed"})
    text, _ = _scrape(settings, None, "dsv4_memory_unexplained_bytes")
    assert _fact(text, "index_k_dtype") == ("bf16", "inferred")
    assert _fact(text, "pricing") == ("fixed", "inferred")
    truth = SimDeployment(settings).true_footprint(0).overcommit_bytes
    assert truth < 0.5 * GIB
    assert sample_value(text, "dsv4_kv_pool_overcommit_bytes", rank="0") == truth


def test_small_budget_stays_assumed(tmp_path):
    """At 20 GiB the fp8 and bf16 pools differ by 1.5 GiB per rank, under the 2 GiB margin:
    the sidecar does not guess; the fact stays assumed (DSV4OvercommitOnAssumption's input)."""
    settings = _bf16_fork().model_copy(update={"available_gib": 20})
    text, api = _scrape(settings, None, "dsv4_memory_unexplained_bytes")
    assert _fact(text, "index_k_dtype") == ("fp8", "assumed")
    assert sample_value(text, "dsv4_index_k_inference_margin_bytes", rank="0") is None
    assert "2147483648" in api["index_k_inference"]["detail"]
    # the unassumed pools leave the difference unexplained, in plain sight
    rest = sample_value(text, "dsv4_memory_unexplained_bytes", rank="0")
    assert rest is not None and rest > 1.5 * GIB


def test_simulated_nvml_is_the_ground_truth_not_the_sidecars_model(tmp_path):
    """Told the wrong dtype (fp8, configured) beside the bf16 fork, the sidecar's NVML still
    shows what the bf16 pools really take: the simulated GPUs follow the simulator, never the
    sidecar's own footprint view, so the gigabytes the model cannot explain stay visible."""
    settings = _bf16_fork()
    text, _ = _scrape(settings, None, "dsv4_memory_unexplained_bytes", {"index_k_dtype": "fp8"})
    truth = SimDeployment(settings)
    spec = truth.gpu_spec()
    assert _fact(text, "index_k_dtype") == ("fp8", "configured")
    for rank in (0, 1):
        used = sample_value(text, "dsv4_gpu_memory_used_bytes", rank=str(rank))
        expected = (
            spec.context_bytes
            + spec.weights_bytes
            + spec.graph_bytes
            + truth.true_footprint(rank).allocated_bytes
        )
        assert used == expected
        rest = sample_value(text, "dsv4_memory_unexplained_bytes", rank=str(rank))
        assert rest is not None and rest > 3.5 * GIB  # bf16 pools the fp8 model cannot explain
