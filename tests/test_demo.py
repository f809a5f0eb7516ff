"""`dsv4-sidecar demo` end to end: it shows over-commit, corruption by concurrency, ungated
reads and, with Prometheus installed, the alerts firing within the README's two minutes on
the short-window demo rules (said on screen); it leaves no process or temporary directory
behind (by --duration and by Ctrl-C)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from exporter.demo import DEMO_WINDOWS, demo_rules

pytestmark = pytest.mark.e2e

# What the demo's deployment (bf16 index-K, HiCache on, legacy configurator) must raise.
DEMO_ALERTS = {
    "DSV4KVPoolOvercommit",
    "DSV4ToolCallCorruptionHigh",
    "DSV4CanaryFailing",
    "DSV4IndexKUngatedReads",
    "DSV4RiskyConfiguration",
}


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
            "75",
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
    if shutil.which("prometheus"):
        assert "Alert windows: DEMO" in out
        last = out.rsplit("Alerts:", 1)[1].split("Alert windows", 1)[0]
        firing = set(re.findall(r"(DSV4\w+) \(firing\)", last))
        assert firing >= DEMO_ALERTS, f"not firing after 75s: {DEMO_ALERTS - firing}"
    else:
        assert "Alert windows: no Prometheus" in out
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


def _durations_s(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600}
    return sum(float(n) * units[u] for n, u in re.findall(r"(\d+)([smh])", text))


def test_demo_rules_are_the_short_window_rules(tmp_path):
    """The rules the demo loads: valid, every alert it must raise has a variant that waits at
    most 20s, and production (the committed rules) waits longer for the same alerts."""
    from tests.obs.conftest import RULE_FILE, run_promtool

    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed; `make deb-test` installs it")
    files, windows = demo_rules(tmp_path)
    assert windows == DEMO_WINDOWS and files == [str(tmp_path / "demo.rules.yaml")]
    check = run_promtool(promtool, "check", "rules", files[0])
    assert check.returncode == 0, check.stdout + check.stderr

    def fors(path: str) -> dict[str, float]:
        out: dict[str, float] = {}
        for g in yaml.safe_load(Path(path).read_text())["groups"]:
            for r in g["rules"]:
                if "alert" in r:
                    seconds = _durations_s(r["for"])
                    out[r["alert"]] = min(out.get(r["alert"], seconds), seconds)
        return out

    demo, production = fors(files[0]), fors(str(RULE_FILE))
    slow = {a: demo[a] for a in DEMO_ALERTS if demo[a] > 20}
    assert not slow, f"demo rules wait too long: {slow}"
    assert all(production[a] >= 60 > demo[a] for a in DEMO_ALERTS - {"DSV4CanaryFailing"})
