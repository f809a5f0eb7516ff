"""docker/mixin/mixin.libsonnet, evaluated with a real jsonnet (Debian's, installed by
`make deb-test`): with its default _config it is exactly the committed rule file (recording
groups in prometheusRules, alert groups in prometheusAlerts) and the committed dashboards; with
knobs overridden in jsonnet it is exactly what `alerts.generate --config` renders for them."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from alerts import config as alert_config
from alerts.rules import build
from tests.deploy.conftest import DOCKER, REPO, run
from tests.support import require

MIXIN = DOCKER / "mixin" / "mixin.libsonnet"
RULE_FILE = REPO / "alerts" / "dsv4-sidecar.rules.yaml"


@pytest.fixture(scope="module")
def jsonnet() -> str:
    return require("jsonnet")


def _evaluate(jsonnet: str, tmp_path: Path, config: dict | None = None) -> dict:
    """The mixin's four fields as JSON, with ``config`` merged into its _config."""
    main = tmp_path / "main.jsonnet"
    override = f"{{ _config+:: {json.dumps(config or {})} }}"
    main.write_text(
        f"local mixin = (import {json.dumps(str(MIXIN))}) + {override};\n"
        "{ config: mixin._config, alerts: mixin.prometheusAlerts, "
        "rules: mixin.prometheusRules, dashboards: mixin.grafanaDashboards }\n",
        encoding="utf-8",
    )
    res = run([jsonnet, str(main)])
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def _groups(out: dict) -> dict[str, dict]:
    return {g["name"]: g for g in out["rules"]["groups"] + out["alerts"]["groups"]}


def test_fresh():
    gen = _load_generator()
    assert MIXIN.read_text(encoding="utf-8") == gen.render(), "run `make mixin` and commit"


def _load_generator():
    import importlib.util

    spec = importlib.util.spec_from_file_location("dsv4_mixin", DOCKER / "mixin" / "generate.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_defaults_are_the_committed_rules_and_dashboards(jsonnet, tmp_path):
    out = _evaluate(jsonnet, tmp_path)
    committed = yaml.safe_load(RULE_FILE.read_text(encoding="utf-8"))["groups"]
    assert _groups(out) == {g["name"]: g for g in committed}
    assert all(all("record" in r for r in g["rules"]) for g in out["rules"]["groups"])
    assert all(all("alert" in r for r in g["rules"]) for g in out["alerts"]["groups"])
    dashboards = sorted((REPO / "dashboards").glob("*.json"))
    assert sorted(out["dashboards"]) == [p.name for p in dashboards]
    for p in dashboards:
        assert out["dashboards"][p.name] == json.loads(p.read_text(encoding="utf-8")), p.name
    assert out["config"]["selector"] == alert_config.AlertConfig().selector


def test_overrides_match_the_generator(jsonnet, tmp_path):
    """A site's knobs, set in jsonnet, give the rules alerts.generate renders for the same."""
    site = {
        "selector": 'job="sglang-sidecar", cluster="eu-1"',
        "kv_overcommit_for": "7m",
        "corruption_window": "45m",
        "length_inflation_factor": 2.25,
        "pod_labels": "instance, pod, node",
        "corruption_min_samples": 50,
    }
    out = _evaluate(jsonnet, tmp_path, site)
    expected = build(dataclasses.replace(alert_config.AlertConfig(), **site))["groups"]
    assert _groups(out) == {g["name"]: g for g in expected}
    exprs = [r["expr"] for g in out["alerts"]["groups"] for r in g["rules"]]
    assert any('cluster="eu-1"' in e for e in exprs)


def test_every_fixed_knob_is_named_in_the_header():
    """Knobs the mixin cannot take (their value reaches the rules transformed) are listed."""
    gen = _load_generator()
    exposed = set(gen.verbatim_knobs())
    header = MIXIN.read_text(encoding="utf-8").split("{", 1)[0]
    for f in dataclasses.fields(alert_config.AlertConfig):
        assert (f.name in exposed) != (f.name in header), f.name
    assert {"selector", "corruption_window", "length_inflation_factor"} <= exposed
