"""The over-commit view: geometry choice (config.json read once at start-up, fallback to
presets), deployment facts from config / SGLang's env / the version rule."""

from __future__ import annotations

import json
from pathlib import Path

from exporter.config import load_settings
from exporter.sources.footprint import FootprintView, configurator_for_version, resolve_facts
from exporter.sources.sglang import parse_server_info

FIX = Path(__file__).parent.parent / "fixtures"
FLASH_FACTS = parse_server_info(json.loads((FIX / "sglang" / "server_info_v0.5.json").read_text()))


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
    facts = parse_server_info({"model_path": "Qwen/Qwen3-235B", "max_total_num_tokens": 1000})
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
    assert dep.configurator == "legacy"  # 0.5.9 < 0.5.12
    dep = resolve_facts(
        load_settings({"index_k_dtype": "fp4", "configurator": "fixed"}), FLASH_FACTS, env
    )
    assert (dep.index_k_dtype, dep.configurator) == ("fp4", "fixed")
    assert configurator_for_version("0.6.0rc1", "0.5.12") == "fixed"
    assert configurator_for_version("nightly", "0.5.12") == "legacy"
