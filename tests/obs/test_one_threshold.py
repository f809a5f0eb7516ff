"""One alert threshold, defined once (exporter/thresholds.py), moves everything that states it.

Changing a knob re-renders the rule expression, the runbook's numbers and the promtool tests'
boundary values together, and triage's verdict follows the same knob: rendered into a temp
tree with ``alerts.generate --tree``, the re-rendered rules and tests pass promtool, while the
committed (default) tests fail against the moved rules (so the tests really moved with it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from alerts import generate, values
from alerts.rules import RULE_FILE
from exporter import generated
from exporter.oncall.triage.diagnosis import OVERCOMMIT, RULED_OUT, SUPPORTED, diagnose
from exporter.oncall.triage.evidence import Evidence, RankMemory
from exporter.thresholds import DEFAULTS, AlertConfig, from_mapping
from exporter.units import GIB
from tests.obs.conftest import ALERTS_DIR, REPO, run_promtool


def _tree(tmp: Path, cfg: AlertConfig) -> Path:
    generated.write(generate.render_tree(cfg, tmp))
    return tmp


def _alert_exprs(root: Path, name: str) -> list[str]:
    doc = yaml.safe_load((root / "alerts" / RULE_FILE).read_text())
    return [r["expr"] for g in doc["groups"] for r in g["rules"] if r.get("alert") == name]


def _over(bytes_: float) -> Evidence:
    ev = Evidence()
    ev.ranks = [RankMemory("0", bytes_, 16.8 * GIB, 12 * GIB, 140 * GIB, 11 * GIB)]
    return ev


def test_overcommit_threshold_moves_rules_triage_runbook_and_tests(
    promtool: str, tmp_path: Path
) -> None:
    cfg = from_mapping({"kv_overcommit_warning_bytes": 2 * GIB})
    root = _tree(tmp_path, cfg)

    # the rules
    exprs = _alert_exprs(root, "DSV4KVPoolOvercommit") + _alert_exprs(
        root, "DSV4DeploymentOvercommit"
    )
    assert any(e.endswith("> 2147483648") for e in exprs), exprs
    assert not any("1073741824" in e for e in exprs)

    # triage: 1.5 GiB over the plan is over the default threshold, under the moved one
    ev = _over(1.5 * GIB)
    assert diagnose(ev).cause(OVERCOMMIT).status == SUPPORTED
    moved = diagnose(ev, cfg).cause(OVERCOMMIT)
    assert moved.status == RULED_OUT and "2.00 GiB" in moved.rule_text

    # the runbook
    runbook = (root / "docs/runbooks/DSV4KVPoolOvercommit.md").read_text()
    assert "`kv_overcommit_warning_bytes` (default 2 GiB)" in runbook
    assert "(default 1 GiB)" not in runbook

    # the promtool tests: boundary values follow, and the pair passes
    tests = [root / "alerts/tests" / f"{s}.test.yaml" for s in ("DSV4KVPoolOvercommit",)]
    tests.append(root / "alerts/tests/DSV4DeploymentOvercommit.test.yaml")
    assert "2147483649x10" in tests[0].read_text()
    res = run_promtool(promtool, "test", "rules", *tests)
    assert res.returncode == 0, res.stdout + res.stderr

    # ...and the committed tests, still at the default, fail against the moved rules
    for t in tests:
        (root / "alerts/tests" / t.name).write_text((ALERTS_DIR / "tests" / t.name).read_text())
    res = run_promtool(promtool, "test", "rules", *tests)
    assert res.returncode != 0 and "FAILED" in res.stdout + res.stderr


def _templates_using(knob: str) -> list[str]:
    src, _dst, suffix = generate.TEST_TEMPLATES
    return sorted(
        p.name.removesuffix(".in")
        for p in (REPO / src).glob(f"*{suffix}")
        if knob in values.knobs_used(p.read_text())
    )


MOVES: list[dict[str, Any]] = [
    {"kv_overcommit_warning_bytes": 3 * GIB},
    {"kv_overcommit_for": "7m"},
    {"gpu_free_warning_bytes": 3 * GIB, "gpu_free_critical_bytes": 768 << 20},
    {"gpu_free_warning_for": "6m", "gpu_free_critical_for": "3m"},
    {"corruption_warning_ratio": 0.03, "corruption_critical_ratio": 0.12},
    {"deployment_overcommit_for": "12m"},
    {"length_inflation_factor": 2.0},
    {"model_drift_bytes": 32 << 20},
    {"gpu_count_lookback": "6h"},
]


@pytest.mark.parametrize("overrides", MOVES, ids=lambda o: ",".join(o))
def test_rerendered_tests_pass_with_moved_knobs(
    promtool: str, tmp_path: Path, overrides: dict[str, Any]
) -> None:
    """Every promtool test whose template reads a moved knob passes against the rules
    rendered with it: the tests are derived from the thresholds, not restating them."""
    stems = sorted({s for k in overrides for s in _templates_using(k)})
    assert stems, f"no promtool test reads {sorted(overrides)}"
    root = _tree(tmp_path, from_mapping(overrides))
    res = run_promtool(promtool, "test", "rules", *(root / "alerts/tests" / s for s in stems))
    assert res.returncode == 0, res.stdout + res.stderr


def test_placeholders_name_existing_knobs_and_formats() -> None:
    """Every template renders at the defaults and names only knobs that exist."""
    for src, _dst, suffix in (generate.TEST_TEMPLATES, generate.RUNBOOK_TEMPLATES):
        for p in (REPO / src).glob(f"*{suffix}"):
            assert values.knobs_used(p.read_text()) <= set(vars(DEFAULTS)), p.name
            values.render(p.read_text(), DEFAULTS, p.name)


@pytest.mark.parametrize(
    ("template", "error"),
    [
        ("${nope}", "unknown knob 'nope'"),
        ("${kv_overcommit_for|bytes2}", "unknown format 'bytes2'"),
        ("${kv_overcommit_for", "malformed placeholder"),
    ],
)
def test_bad_placeholder_is_named(template: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        values.render(template, DEFAULTS, "t.md.in")


@pytest.mark.parametrize(
    ("placeholder", "text"),
    [
        ("${kv_overcommit_warning_bytes}", "1073741824"),
        ("${kv_overcommit_warning_bytes+1|h1024}", "1Gi"),
        ("${kv_overcommit_warning_bytes*4.3|int}", "4617089843"),
        ("${gpu_free_critical_bytes|bytes}", "512 MiB"),
        ("${gpu_free_critical_bytes|hb}", "512MiB"),
        ("${kv_overcommit_for+3m}", "8m"),
        ("${kv_overcommit_for-1m}", "4m"),
        ("${corruption_warning_ratio|pct}", "2%"),
        ("${gpu_fill_horizon_seconds|dur}", "1h"),
        ("${length_inflation_factor}", "1.5"),
    ],
)
def test_placeholder_values(placeholder: str, text: str) -> None:
    assert values.render(placeholder, DEFAULTS) == text
