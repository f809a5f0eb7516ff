"""A real sidecar (uvicorn, its real grading thread) for ingest abuse tests, with no SGLang,
GPU or canary: the samples path alone."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import yaml

from exporter.app import create_app
from exporter.config_loader import load_settings
from exporter.sim.generation import dsml_block
from tests.support import ServerThread, dead_url, sample_value, scrape, spawn_listening

TOKEN = "samples-token-0123456789"
INGEST_TOKEN = "ingest-token-0123456789"
REPO = Path(__file__).resolve().parent.parent.parent
GOOD = "ok</think>" + dsml_block([("get_weather", {"city": "Lisbon"})])
BAD = GOOD.replace("tool_calls>", "toolcalls>", 1)  # degenerate: kept in the store
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def settings(**over: Any) -> Any:
    return load_settings(
        {
            "sglang_url": dead_url(),  # nothing listens: source down
            "host": "127.0.0.1",  # as ServerThread binds: ingest answers without a token
            "gpu_backend": "fake",
            "canary": False,
            "samples_token": TOKEN,
            **over,
        }
    )


@contextlib.contextmanager
def sidecar(**over: Any) -> Iterator[ServerThread]:
    app = create_app(settings(**over))
    with ServerThread(app) as server:
        server.app = app  # type: ignore[attr-defined]
        yield server


def graded(url: str, source: str = "ingest") -> float:
    """Samples of ``source`` graded so far, all verdicts and buckets."""
    from prometheus_client.parser import text_string_to_metric_families

    total = 0.0
    for fam in text_string_to_metric_families(scrape(url)):
        for s in fam.samples:
            if s.name == "dsv4_dsml_samples_total" and s.labels["source"] == source:
                total += s.value
    return total


def reason_count(url: str, reason: str, source: str = "ingest") -> float:
    return sample_value(scrape(url), "dsv4_dsml_reasons_total", source=source, reason=reason) or 0


def non_loopback_ipv4() -> str | None:
    """An address of this host that is not loopback (the source of a 'remote' client)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # no packet is sent for a UDP connect
            addr = s.getsockname()[0]
        except OSError:
            return None
    return None if addr.startswith("127.") else addr


@contextlib.contextmanager
def serve_on_all_interfaces(app: Any) -> Iterator[int]:
    """Serve ``app`` with a real uvicorn on 0.0.0.0 (as in a pod); yields the port."""
    import threading
    import time

    import uvicorn

    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("0.0.0.0", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@contextlib.contextmanager
def serve_config(tmp_path: Path, **config: Any) -> Iterator[str]:
    """A real ``python -m exporter serve --config FILE`` (no SGLang, fake GPUs, no canary)
    with ``config`` in the file (a None value unsets a key); yields its URL on 127.0.0.1."""
    path = tmp_path / "sidecar.yaml"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSV4_SIDECAR_")}

    def start(port: int) -> subprocess.Popen[bytes]:
        base = {
            "host": "127.0.0.1",
            "port": port,
            "sglang_url": dead_url(),  # nothing listens: source down
            "gpu_backend": "fake",
            "canary": False,
            "samples_token": TOKEN,
            "ingest_token": INGEST_TOKEN,
        }
        merged = {k: v for k, v in {**base, **config}.items() if v is not None}
        path.write_text(yaml.safe_dump(merged), encoding="utf-8")
        cmd = [sys.executable, "-m", "exporter", "serve", "--config", str(path)]
        return subprocess.Popen(
            [*cmd, "--log-level", "error"],
            env=env,
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    def healthy(port: int) -> bool:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200

    proc, (port,) = spawn_listening(start, healthy)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
