"""Version -> rule set: boundaries read from the released wheels, suffixes, unverified, errors."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from exporter.footprint import (
    NEWEST_RELEASE,
    PRESETS,
    RULES,
    DeploymentSettings,
    GeometryError,
    VersionError,
    geometry_from_config,
    not_modelled,
    plan_for_budget,
    rules_for_version,
)
from exporter.footprint.releases import (
    FIRST_RELEASE,
    PUBLISHED_RELEASES,
    parse_release,
    release_name,
)
from exporter.units import GIB


def _spellings(release: tuple[int, int, int]) -> list[str]:
    """How a release is written in the wild: post releases, candidates, local and v-prefixed."""
    name = release_name(release)
    return [name, f"{name}.post1", f"{name}rc2", f"{name}+sim", f"v{name}"]


@pytest.mark.parametrize(
    ("version", "rules"),
    [
        (version, rules.name)
        for rules in RULES
        for release in dict.fromkeys((rules.first, rules.last))
        for version in _spellings(release)
    ],
)
def test_each_release_has_its_rules(version, rules):
    choice = rules_for_version(version)
    assert choice.rules.name == rules and choice.verified


def test_rule_sets_follow_each_other_without_gaps():
    for older, newer in itertools.pairwise(RULES):
        major, minor, patch = older.last
        assert newer.first == (major, minor, patch + 1), (older.name, newer.name)


def test_the_published_releases_are_the_table_s():
    """Every published release gets proven rules, every rule set covers a published release,
    and the newest published release is the newest the rules know (what `plan` defaults to)."""
    assert all(rules_for_version(v).verified for v in PUBLISHED_RELEASES)
    for rules in RULES:
        assert any(rules.covers(parse_release(v)) for v in PUBLISHED_RELEASES), rules.name
    assert parse_release(PUBLISHED_RELEASES[-1]) == parse_release(NEWEST_RELEASE)
    assert parse_release(PUBLISHED_RELEASES[0]) == parse_release(FIRST_RELEASE)


def test_default_is_the_newest_release():
    choice = rules_for_version(None)
    assert (choice.version, choice.rules, choice.verified) == (NEWEST_RELEASE, RULES[-1], True)


_MAJOR, _MINOR, _PATCH = RULES[-1].last


@pytest.mark.parametrize(
    "version",
    [f"{_MAJOR}.{_MINOR}.{_PATCH + 1}", f"{_MAJOR}.{_MINOR + 1}.0rc1", f"{_MAJOR + 1}.0.0"],
)
def test_newer_is_newest_rules_unverified(version):
    choice = rules_for_version(version)
    assert choice.rules is RULES[-1] and not choice.verified
    assert "UNVERIFIED" in choice.note and version in choice.note


_FIRST = RULES[0].first


@pytest.mark.parametrize(
    ("version", "fragment"),
    [(f"{_FIRST[0]}.{_FIRST[1]}.{_FIRST[2] - 1}", FIRST_RELEASE), ("nightly", "X.Y.Z")],
)
def test_unsupported_versions_say_why(version, fragment):
    with pytest.raises(VersionError, match=fragment.replace(".", r"\.")):
        rules_for_version(version)


def test_releases_differ_where_the_code_does():
    """V4-Flash fp8 at 50 GiB: the figures each release's own configurator gives
    (tests/conformance runs the real code)."""
    flash = PRESETS["deepseek-v4-flash"]
    tokens = {
        v: plan_for_budget(
            flash,
            DeploymentSettings(index_k_dtype="fp8"),
            "legacy",
            50 * GIB,
            rules=rules_for_version(v),
        ).full_tokens
        for v in ("0.5.12", "0.5.20", "0.5.23")
    }
    assert tokens == {"0.5.12": 3_364_608, "0.5.20": 6_614_784, "0.5.23": 7_192_320}
    pro = PRESETS["deepseek-v4-pro"]
    pro_tokens = plan_for_budget(
        pro,
        DeploymentSettings(index_k_dtype="fp8"),
        "legacy",
        50 * GIB,
        rules=rules_for_version("0.5.23"),
    ).full_tokens
    assert pro_tokens == 4_891_136


V41_CONFIG = Path(__file__).parent.parent / "fixtures" / "deepseek-v41-shaped.config.json"


def _v41(**over):
    """A V4.1-shaped config (text_config nesting, ratios 1/2, source layers), small on purpose."""
    cfg = json.loads(V41_CONFIG.read_text())
    cfg["text_config"].update(over)
    return cfg


def test_v41_config_reads_text_config_and_source_layers():
    g = geometry_from_config(_v41())
    assert g.model_type == "deepseek_v41" and g.num_hidden_layers == 4
    assert g.compress_ratios == (1, 2, 4, 128, 0)
    assert (g.kv_source_layer_ids, g.index_source_layer_ids) == ((0, 1), (0,))
    assert g.is_v41
    v23, v20 = rules_for_version("0.5.23"), rules_for_version("0.5.20")
    assert not_modelled(g, DeploymentSettings(), v23) == ()
    # SWA cap mode is modelled (0.5.21+); with speculative decoding it is not.
    assert not_modelled(g, DeploymentSettings(swa_ratio_explicit=False), v23) == ()
    cap_spec = DeploymentSettings(swa_ratio_explicit=False, speculative=True)
    assert not_modelled(g, cap_spec, v23) == ("swa-cap-mode",)
    # SGLang refuses V4.1 with EAGLE (0.5.21+) and V4.1 at all before 0.5.21: refusals, not
    # unmodelled switches (tests/footprint/test_refusals.py).
    assert not_modelled(g, DeploymentSettings(speculative=True), v20) == ()


def test_v41_top_level_keys_win_over_text_config():
    cfg = _v41()
    cfg["sliding_window"] = 256
    assert geometry_from_config(cfg).sliding_window == 256


def test_ratio_1_is_still_rejected_for_v4():
    cfg = {
        "model_type": "deepseek_v4",
        **{k: v for k, v in _v41()["text_config"].items() if "source" not in k},
    }
    with pytest.raises(GeometryError, match="compress_ratios"):
        geometry_from_config(cfg)


def test_v41_bad_source_layers_name_the_field():
    with pytest.raises(GeometryError, match="kv_source_layer_ids"):
        geometry_from_config(_v41(kv_source_layer_ids=["a"]))


def test_v4_presets_are_modelled():
    flash = PRESETS["deepseek-v4-flash"]
    assert not flash.is_v41
    settings = DeploymentSettings(swa_ratio_explicit=False, speculative=True)
    assert not_modelled(flash, settings, rules_for_version("0.5.12")) == ()
    assert not_modelled(flash, settings, rules_for_version("0.5.21")) == ("swa-cap-mode",)


def test_v41_plan_through_the_cli(capsys):
    """V4.1 with an explicit SWA ratio is priced (low-ratio pools named); left unset it is SWA
    cap mode (0.5.21+), priced from the request cap; with EAGLE, refused as SGLang refuses it
    (validate_deepseek_v41_features), not left "not modelled" (issue 33)."""
    from exporter.cli import main

    assert (
        main(["plan", "--json", "--model", str(V41_CONFIG), "--swa-full-tokens-ratio", "0.1"]) == 0
    )
    d = json.loads(capsys.readouterr().out)
    assert {"c1_kv", "c1_index_k", "c2_kv", "c2_index_k", "c2_state"} <= set(d["pools"])
    assert d["pools"]["c2_state"]["planned_bytes"] == d["pools"]["c2_state"]["allocated_bytes"]
    argv = ["plan", "--json", "--model", str(V41_CONFIG), "--max-running-requests", "10"]
    assert main([*argv, "--swa-prefix-tails", "3"]) == 0
    d = json.loads(capsys.readouterr().out)
    # window 128 (fixture), page 256: (128+128+256+256)*10 + 2*8192 + 256, + 3*(128+256).
    want = -(-((128 + 128 + 256 + 256) * 10 + 2 * 8192 + 256 + 3 * 384) // 256) * 256
    assert d["swa_cap_tokens"] == want == d["pools"]["swa_kv"]["tokens"]
    assert main(["plan", "--model", str(V41_CONFIG), "--speculative"]) == 4
    assert "validate_deepseek_v41_features" in capsys.readouterr().err
