"""Fixtures of the observability tests (alert rules, runbooks, dashboards)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support import require

REPO = Path(__file__).resolve().parents[2]
ALERTS_DIR = REPO / "alerts"
RULE_FILE = ALERTS_DIR / "dsv4-sidecar.rules.yaml"
RULE_TESTS = sorted((ALERTS_DIR / "tests").glob("*.yaml"))
RUNBOOKS = REPO / "docs" / "runbooks"


@pytest.fixture(scope="session")
def promtool() -> str:
    """Path of promtool (tests.support.require: a skip locally, a failure in CI)."""
    return require("promtool")


def run_promtool(promtool: str, *args: str | Path, cwd: Path | None = None):
    """promtool with a timeout; returns the CompletedProcess (text, both streams). The timeout
    tells a hang from a machine shared with other tests (the parallel run): it is no budget."""
    return subprocess.run(
        [promtool, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=cwd,
    )
