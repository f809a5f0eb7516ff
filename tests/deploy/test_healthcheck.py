"""The image's HEALTHCHECK (`python -m exporter.healthcheck`) against a real `dsv4-sidecar
serve` process: serve records the port it actually bound (here `--port 0`, which no setting in
the environment can tell), and the healthcheck follows it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx

from tests.support import wait_for

CLI = str(Path(sys.executable).parent / "dsv4-sidecar")


def test_serve_records_the_bound_port_and_the_healthcheck_follows_it(tmp_path):
    listen = tmp_path / "state" / "listen.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSV4_SIDECAR_")}
    env.update(DSV4_SIDECAR_LISTEN_FILE=str(listen), DSV4_SIDECAR_PORT="1")
    # No SGLang, no GPU: serve still answers /healthz (its sources report down).
    proc = subprocess.Popen(
        [CLI, "serve", "--host", "127.0.0.1", "--port", "0", "--sglang-url",
         "http://127.0.0.1:9", "--gpu-backend", "fake", "--log-level", "warning"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        data = wait_for(lambda: json.loads(listen.read_text()), timeout=30)
        assert data["host"] == "127.0.0.1" and data["pid"] == proc.pid
        port = data["port"]
        assert port not in (0, 1)
        wait_for(
            lambda: httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
        )
        hc = [sys.executable, "-I", "-m", "exporter.healthcheck"]
        ok = subprocess.run(hc, env=env, capture_output=True, timeout=20, check=False)
        assert ok.returncode == 0, ok.stderr
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    down = subprocess.run(hc, env=env, capture_output=True, timeout=20, check=False)
    assert down.returncode == 1 and str(port).encode() in down.stderr
