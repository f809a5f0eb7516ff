"""The over-commit view: geometry choice (config.json read once at start-up, fallback to
presets), deployment facts from config / SGLang's env, the release's rules from the version in
/server_info (unverified when newer than any known), switches that are not modelled, and the
under-commit (reclaimable) side."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from exporter.config_loader import load_settings
from exporter.footprint import (
    NOT_MODELLED_SWITCHES,
    PRESETS,
    DeploymentSettings,
    plan_for_budget,
    rules_for_version,
)
from exporter.footprint.facts import resolve_facts
from exporter.sources.footprint import FootprintView
from exporter.sources.sglang import parse_server_info
from exporter.units import GIB

FIX = Path(__file__).parent.parent / "fixtures"
# The recorded /server_info comes from 0.5.9 (no DSV4 pools); the layout is the same in the
# DSV4 releases, so the tests give it their version.
RECORDED = parse_server_info(json.loads((FIX / "sglang" / "server_info_v0.5.json").read_text()))
FLASH_FACTS = replace(RECORDED, version="0.5.20")


def _samples(view: FootprintView) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in view.collect():
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def test_config_json_wins_over_the_served_name(monkeypatch):
    view = FootprintView(
        load_settings({"model_config_path": str(FIX / "deepseek-v4-pro.config.json")}), env={}
    )
    monkeypatch.setattr(
        "exporter.sources.footprint.load_config_json",
        lambda _p: (_ for _ in ()).throw(AssertionError("read again")),
    )
    view.refresh(FLASH_FACTS, {}, {})  # served name says Flash; the file says Pro
    assert view.status == "ok" and view.geometry.num_hidden_layers == 61
    assert view.geometry_source.startswith("config.json")


def test_unreadable_config_falls_back_to_the_preset(tmp_path):
    view = FootprintView(
        load_settings({"model_config_path": str(tmp_path / "absent.json")}), env={}
    )
    view.refresh(FLASH_FACTS, {}, {})
    assert view.status == "ok" and view.geometry.name == "deepseek-v4-flash"
    assert view.geometry_source.startswith("preset deepseek-v4-flash")


def test_unknown_model_is_reported_not_guessed():
    facts = parse_server_info(
        {"model_path": "Qwen/Qwen3-235B", "max_total_num_tokens": 1000, "version": "0.5.23"}
    )
    view = FootprintView(load_settings({}), env={})
    view.refresh(facts, {}, {})
    assert view.status == "unknown_model" and not view.ranks
    assert view.health.errors == {"unknown_model": 1}
    view.refresh(facts, {}, {})  # one error per transition, not per recomputation
    assert view.health.errors == {"unknown_model": 1}


def test_deployment_facts_sources():
    cfg = load_settings({})
    env = {"SGLANG_DSV4_BF16_INDEX_K": "1", "SGLANG_DSV4_COMPRESS_STATE_DTYPE": "bf16"}
    dep = resolve_facts(cfg, FLASH_FACTS, env)
    assert (dep.index_k_dtype, dep.compress_state_dtype) == ("bf16", "bfloat16")
    assert dep.sources["index_k_dtype"] == "env SGLANG_DSV4_BF16_INDEX_K"
    # Upstream prices index-K as fp8 in every release: auto is legacy, whatever the version.
    assert dep.configurator == "legacy"
    assert dep.sources["configurator"].startswith("auto")
    dep = resolve_facts(
        load_settings({"index_k_dtype": "fp4", "configurator": "fixed"}), FLASH_FACTS, env
    )
    assert (dep.index_k_dtype, dep.configurator) == ("fp4", "fixed")


@pytest.mark.parametrize(
    ("version", "rules", "tokens"),
    [("0.5.20", "0.5.15-0.5.20", 6_614_784), ("0.5.23", "0.5.23", 7_192_320)],
)
def test_rules_follow_the_version_in_server_info(version, rules, tokens):
    """SGLang's own token count at 50 GiB on each release, priced by that release's rules:
    the plan comes back to the same budget and the rules are named."""
    facts = replace(FLASH_FACTS, version=version, max_total_num_tokens=tokens)
    view = FootprintView(load_settings({"index_k_dtype": "fp8"}), env={})
    view.refresh(facts, {}, {})
    assert view.status == "ok"
    fp = view.ranks[0].footprint
    assert fp.rules.name == rules
    assert 50 * GIB - fp.planned_bytes < 256 * fp.bytes_per_full_token["legacy"]
    samples = _samples(view)
    assert samples["dsv4_footprint_rules_unverified"] == [
        ({"sglang_version": version, "rules": rules}, 0.0)
    ]
    assert not any(v for _, v in samples["dsv4_footprint_not_modelled"])
    assert view.as_json()["rules_verified"] is True


def test_newer_version_is_computed_with_newest_rules_and_flagged():
    view = FootprintView(load_settings({}), env={})
    view.refresh(replace(FLASH_FACTS, version="0.6.1"), {}, {})
    assert view.status == "ok"
    assert view.ranks[0].footprint.rules.name == "0.5.23"
    samples = _samples(view)
    assert samples["dsv4_footprint_rules_unverified"] == [
        ({"sglang_version": "0.6.1", "rules": "0.5.23"}, 1.0)
    ]
    body = view.as_json()
    assert body["rules_verified"] is False and "UNVERIFIED" in body["rules_note"]


def test_release_without_dsv4_pools_exports_no_footprint():
    view = FootprintView(load_settings({}), env={})
    view.refresh(RECORDED, {}, {})  # 0.5.9
    assert view.status == "unsupported_version" and not view.ranks
    assert "0.5.12" in view.detail
    samples = _samples(view)
    assert samples["dsv4_footprint_up"] == [({"reason": "unsupported_version"}, 0.0)]
    assert "dsv4_kv_pool_allocated_bytes" not in samples


def test_not_modelled_switch_exports_no_number():
    view = FootprintView(load_settings({}), env={"SGLANG_DSV4_UNIFIED_KV_TRITON": "1"})
    view.refresh(replace(FLASH_FACTS, speculative_algorithm="DSPARK"), {}, {})
    assert view.status == "not_modelled" and not view.ranks
    assert "dspark-draft" in view.detail and "unified-kv" in view.detail
    samples = _samples(view)
    in_use = sorted(lbl["switch"] for lbl, v in samples["dsv4_footprint_not_modelled"] if v)
    assert in_use == ["dspark-draft", "unified-kv"]
    assert len(samples["dsv4_footprint_not_modelled"]) == len(NOT_MODELLED_SWITCHES)
    assert "dsv4_kv_pool_planned_bytes" not in samples


def test_v41_geometry_gets_numbers_in_swa_cap_mode():
    """/server_info cannot say whether the SWA ratio was given: V4.1 reads as SWA cap mode
    (0.5.21+), whose SWA pool is sized from the server args /server_info does show."""
    path = FIX / "deepseek-v41-shaped.config.json"
    view = FootprintView(load_settings({"model_config_path": str(path)}), env={})
    facts = replace(
        FLASH_FACTS,
        version="0.5.23",
        max_running_requests=10,
        chunked_prefill_size=4096,
        swa_prefix_tails=3,
    )
    view.refresh(facts, {}, {})
    assert view.geometry.kv_source_layer_ids == (0, 1)
    assert view.status == "ok" and view.ranks, view.detail
    fp = view.ranks[0].footprint
    # window 128, page 256: (128 + 128 + 256 + 256) * 10 + 2 * 4096 + 256 + 3 * (128 + 256).
    want = -(-((128 + 128 + 256 + 256) * 10 + 2 * 4096 + 256 + 3 * 384) // 256) * 256
    assert fp.swa_cap_tokens == want == fp.pools["swa_kv"].tokens
    # the cap-mode reading is exported as an assumption, not taken silently
    assert view.deployment is not None
    assert view.deployment.facts["swa_sizing"] == ("cap_mode", "assumed")
    samples = _samples(view)
    assert not any(v for _, v in samples["dsv4_footprint_not_modelled"])
    # With speculative decoding the cap's per-request term is not modelled: no number.
    view.refresh(replace(facts, speculative=True, speculative_algorithm="EAGLE"), {}, {})
    assert view.status == "not_modelled" and "swa-cap-mode" in view.detail


def test_fp4_on_nvidia_is_reclaimable_capacity():
    """Upstream 0.5.23 budgets fp4 index-K as fp8: the pool never takes ~2.4 GB per rank."""
    plan = plan_for_budget(
        PRESETS["deepseek-v4-flash"],
        DeploymentSettings(index_k_dtype="fp4"),
        "legacy",
        50 * GIB,
        rules=rules_for_version("0.5.23"),
    )
    facts = replace(
        FLASH_FACTS, version="0.5.23", fp4_indexer=True, max_total_num_tokens=plan.full_tokens
    )
    view = FootprintView(load_settings({}), env={})
    view.refresh(facts, {}, {})
    fp = view.ranks[0].footprint
    assert fp.settings.index_k_dtype == "fp4"
    assert 2.2e9 < fp.reclaimable_bytes < 2.6e9
    samples = _samples(view)
    reclaim = dict((lbl["rank"], v) for lbl, v in samples["dsv4_kv_pool_reclaimable_bytes"])
    assert reclaim["0"] == pytest.approx(fp.reclaimable_bytes)
    assert len(reclaim) == FLASH_FACTS.tp_size


def test_server_info_carries_the_cap_mode_server_args():
    """chunked_prefill_size / swa_prefix_tails / radix / overlap come from /server_info;
    absent, they are None / False and the footprint assumes SGLang's defaults."""
    raw = json.loads((FIX / "sglang" / "server_info_v0.5.json").read_text())
    raw.update(
        chunked_prefill_size=16384,
        swa_prefix_tails=12,
        disable_radix_cache=True,
        disable_overlap_schedule=True,
    )
    facts = parse_server_info(raw)
    assert (facts.chunked_prefill_size, facts.swa_prefix_tails) == (16384, 12)
    assert facts.disable_radix_cache and facts.disable_overlap_schedule
    for key in ("chunked_prefill_size", "swa_prefix_tails"):
        raw.pop(key)
    assert parse_server_info(raw).swa_prefix_tails is None


