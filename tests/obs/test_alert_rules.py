"""The alert rule file: fresh, valid for promtool, mixin-styled, unit-tested per alert, and its
unit tests sharp enough that moving any threshold by a hair breaks them."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from alerts import config as alert_config
from alerts import generate
from alerts.config import AlertConfig
from alerts.rules import RULE_FILE as RULE_FILE_NAME
from tests.obs.conftest import ALERTS_DIR, RULE_FILE, RULE_TESTS, run_promtool

# The alerts the runbooks and docs promise by name (the meta ones by this repo's choice).
REQUIRED_ALERTS = {
    "DSV4KVPoolOvercommit",
    "DSV4GPUMemoryHeadroomLow",
    "DSV4GPUMemoryFillingUp",
    "DSV4ToolCallCorruptionHigh",
    "DSV4CanaryFailing",
    "DSV4IndexKUngatedReads",
    "DSV4RiskyConfiguration",
    "DSV4SidecarAbsent",
    "DSV4SidecarDown",
    "DSV4NVMLDown",
    "DSV4EngineDown",
    "DSV4ProbeStale",
    "DSV4GPUCountDropped",
    "DSV4DeploymentRiskyConfiguration",
    "DSV4DeploymentOvercommit",
}
DURATION = re.compile(r"^(?:[0-9]+(?:ms|[smhdwy]))+$")


def load_rules(path: Path = RULE_FILE) -> list[dict[str, Any]]:
    return [r for g in yaml.safe_load(path.read_text())["groups"] for r in g["rules"]]


def alerting_rules() -> list[dict[str, Any]]:
    return [r for r in load_rules() if "alert" in r]


def test_rule_file_is_fresh() -> None:
    assert generate.main(["--check"]) == 0, "run `make alerts` and commit"


def test_check_rules(promtool: str) -> None:
    res = run_promtool(promtool, "check", "rules", RULE_FILE)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS" in res.stdout


@pytest.mark.parametrize("rule_test", RULE_TESTS, ids=lambda p: p.name.removesuffix(".yaml"))
def test_promtool_unit_tests(promtool: str, rule_test: Path) -> None:
    """One promtool run per test file: all in one took 50 s of a loaded machine (two files
    evaluate hours of samples, 16 s each), close to the hang guard; each alone is far from it."""
    res = run_promtool(promtool, "test", "rules", rule_test)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.count("SUCCESS") == 1


def test_required_alerts_exist() -> None:
    assert {r["alert"] for r in alerting_rules()} >= REQUIRED_ALERTS


@pytest.mark.parametrize("rule", alerting_rules(), ids=lambda r: f"{r['alert']}-{r['labels']}")
def test_mixin_style(rule: dict[str, Any]) -> None:
    """CamelCase + DSV4 prefix, explicit for:, severity, summary, templated description,
    runbook_url from the one base."""
    name = rule["alert"]
    assert re.fullmatch(r"DSV4[A-Z][A-Za-z0-9]+", name)
    assert DURATION.match(str(rule["for"])), "explicit for: with a Prometheus duration"
    assert rule["labels"]["severity"] in {"critical", "warning", "info"}
    ann = rule["annotations"]
    assert set(ann) == {"summary", "description", "runbook_url"}
    assert ann["summary"].endswith(".") and "{{" not in ann["summary"]
    assert "{{ $labels." in ann["description"] or "{{ $value" in ann["description"]
    assert ann["runbook_url"] == f"{alert_config.DEFAULT_RUNBOOK_BASE_URL}/{name}.md"


def test_variants_differ_by_labels() -> None:
    """Rules sharing a name must differ in their static labels, or their alerts collide."""
    seen: dict[tuple[str, tuple[tuple[str, str], ...]], int] = {}
    for r in alerting_rules():
        key = (r["alert"], tuple(sorted(r["labels"].items())))
        seen[key] = seen.get(key, 0) + 1
    assert all(n == 1 for n in seen.values()), seen


def test_recording_rules_referenced_exist() -> None:
    rules = load_rules()
    recorded = {r["record"] for r in rules if "record" in r}
    for r in rules:
        for name in re.findall(r"\b[a-z_]+:[a-z0-9_]+:[a-z0-9_]+\b", r["expr"]):
            assert name in recorded, f"{name} used but not recorded"
    for name in recorded:
        assert name.count(":") == 2, "level:metric:operations"


def _tests_by_alert() -> dict[str, list[dict[str, Any]]]:
    by: dict[str, list[dict[str, Any]]] = {}
    for path in RULE_TESTS:
        doc = yaml.safe_load(path.read_text())
        for group in doc["tests"]:
            for case in group.get("alert_rule_test", []):
                by.setdefault(case["alertname"], []).append(case)
    return by


@pytest.mark.parametrize("name", sorted({r["alert"] for r in alerting_rules()}))
def test_every_alert_is_unit_tested(name: str) -> None:
    """Each alert has its own test file with silent cases and a firing case per variant."""
    assert (ALERTS_DIR / "tests" / f"{name}.test.yaml").exists()
    cases = _tests_by_alert().get(name, [])
    assert any(not c.get("exp_alerts") for c in cases), "no silent case"
    fired = [a["exp_labels"] for c in cases for a in c.get("exp_alerts") or []]
    for rule in (r for r in alerting_rules() if r["alert"] == name):
        want = rule["labels"]
        assert any(all(f.get(k) == v for k, v in want.items()) for f in fired), (
            f"no firing case for {name} {want}"
        )


def test_rule_tests_pin_group_order() -> None:
    """promtool orders groups randomly unless told: every test file lists all groups."""
    groups = [g["name"] for g in yaml.safe_load(RULE_FILE.read_text())["groups"]]
    for path in RULE_TESTS:
        assert yaml.safe_load(path.read_text()).get("group_eval_order") == groups, path.name


# Each mutation moves one boundary by the smallest step that matters; the committed unit tests
# must notice. (knob overrides, stem of the test file that pins that boundary)
MUTATIONS = [
    ({"kv_overcommit_warning_bytes": 1073741823}, "DSV4KVPoolOvercommit"),
    ({"kv_overcommit_critical_reserve_ratio": 0.999}, "DSV4KVPoolOvercommit"),
    ({"kv_overcommit_for": "4m"}, "DSV4KVPoolOvercommit"),
    ({"gpu_free_warning_bytes": 2147483649}, "DSV4GPUMemoryHeadroomLow"),
    ({"gpu_free_critical_bytes": 536870913}, "DSV4GPUMemoryHeadroomLow"),
    ({"gpu_fill_max_free_ratio": 0.2500001}, "DSV4GPUMemoryFillingUp"),
    ({"gpu_fill_horizon_seconds": 3601}, "DSV4GPUMemoryFillingUp"),
    ({"corruption_warning_ratio": 0.0199}, "DSV4ToolCallCorruptionHigh"),
    ({"corruption_critical_ratio": 0.0999}, "DSV4ToolCallCorruptionHigh"),
    ({"corruption_min_samples": 19}, "DSV4ToolCallCorruptionHigh"),
    ({"corruption_min_samples": 21}, "DSV4ToolCallCorruptionHigh"),
    ({"canary_stale_seconds": 599}, "DSV4CanaryFailing"),
    ({"canary_degenerate_window": "31m"}, "DSV4CanaryFailing"),
    ({"index_k_window": "11m"}, "DSV4IndexKUngatedReads"),
    ({"risky_config_for": "9m"}, "DSV4RiskyConfiguration"),
    ({"sidecar_absent_for": "9m"}, "DSV4SidecarAbsent"),
    ({"sidecar_down_for": "4m"}, "DSV4SidecarDown"),
    ({"source_stale_seconds": 299}, "DSV4NVMLDown"),
    ({"source_stale_seconds": 301}, "DSV4EngineDown"),
    ({"probe_stale_seconds": 299}, "DSV4ProbeStale"),
    ({"gpu_count_for": "2m"}, "DSV4GPUCountDropped"),
    ({"model_drift_bytes": 16777215}, "DSV4FootprintModelDrift"),
    ({"model_drift_for": "14m"}, "DSV4FootprintModelDrift"),
    ({"gpu_count_lookback": "12h10m"}, "DSV4GPUCountDropped.lookback"),
    ({"deployment_risky_config_for": "9m"}, "DSV4DeploymentRiskyConfiguration"),
    ({"deployment_overcommit_for": "9m"}, "DSV4DeploymentOvercommit"),
    ({"kv_overcommit_warning_bytes": 1073741823}, "DSV4DeploymentOvercommit"),
    ({"kv_overcommit_warning_bytes": 1073741825}, "DSV4DeploymentOvercommit"),
    # The same-time baseline: another period no longer lines up with the daily peak.
    ({"length_baseline_period": "23h"}, "DSV4OutputLengthInflation"),
    ({"length_baseline_periods": 6}, "DSV4OutputLengthInflation"),
    # A pod label left out of pod_labels splits deployments into pods: the fleet tests notice.
    ({"pod_labels": "instance"}, "fleet"),
]


@pytest.mark.parametrize(
    ("overrides", "stem"), MUTATIONS, ids=[f"{a}-{next(iter(o))}" for o, a in MUTATIONS]
)
def test_unit_tests_catch_moved_boundaries(
    promtool: str, tmp_path: Path, overrides: dict[str, Any], stem: str
) -> None:
    (tmp_path / "tests").mkdir()
    shutil.copy(ALERTS_DIR / "tests" / f"{stem}.test.yaml", tmp_path / "tests")
    cfg = alert_config.from_mapping(overrides)
    (tmp_path / RULE_FILE_NAME).write_text(generate.render(cfg))
    res = run_promtool(promtool, "test", "rules", tmp_path / "tests" / f"{stem}.test.yaml")
    assert res.returncode != 0, f"{overrides} went unnoticed by {stem}.test.yaml"
    assert "FAILED" in res.stdout + res.stderr


def test_site_override_renders_valid_rules(promtool: str, tmp_path: Path) -> None:
    """A deployer's override file: every knob it sets shows up, and promtool accepts it."""
    site = tmp_path / "site.yaml"
    site.write_text(
        'selector: \'job="sglang-sidecars", cluster="prod"\'\n'
        "corruption_window: 15m\n"
        "corruption_warning_ratio: 0.05\n"
        "kv_overcommit_warning_bytes: 2147483648\n"
        "runbook_base_url: https://wiki.example.com/dsv4\n"
    )
    out = tmp_path / "site.rules.yaml"
    assert generate.main(["--config", str(site), "--out", str(out)]) == 0
    text = out.read_text()
    assert "instance_source:dsv4_dsml_degenerate:ratio15m > 0.05" in text
    assert "ratio30m" not in text
    assert "> 2147483648" in text and "(threshold 2GiB)" in text
    assert 'absent(up{job="sglang-sidecars", cluster="prod"})' in text
    assert "https://wiki.example.com/dsv4/DSV4SidecarDown.md" in text
    assert "corruption_window: 15m  (overridden)" in text
    rules = load_rules(out)
    for r in rules:
        for sel in re.findall(r"\b(?:dsv4_[a-z0-9_]+|up)\{[^}]*\}", r["expr"]):
            assert 'cluster="prod"' in sel, sel
    res = run_promtool(promtool, "check", "rules", out)
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.parametrize(
    ("overrides", "error"),
    [
        ({"corruption_treshold": 0.1}, KeyError),
        ({"corruption_min_samples": "20"}, TypeError),
        ({"corruption_min_samples": True}, TypeError),
        ({"gpu_fill_lookback": "30 minutes"}, ValueError),
        ({"index_k_for": "1.5m"}, ValueError),
        ({"gpu_free_critical_bytes": 3 * 1024**3}, ValueError),
        ({"corruption_critical_ratio": 0.01}, ValueError),
        ({"gpu_fill_max_free_ratio": 0}, ValueError),
        ({"canary_stale_seconds": -1}, ValueError),
        ({"runbook_base_url": "https://x/"}, ValueError),
        ({"pod_labels": "instance pod"}, ValueError),
        ({"pod_labels": ""}, ValueError),
        ({"length_baseline_period": "1 day"}, ValueError),
        ({"length_baseline_periods": 0}, ValueError),
        ({"length_baseline_periods": 29}, ValueError),
    ],
)
def test_bad_overrides_rejected(overrides: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        alert_config.from_mapping(overrides)


def test_cli_reports_bad_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("nope: 1\n")
    assert generate.main(["--config", str(bad), "--out", str(tmp_path / "x.yaml")]) == 2
    assert "unknown alert config keys: nope" in capsys.readouterr().err


def test_check_detects_stale_output(tmp_path: Path) -> None:
    out = tmp_path / "rules.yaml"
    out.write_text(generate.render(AlertConfig()).replace("> 600", "> 601"))
    assert generate.main(["--check", "--out", str(out)]) == 1
    out.write_text(generate.render(AlertConfig()))
    assert generate.main(["--check", "--out", str(out)]) == 0


def test_int_accepted_for_float_knob() -> None:
    assert (
        alert_config.from_mapping({"corruption_critical_ratio": 1}).corruption_critical_ratio == 1.0
    )


def test_readme_documents_every_knob() -> None:
    readme = (ALERTS_DIR / "README.md").read_text()
    for name in vars(AlertConfig()):
        assert f"| `{name}` |" in readme
