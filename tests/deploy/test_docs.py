"""docs/deploy.md names only things that exist: repository paths, metrics, alerts, settings,
make targets. (Its prose is reviewed by people; its references are checked here.)"""

from __future__ import annotations

import re

from exporter.config import ENV_PREFIX, SidecarSettings
from tests.deploy.conftest import REPO
from tests.deploy.test_settings import PENDING

DOC = (REPO / "docs" / "deploy.md").read_text(encoding="utf-8")


def test_repository_paths_exist():
    paths = set(re.findall(r"`((?:docker|alerts|dashboards|docs|tests)/[\w./*-]*)`", DOC))
    paths |= set(re.findall(r"\]\(([\w.-]+\.md)\)", DOC))
    assert len(paths) > 10
    for path in paths:
        base = REPO / "docs" if "/" not in path else REPO
        target = path.split("*")[0].rstrip("/")
        assert (base / target).exists(), path


def test_metrics_alerts_settings_and_targets_exist():
    metrics_doc = (REPO / "docs" / "metrics.md").read_text(encoding="utf-8")
    for metric in set(re.findall(r"\bdsv4_[a-z_]+\b", DOC)) - {"dsv4_sidecar_probe"}:
        assert f"`{metric}`" in metrics_doc, metric
    rules = "".join(p.read_text(encoding="utf-8") for p in (REPO / "alerts").glob("*.yaml"))
    for alert in set(re.findall(r"\bDSV4[A-Z][A-Za-z]+\b", DOC)):
        assert f"alert: {alert}" in rules, alert
    for var in set(re.findall(rf"\b{ENV_PREFIX}([A-Z_]+)\b", DOC)):
        key = var.lower()
        assert key in SidecarSettings.model_fields or key in PENDING, var
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    for target in set(re.findall(r"`make ([a-z0-9-]+)`", DOC)):
        assert re.search(rf"^{target}:", makefile, re.M), target
