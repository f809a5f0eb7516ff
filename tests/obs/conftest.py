"""Fixtures of the observability tests (alert rules, runbooks, dashboards)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ALERTS_DIR = REPO / "alerts"
RULE_FILE = ALERTS_DIR / "dsv4-sidecar.rules.yaml"
RULE_TESTS = sorted((ALERTS_DIR / "tests").glob("*.yaml"))
RUNBOOKS = REPO / "docs" / "runbooks"


@pytest.fixture(scope="session")
def promtool() -> str:
    """Path of promtool. Missing promtool skips locally but fails in CI (CI=true), where
    `make deb-test` installs it: a CI run must never pass without checking the rules."""
    path = shutil.which("promtool")
    if path:
        return path
    if os.environ.get("CI"):
        pytest.fail("promtool is not installed (make deb-test installs Debian's prometheus)")
    pytest.skip("promtool not installed; `make deb-test` installs it")


def run_promtool(promtool: str, *args: str | Path, cwd: Path | None = None):
    """promtool with a timeout; returns the CompletedProcess (text, both streams)."""
    return subprocess.run(
        [promtool, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
    )
