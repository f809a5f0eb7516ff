"""`dsv4-sidecar demo` end to end: it shows over-commit, corruption by concurrency and ungated
reads, and leaves no process or temporary directory behind (by --duration and by Ctrl-C)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e


def _demo_dirs() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("dsv4-demo-*")}


def _demo_processes() -> list[str]:
    out = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if "dsv4-demo-" in cmd:
                out.append(cmd)
    return out


def test_demo_runs_and_cleans_up():
    before = _demo_dirs()
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "exporter",
            "demo",
            "--duration",
            "30",
            "--level-seconds",
            "4",
            "--levels",
            "1,16,64",
            "--tp-size",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "COLUMNS": "120"},
    )
    assert r.returncode == 0, r.stderr[-2000:]
    out = r.stdout
    for needle in (
        "sidecar landing page",
        "/metrics",
        "KV over-commit per rank",
        "4.34",
        "Tool-call corruption by concurrency",
        "ungated",
        "mean transfer gap",
        "demo stopped",
    ):
        assert needle in out, needle
    assert _demo_dirs() <= before
    assert not _demo_processes()


def test_demo_stops_cleanly_on_ctrl_c():
    before = _demo_dirs()
    proc = subprocess.Popen(
        [sys.executable, "-m", "exporter", "demo", "--no-prometheus", "--tp-size", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        assert proc.stdout is not None
        for line in proc.stdout:
            if "simulated SGLang" in line or time.monotonic() > deadline:
                break
        time.sleep(3)  # load running
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
    assert "demo stopped" in rest
    assert _demo_dirs() <= before
    assert not _demo_processes()