@pytest.mark.parametrize(
    ("version", "want"),
    [("0.5.20", ("ratio", "configured")), ("0.5.23", ("ratio", "assumed"))],
)
def test_swa_sizing_fact_says_whether_the_ratio_is_read_or_assumed(version, want):
    """Before 0.5.21 the ratio is all there is; from 0.5.21 a V4 deployment might run SWA cap
    mode (no --swa-full-tokens-ratio given) and /server_info cannot tell: assumed."""
    view = FootprintView(load_settings({}), env={})
    view.refresh(replace(FLASH_FACTS, version=version), {}, {})
    assert view.status == "ok", view.detail
    assert view.deployment is not None and view.deployment.facts["swa_sizing"] == want
    assert ("swa_sizing", want[0], want[1]) in {
        (lab["fact"], lab["value"], lab["source"])
        for lab, _ in _samples(view)["dsv4_deployment_fact_info"]
    }


def test_dp_attention_divides_server_infos_global_max_running_requests():
    """/server_info reports SGLang's global --max-running-requests; with DP attention each
    worker's pools are sized for its share (launch.resolve, as `plan --` resolves it): the
    c128 state the view prices is that of 1000 // 4 requests, not of 1000."""
    raw = json.loads((FIX / "sglang" / "server_info_v0.5.json").read_text())
    raw.update(
        version="0.5.23",
        max_running_requests=1000,
        dp_size=4,
        tp_size=8,
        enable_dp_attention=True,
        max_total_num_tokens=7_201_280,
    )
    view = FootprintView(load_settings({"index_k_dtype": "fp8"}), env={})
    view.refresh(parse_server_info(raw), {}, {})
    assert view.status == "ok", view.detail
    fp = view.ranks[0].footprint
    assert fp.settings.max_running_requests == 250
    without_dp = replace(fp.settings, max_running_requests=1000)
    assert (
        fp.c128_state_fixed_bytes
        < plan_for_budget(
            PRESETS["deepseek-v4-flash"], without_dp, "legacy", 50 * GIB
        ).c128_state_fixed_bytes
    )


def test_more_ranks_than_gpus_nvml_sees_is_bad_config_not_believed():
    """/server_info's rank count is cross-checked with NVML (issue 24): tp_size 8 on a node
    whose NVML sees 2 GPUs is a wrong --nnodes or a hostile answer, never 8 ranks priced."""
    view = FootprintView(load_settings({}), env={})
    facts = replace(FLASH_FACTS, tp_size=8, pp_size=1, nnodes=1)
    view.refresh(facts, {0: 80 * GIB, 1: 80 * GIB}, {})
    assert view.status == "bad_config" and not view.ranks
    assert "NVML sees 2 GPUs" in view.detail
    view.refresh(facts, {r: 80 * GIB for r in range(8)}, {})
    assert view.status == "ok" and len(view.ranks) == 8
