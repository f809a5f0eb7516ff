"""A real ``dsv4-sidecar serve`` subprocess in front of a (hostile) SGLang, for the hostile
tests and ``bench/bench_hostile_rss.py``: the process, its URLs, and its memory as the kernel
counts it (``VmRSS``, and ``VmHWM``, the high-water mark, so a spike between two reads counts).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.support import spawn_listening

REPO = Path(__file__).resolve().parent.parent.parent
DEPLOYMENT = REPO / "docker" / "k8s" / "deployment.yaml"
TOKEN = "hostile-ingest-token"


def status_kb(pid: int, field: str) -> int:
    text = Path(f"/proc/{pid}/status").read_text()
    m = re.search(rf"^{field}:\s+(\d+) kB", text, re.M)
    return int(m.group(1)) if m else 0


def manifest_limit_mib() -> int:
    """The sidecar container's memory limit in the Kubernetes manifest (Mi)."""
    text = DEPLOYMENT.read_text(encoding="utf-8")
    sidecar = text[text.index("- name: dsv4-sidecar") :]
    m = re.search(r"limits:\s*\n(?:\s+\w+: \S+\n)*?\s+memory: (\d+)(Mi|Gi)", sidecar)
    assert m, "no memory limit on the sidecar container"
    return int(m.group(1)) * (1024 if m.group(2) == "Gi" else 1)


@dataclass
class Sidecar:
    proc: subprocess.Popen[bytes]
    url: str
    tap: str

    def peak_mib(self) -> float:
        return status_kb(self.proc.pid, "VmHWM") / 1024

    def rss_mib(self) -> float:
        return status_kb(self.proc.pid, "VmRSS") / 1024


def start_sidecar(sglang_url: str, **extra_env: str) -> Sidecar:
    """``serve`` with fake GPUs, the tap sampling everything, SGLang and the canary polled
    every 0.5 s; ``extra_env`` adds or overrides ``DSV4_SIDECAR_*`` settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSV4_SIDECAR_")}
    env.update(
        {
            "DSV4_SIDECAR_HOST": "127.0.0.1",
            "DSV4_SIDECAR_SERVER_URL": sglang_url,
            "DSV4_SIDECAR_GPU_BACKEND": "fake",
            "DSV4_SIDECAR_MODEL_PRESET": "deepseek-v4-flash",
            "DSV4_SIDECAR_SGLANG_POLL_INTERVAL": "0.5",
            "DSV4_SIDECAR_SGLANG_TIMEOUT": "20",
            "DSV4_SIDECAR_CANARY_INTERVAL": "0.5",
            "DSV4_SIDECAR_CANARY_TIMEOUT": "20",
            "DSV4_SIDECAR_TAP_SAMPLE_RATE": "1.0",
            "DSV4_SIDECAR_INGEST_TOKEN": TOKEN,
            **extra_env,
        }
    )

    def start(port: int, tap: int) -> subprocess.Popen[bytes]:
        ports = {"DSV4_SIDECAR_PORT": str(port), "DSV4_SIDECAR_TAP_PORT": str(tap)}
        return subprocess.Popen(
            [sys.executable, "-m", "exporter", "serve", "--log-level", "error"],
            env={**env, **ports},
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def healthy(port: int, tap: int) -> bool:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200

    proc, (port, tap) = spawn_listening(start, healthy, ports=2)
    return Sidecar(proc, f"http://127.0.0.1:{port}", f"http://127.0.0.1:{tap}")


def stop_sidecar(sc: Sidecar) -> None:
    sc.proc.send_signal(signal.SIGTERM)
    try:
        sc.proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        sc.proc.kill()
        sc.proc.wait()
