"""One runbook per alert, with the sections on-call needs, PromQL that parses, and knob names
that exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from alerts.config import AlertConfig
from tests.obs.conftest import RULE_FILE, RUNBOOKS
from tests.obs.promql import check_parse

ALERT_NAMES = sorted(
    {
        r["alert"]
        for g in yaml.safe_load(RULE_FILE.read_text())["groups"]
        for r in g["rules"]
        if "alert" in r
    }
)
SECTIONS = ["## Meaning", "## Impact", "## Confirm", "## Mitigate", "## Verify recovery"]
KNOB_LIKE = re.compile(r"`([a-z][a-z0-9]*(?:_[a-z0-9]+)+)`")
KNOB_SUFFIXES = ("_for", "_bytes", "_seconds", "_ratio", "_window", "_lookback", "_samples")


def test_one_page_per_alert_and_no_orphans() -> None:
    pages = {p.stem for p in RUNBOOKS.glob("*.md")} - {"README"}
    assert pages == set(ALERT_NAMES)


def test_index_links_every_page() -> None:
    index = (RUNBOOKS / "README.md").read_text()
    for name in ALERT_NAMES:
        assert f"]({name}.md)" in index, name


@pytest.mark.parametrize("name", ALERT_NAMES)
def test_page_structure(name: str) -> None:
    text = (RUNBOOKS / f"{name}.md").read_text()
    assert text.startswith(f"# {name}\n")
    positions = [text.find(s + "\n") for s in SECTIONS]
    assert all(p > 0 for p in positions), [
        s for s, p in zip(SECTIONS, positions, strict=True) if p < 0
    ]
    assert positions == sorted(positions), "sections in order"
    confirm = text[positions[2] : positions[3]]
    mitigate = text[positions[3] : positions[4]]
    recovery = text[positions[4] :]
    assert "```promql" in confirm, "confirm with PromQL"
    assert re.search(r"^1\. ", mitigate, re.M), "mitigations as an ordered list"
    assert "```promql" in recovery or "resolves" in recovery


@pytest.mark.parametrize("name", ALERT_NAMES)
def test_knobs_named_in_page_exist(name: str) -> None:
    knobs = set(vars(AlertConfig()))
    text = (RUNBOOKS / f"{name}.md").read_text()
    for token in KNOB_LIKE.findall(text):
        if token.endswith(KNOB_SUFFIXES) and not token.startswith("dsv4_"):
            assert token in knobs, f"{name}.md names unknown knob `{token}`"


def test_runbook_promql_parses(promtool: str, tmp_path: Path) -> None:
    exprs = {}
    for name in ALERT_NAMES:
        blocks = re.findall(r"```promql\n(.*?)```", (RUNBOOKS / f"{name}.md").read_text(), re.S)
        for i, block in enumerate(blocks):
            exprs[f"{name}.md#{i}"] = block.strip()
    assert len(exprs) >= 2 * len(ALERT_NAMES)
    ok, out = check_parse(promtool, exprs, tmp_path)
    assert ok, out
