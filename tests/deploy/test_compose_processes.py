"""docker/compose.yaml's own services run as local processes: each service's entrypoint,
command and environment as the file states them (the image's entrypoint where it sets none),
with only what a container gives differently replaced: host names and published ports by
loopback ports, the ingest-token volume by a directory, and the tap's sample rate raised to 1
so every answer is graded. The one-shot writes the token, the sidecar and the tap read it from
the shared directory, and every sample the tap takes reaches the sidecar's grader.

No container runtime is needed (nothing is built); tests/deploy/test_compose.py checks the
file itself, this checks that its services work together.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path, PurePosixPath
from typing import Any

import httpx
import pytest

from tests.deploy.conftest import DOCKER, compose
from tests.support import openai_chats, sample_value, spawn_listening, stop_process, wait_for
from tests.tap.test_tap_process import _graded_from_tap

pytestmark = pytest.mark.e2e
IMAGE_ENTRYPOINT = ["dsv4-sidecar"]  # docker/Dockerfile's ENTRYPOINT


def _argv(svc: dict[str, Any]) -> list[str]:
    entrypoint = svc.get("entrypoint") or IMAGE_ENTRYPOINT
    if entrypoint == IMAGE_ENTRYPOINT:
        head = [sys.executable, "-m", "exporter"]
    else:
        assert entrypoint[0] == "python"
        head = [sys.executable, *entrypoint[1:]]
    return head + [str(c) for c in svc["command"]]


def _env(svc: dict[str, Any], **over: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DSV4_", "SGLANG_"))}
    if "env_file" in svc:
        for line in (DOCKER / svc["env_file"]).read_text(encoding="utf-8").splitlines():
            if line.strip() and not line.startswith("#"):
                key, _, value = line.partition("=")
                env[key.strip()] = value.strip()
    env.update({k: str(v) for k, v in (svc.get("environment") or {}).items()})
    env.update(over)
    return env


def _local_path(svc: dict[str, Any], path: str, volumes: dict[str, Path]) -> str:
    """``path`` inside ``svc``'s container, on the local directory of the volume holding it."""
    p = PurePosixPath(path)
    for vol in svc.get("volumes", []):
        source, target = (
            (vol["source"], vol["target"]) if isinstance(vol, dict) else vol.split(":")[:2]
        )
        if p.is_relative_to(target) and source in volumes:
            return str(volumes[source] / p.relative_to(target))
    raise AssertionError(f"{path} is on no volume of the service")


def _start(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(argv, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)


def test_the_sim_stack_services_work_together(tmp_path: Path) -> None:
    services = compose(DOCKER / "compose.yaml")["services"]
    volumes = {"ingest-token": tmp_path / "ingest-token"}
    volumes["ingest-token"].mkdir()

    # the one-shot, writing where its volume is
    init = services["ingest-token"]
    (written,) = init["command"]
    init_argv = _argv({**init, "command": [_local_path(init, written, volumes)]})
    res = subprocess.run(init_argv, env=_env(init), capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr

    hosts: dict[str, str] = {}  # compose host:port -> the local one, as each comes up

    def localised(svc: dict[str, Any], **over: str) -> dict[str, str]:
        env = _env(svc, **over)
        for key, value in env.items():
            if key.startswith("DSV4_SIDECAR_"):
                for name, local in hosts.items():
                    value = value.replace(f"//{name}", f"//{local}")
                if key.endswith("_FILE"):
                    value = _local_path(svc, value, volumes)
                env[key] = value
        return env

    def up(url: str) -> bool:
        return httpx.get(url, timeout=5).status_code == 200

    sim, sidecar, tap = services["sglang-sim"], services["sidecar"], services["tap"]

    def start_sim(port: int) -> subprocess.Popen[bytes]:
        cmd = [str(c) for c in sim["command"]]
        cmd[cmd.index("--host") + 1], cmd[cmd.index("--port") + 1] = "127.0.0.1", str(port)
        return _start(_argv({**sim, "command": cmd}), _env(sim), tmp_path / "sim.log")

    def start_sidecar(port: int) -> subprocess.Popen[bytes]:
        over = {"HOST": "127.0.0.1", "PORT": str(port), "CANARY": "false"}
        env = localised(sidecar, **{"DSV4_SIDECAR_" + k: v for k, v in over.items()})
        return _start(_argv(sidecar), env, tmp_path / "sidecar.log")

    def start_tap(port: int, metrics: int) -> subprocess.Popen[bytes]:
        over = {"HOST": "127.0.0.1", "PORT": str(port), "METRICS_PORT": str(metrics)}
        over["TAP_SAMPLE_RATE"] = "1"
        env = localised(tap, **{"DSV4_SIDECAR_" + k: v for k, v in over.items()})
        return _start(_argv(tap), env, tmp_path / "tap.log")

    procs: list[subprocess.Popen[bytes]] = []
    try:
        proc, (sim_port,) = spawn_listening(start_sim, lambda p: up(f"http://127.0.0.1:{p}/health"))
        procs.append(proc)
        hosts["sglang-sim:30000"] = f"127.0.0.1:{sim_port}"
        proc, (api_port,) = spawn_listening(
            start_sidecar, lambda p: up(f"http://127.0.0.1:{p}/healthz")
        )
        procs.append(proc)
        hosts["sidecar:9400"] = f"127.0.0.1:{api_port}"
        proc, (tap_port, tap_metrics) = spawn_listening(
            start_tap,
            lambda p, m: up(f"http://127.0.0.1:{m}/metrics") and up(f"http://127.0.0.1:{p}/health"),
            ports=2,
        )
        procs.append(proc)

        api, metrics = f"http://127.0.0.1:{api_port}", f"http://127.0.0.1:{tap_metrics}/metrics"
        n = 12
        assert all(asyncio.run(openai_chats(f"http://127.0.0.1:{tap_port}", n, 4)))
        wait_for(lambda: _graded_from_tap(api) == n, timeout=90)
        text = httpx.get(metrics, timeout=5).text
        assert sample_value(text, "dsv4_tap_sampled_total") == n
        for reason in ("sidecar_refused", "sidecar_unavailable", "queue_full"):
            assert sample_value(text, "dsv4_tap_samples_dropped_total", reason=reason) == 0
        # the sidecar listens beyond loopback in its container: ingest wants the shared token
        r = httpx.post(api + "/api/v1/samples", json={"text": "x"}, timeout=10)
        assert r.status_code == 401
    finally:
        for p in reversed(procs):
            stop_process(p)
