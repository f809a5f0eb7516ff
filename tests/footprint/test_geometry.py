"""Geometry from config.json, presets, PP slicing, and errors that name the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from exporter.footprint import (
    PRESETS,
    GeometryError,
    geometry_from_config,
    load_config_json,
    parse_pp_partition,
    pp_partition,
    preset_for_served_name,
    resolve_model,
    stage_slice,
)

FIXTURES = Path(__file__).parent.parent / "fixtures"


@pytest.mark.parametrize("name", ["deepseek-v4-flash", "deepseek-v4-pro"])
def test_config_fixture_matches_preset(name):
    g = load_config_json(FIXTURES / f"{name}.config.json")
    p = PRESETS[name]
    for field in (
        "num_hidden_layers",
        "head_dim",
        "qk_rope_head_dim",
        "sliding_window",
        "index_head_dim",
        "index_n_heads",
        "index_topk",
        "num_nextn_predict_layers",
        "compress_ratios",
    ):
        assert getattr(g, field) == getattr(p, field), field
    assert g.qk_nope_head_dim == 448


def test_model_directory_is_accepted(tmp_path):
    (tmp_path / "config.json").write_text((FIXTURES / "deepseek-v4-flash.config.json").read_text())
    assert load_config_json(tmp_path).num_hidden_layers == 43
    assert resolve_model(str(tmp_path)).num_hidden_layers == 43


def _cfg(**over):
    cfg = json.loads((FIXTURES / "deepseek-v4-flash.config.json").read_text())
    cfg.update(over)
    return cfg


@pytest.mark.parametrize(
    ("over", "field"),
    [
        ({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}, "model_type"),
        ({"index_head_dim": None}, "index_head_dim"),
        ({"head_dim": "512"}, "head_dim"),
        ({"compress_ratios": [0, 4, 7]}, "compress_ratios"),
        ({"compress_ratios": [4] * 10}, "compress_ratios"),
        ({"sliding_window": 0}, "sliding_window"),
        ({"qk_rope_head_dim": 600}, "qk_rope_head_dim"),
    ],
)
def test_bad_config_names_the_field(over, field):
    with pytest.raises(GeometryError, match=field):
        geometry_from_config(_cfg(**over))


def test_missing_field_named():
    cfg = _cfg()
    del cfg["compress_ratios"]
    with pytest.raises(GeometryError, match="compress_ratios"):
        geometry_from_config(cfg)


def test_unreadable_and_invalid_json(tmp_path):
    with pytest.raises(GeometryError, match="cannot read"):
        load_config_json(tmp_path / "nope.json")
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(GeometryError, match="not valid JSON"):
        load_config_json(bad)


def test_unknown_preset():
    with pytest.raises(GeometryError, match="preset"):
        resolve_model("deepseek-v5")


def test_served_name_matching():
    assert preset_for_served_name("deepseek-ai/DeepSeek-V4-Flash-0731").name == "deepseek-v4-flash"
    assert preset_for_served_name("DeepSeek-V4-Pro").name == "deepseek-v4-pro"
    assert preset_for_served_name("Qwen3-235B") is None


@pytest.mark.parametrize(
    ("served", "preset"),
    [
        # The cookbook's quantised Flash: "pro" in "sgl-project" once made it V4-Pro.
        ("sgl-project/DeepSeek-V4-Flash-FP8", "deepseek-v4-flash"),
        ("/models/deepseek_v4_flash/", "deepseek-v4-flash"),
        ("deepseek-ai/DeepSeek-V4-Pro", "deepseek-v4-pro"),
        ("/home/prod/DeepSeek-V4-Flash", "deepseek-v4-flash"),
        # A substring of a checkpoint name, or a checkpoint name inside another, is no match.
        ("/home/prod/my-v4-model", None),
        ("my-proxy/DeepSeek-V4-Flash-distilled", None),
        ("DeepSeek-V4-Pro-Flash", None),
    ],
)
def test_served_name_is_matched_exactly_never_by_substring(served: str, preset: str | None):
    geom = preset_for_served_name(served)
    assert (geom.name if geom else None) == preset


@pytest.mark.parametrize("layers", [1, 16, 43, 61])
@pytest.mark.parametrize("pp", [1, 2, 3, 4, 5, 8])
def test_pp_partition_gives_the_remainder_to_the_last_stages(layers: int, pp: int) -> None:
    """get_pp_indices' shape (tests/conformance checks the split against each release's own
    function): every layer once, shares differ by at most one, the larger ones last."""
    if pp > layers:
        with pytest.raises(GeometryError, match="exceeds"):
            pp_partition(layers, pp)
        return
    parts = pp_partition(layers, pp)
    assert sum(parts) == layers and len(parts) == pp
    assert parts == sorted(parts) and max(parts) - min(parts) <= 1


def test_pp_partition_env_override_is_checked_as_sglang_checks_it():
    assert pp_partition(43, 3, (10, 20, 13)) == [10, 20, 13]
    assert parse_pp_partition("10,20,13") == (10, 20, 13)
    with pytest.raises(GeometryError, match="pp_size is 2"):
        pp_partition(43, 2, (10, 20, 13))
    with pytest.raises(GeometryError, match="sums to 42"):
        pp_partition(43, 3, (10, 20, 12))
    with pytest.raises(GeometryError, match="Invalid partition string"):
        parse_pp_partition("10;20")
    with pytest.raises(GeometryError):
        pp_partition(43, 0)


def test_stage_slice_and_draft_on_last_stage():
    g = PRESETS["deepseek-v4-flash"]
    first, last = stage_slice(g, 2, 0), stage_slice(g, 2, 1)
    assert (first.start, first.end, last.start, last.end) == (0, 21, 21, 43)
    assert first.draft.total == 0 and last.draft.total == 1
    assert stage_slice(g, layer_range=(2, 10)).main.total == 8
    with pytest.raises(GeometryError):
        stage_slice(g, layer_range=(10, 50))
    with pytest.raises(GeometryError):
        stage_slice(g, 2, 2)
