"""The probe installed into released SGLang code (0.5.12 ... 0.5.23), not into stand-ins.

Two parts:

* every public method of every supported release's ``DeepSeekV4TokenToKVPool`` is classified
  (tests/probe/accessors.py; gating read from the source), docs/probe.md carries that table,
  and the probe wraps every index-K read of every release;
* in one subprocess per release (tests/probe/release_child.py, as tests/conformance/ runs),
  the probe is attached before SGLang imports, the release's own configurator sizes a V4-Flash
  deployment at 50 GiB, its own pool is built on the meta device, and its own LayerDoneCounter
  and accessors are driven. The probe must record the configurator's budget and result, measure
  every sub-pool to the byte (equal to the oracle's own tensor walk and to the footprint model's
  prediction for that release), install its hooks, count nothing outside a load, count gated
  reads through the release's gated accessors and ungated ones once the gate is removed.

Releases run in parallel subprocesses, one import each (about 20 s each on an idle core).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from exporter.footprint import PRESETS, DeploymentSettings, allocated_bytes, stage_slice
from exporter.footprint.pricing import counts_for_full_tokens, stored_index_k_dtype
from exporter.footprint.releases import rules_for_version
from exporter.probe.snapshot import INDEX_K_HOOKS
from exporter.probe.targets import POOL_METHODS
from exporter.units import GIB
from tests.conformance.test_release_conformance import _case
from tests.probe import accessors as A
from tests.sglang_release import run_in_release

pytest.importorskip("torch", reason="the conformance extra (pip install -e '.[conformance]')")

REPO = Path(__file__).resolve().parents[2]
LIVE = ("0.5.12", "0.5.16", "0.5.20", "0.5.23")
ESSENTIAL = (
    "index_k_with_scale",
    "index_k_scale",
    "kv_extra",
    "kv_swa_radix",
    "state_attention",
    "state_indexer",
    "load_start",
    "layer_done",
    "consumer",
    "wait",
    "pool_sizes",
    "pool_memory",
)


def _cases(version: str) -> list[dict[str, Any]]:
    """The conformance suite's raw deployment (V4-Flash, 50 GiB, SGLang's defaults), with fp8
    and fp4 index-K; 0.5.12 has no --enable-deepseek-v4-fp4-indexer and stores fp8 for both."""
    fp4 = (
        ["--enable-deepseek-v4-fp4-indexer"]
        if rules_for_version(version).rules.has_fp4_indexer
        else []
    )
    return [
        {**_case("flash", 50 * GIB, argv), "model": "deepseek-v4-flash", "index_k": k}
        for k, argv in (("fp8", []), ("fp4", fp4))
    ]


def _run(version: str) -> list[dict[str, Any]]:
    # without DSV4_PROBE the child attaches the probe itself, before SGLang imports
    return run_in_release(
        "tests.probe.release_child",
        version,
        _cases(version),
        timeout=300,
        drop_env=("DSV4_PROBE",),
    )


@pytest.fixture(scope="module")
def live() -> dict[str, list[dict[str, Any]]]:
    with ThreadPoolExecutor(max_workers=len(LIVE)) as pool:
        return dict(zip(LIVE, pool.map(_run, LIVE), strict=True))


@pytest.fixture(scope="module")
def found() -> dict[str, dict[str, bool]]:
    return A.scan()


# --- the accessor table ----------------------------------------------------------------------
def test_every_accessor_of_every_release_is_classified(found):
    unknown = {f"{v}: {n}" for v, per in found.items() for n in per if n not in A.CATEGORY}
    assert not unknown, f"classify in tests/probe/accessors.py: {sorted(unknown)}"


def test_probe_wraps_every_index_k_read(found):
    wrapped = {m.name for m in POOL_METHODS}
    for version, per in found.items():
        reads = {n for n in per if A.CATEGORY[n] == A.INDEX_K}
        assert reads <= wrapped, f"{version}: index-K reads not wrapped: {reads - wrapped}"
    index_k_hooks = {m.hook for m in POOL_METHODS if A.CATEGORY.get(m.name) == A.INDEX_K}
    assert index_k_hooks == set(INDEX_K_HOOKS)


def test_gated_methods_are_reads_and_setters_never_gated(found):
    for version, per in found.items():
        for name, gated in per.items():
            if gated:
                assert A.CATEGORY[name] in (A.INDEX_K, A.KV, A.STATE), f"{version} {name}"
            if A.CATEGORY[name] == A.SETTER:
                assert not gated, f"{version} {name}"
    # what the table records about the releases, as read: V4.1 index-K readers on 0.5.21+ are
    # gated; get_unified_kv was not gated before 0.5.16
    assert found["0.5.23"]["get_low_ratio_index_k_dequant"]
    assert found["0.5.23"]["get_low_ratio_index_k_fp4"]
    assert not found["0.5.15"]["get_unified_kv"] and found["0.5.16"]["get_unified_kv"]


def test_docs_carry_the_current_table(found):
    text = (REPO / "docs" / "probe.md").read_text()
    assert A.table(found) in text, "regenerate: python -m tests.probe.accessors"


# --- the probe in the released code ------------------------------------------------------------
def _predicted(version: str, case: dict[str, Any], full_tokens: int) -> dict[str, int]:
    geom = PRESETS[case["model"]]
    settings = DeploymentSettings(index_k_dtype=case["index_k"], max_running_requests=256)
    rules = rules_for_version(version).rules
    counts = counts_for_full_tokens(geom, settings, full_tokens, rules)
    return allocated_bytes(geom, stage_slice(geom), settings, counts, rules, include_draft=False)


@pytest.mark.parametrize("version", LIVE)
def test_probe_measures_the_released_pool(live, version):
    for case, got in zip(_cases(version), live[version], strict=True):
        oracle = got["oracle"]
        label = f"sglang {version} {case['index_k']}"
        assert got["errors"] == 0, label
        measured = got["pools"][0]
        assert measured == oracle["pool_tensors"], label
        assert measured == _predicted(version, case, oracle["full_max_total_num_tokens"]), label
        conf = got["configurator"]
        assert conf["available_bytes"] == case["available_bytes"], label
        assert conf["page_size"] == 256
        assert conf["bytes_per_full_token"] == pytest.approx(oracle["bytes_per_full_token"])
        assert conf["sizes"]["full_max_total_num_tokens"] == oracle["full_max_total_num_tokens"]
        assert got["overcommit_bytes"] == sum(measured.values()) - case["available_bytes"]
        # what the release's pool stores (0.5.12 has no fp4 index-K pool: it stores fp8)
        settings = DeploymentSettings(index_k_dtype=case["index_k"])
        stored = stored_index_k_dtype(settings, rules_for_version(version).rules)
        assert got["index_k"] == {"dtype": stored, "layout": "fused"}, label


@pytest.mark.parametrize("version", LIVE)
def test_probe_hooks_and_counts_on_the_released_accessors(live, version, found):
    present = found[version]
    for case, got in zip(_cases(version), live[version], strict=True):
        label = f"sglang {version} {case['index_k']}"
        hooks = got["hooks"]
        assert all(hooks[h] for h in ESSENTIAL), label
        for m in POOL_METHODS:
            assert hooks[m.hook] == (m.name in present), f"{label}: {m.name}"
        d = got["drive"]
        zero = dict.fromkeys(d["before"], 0)
        assert d["before"] == zero and d["after_outside"] == zero, label
        assert d["gated_calls"]["index_k_with_scale"] is True, label
        assert d["gated_calls"]["state_indexer"] is True, label
        g, u = d["after_gated"], d["after_ungated"]
        assert g["loads_started"] == d["n_local"], label
        assert g["index_k_gated"] == d["expected_gated"]["index_k"] >= 1, label
        assert g["kv_gated"] == d["expected_gated"]["kv"] >= 1, label
        assert g["index_k_ungated"] == 0 and g["kv_ungated"] == 0, label
        assert u["index_k_ungated"] == d["expected_ungated"]["index_k"], label
        assert u["kv_ungated"] == d["expected_ungated"]["kv"], label
        assert u["index_k_gated"] == g["index_k_gated"], label


def test_v41_index_k_readers_are_driven_and_counted_on_0_5_23(live):
    fp4 = live["0.5.23"][1]["drive"]
    for hook in ("index_k_low_ratio_dequant", "index_k_low_ratio_fp4"):
        assert fp4["gated_calls"][hook] is True
        assert fp4["ungated_calls"][hook] is True
    assert fp4["expected_ungated"]["index_k"] >= 3


def test_the_simulated_probe_wraps_what_the_real_one_wraps_on_0_5_23(live):
    """exporter/sim/probe_writer.HOOKS says which hooks the real probe installs on 0.5.23;
    the real probe, attached to 0.5.23's own classes, must agree."""
    from exporter.sim.probe_writer import HOOKS

    for got in live["0.5.23"]:
        assert {h for h, on in got["hooks"].items() if on} == set(HOOKS)
