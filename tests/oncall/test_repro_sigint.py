"""Ctrl-C on a running `repro` process: a partial report on stdout, exit status 130."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from exporter.sim.server import create_sim_app
from exporter.sim.settings import SimSettings
from tests.support import ServerThread, wait_for

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]


def _interrupt(argv: list[str]) -> tuple[int, str, str]:
    """Start `python -m exporter repro ...`, wait for real traffic, send SIGINT."""
    sim = create_sim_app(SimSettings(index_k_dtype="bf16", hicache="on", ttft_ms=30, itl_ms=0))
    with ServerThread(sim) as s:
        proc = subprocess.Popen(
            [sys.executable, "-m", "exporter", "repro", s.url, *argv],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "COLUMNS": "160"},
        )
        try:
            wait_for(
                lambda: httpx.get(s.url + "/_sim/stats", timeout=2).json()["requests_total"] >= 20,
                timeout=30,
            )
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    return proc.returncode, out, err


def test_sigint_json_partial_report(tmp_path):
    rc, out, err = _interrupt(
        ["--concurrency", "2,8", "--duration", "60", "--json", "--quiet", "--out", str(tmp_path)]
    )
    assert rc == 130, err
    doc = json.loads(out)
    assert doc["interrupted"] is True
    assert doc["levels_planned"] == [2, 8]
    levels = doc["arms"][0]["levels"]
    assert len(levels) == 1 and levels[0]["concurrency"] == 2  # the second level never started
    assert levels[0]["requests"] >= 20 and levels[0]["seconds"] < 30
    assert "stopping" in err
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved["interrupted"] is True and saved["arms"] == doc["arms"]
    lines = (tmp_path / "samples.jsonl").read_text().splitlines()
    assert len(lines) == levels[0]["requests"]


def test_sigint_table_partial_report():
    rc, out, _err = _interrupt(["--concurrency", "4", "--requests", "100000", "--quiet"])
    assert rc == 130
    assert "repro: degenerate DSML tool calls per level" in out
    assert "interrupted: partial report (1 of 1 levels started)" in out
