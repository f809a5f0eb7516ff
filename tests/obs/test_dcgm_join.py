"""The dcgm-exporter join (alerts/dcgm/, docs/dcgm-exporter.md) against Prometheus' own
promtool: the rules load, and evaluated over dcgm-exporter-shaped series (its UUID, gpu,
Hostname labels) they give the sidecar's rank per GPU, and nothing for GPUs no sidecar serves."""

from __future__ import annotations

import re

from tests.obs.conftest import REPO, run_promtool

DCGM = REPO / "alerts" / "dcgm"
RULES = DCGM / "dsv4-dcgm-join.rules.yaml"
TESTS = DCGM / "dsv4-dcgm-join.test.yaml"
DOC = REPO / "docs" / "dcgm-exporter.md"


def test_the_join_rules_load(promtool: str) -> None:
    out = run_promtool(promtool, "check", "rules", RULES)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "4 rules found" in out.stdout


def test_the_join_over_dcgm_shaped_series(promtool: str) -> None:
    out = run_promtool(promtool, "test", "rules", TESTS.name, cwd=DCGM)
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_doc_shows_the_rules_as_they_are() -> None:
    """The page quotes the join; the quote must be the rule file's (one place per fact)."""
    doc = DOC.read_text(encoding="utf-8")
    rules = RULES.read_text(encoding="utf-8")
    records = re.findall(r"- record: (\S+)", rules)
    assert records and all(f"`{r}`" in doc for r in records)
    quoted = re.search(r"```promql\n(.*?)```", doc, re.S)
    assert quoted is not None
    for line in quoted.group(1).strip().splitlines():
        assert line.strip() in rules, line
