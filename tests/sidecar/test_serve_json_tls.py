"""A real `dsv4-sidecar serve` process with `log_format: json` and a web config file (TLS and
basic auth): every line on stderr is one JSON object (uvicorn's own lines included), none holds
a prompt, an output or a token, and the image's HEALTHCHECK follows the TLS port."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import bcrypt
import httpx
import pytest

from tests.sidecar.test_webconfig import _trusting, pki  # noqa: F401  (the fixture)
from tests.support import dead_url, wait_for

pytestmark = pytest.mark.e2e

CLI = str(Path(sys.executable).parent / "dsv4-sidecar")
INGEST_TOKEN = "ingest-token-SECRET-4f1c9a"
SAMPLES_TOKEN = "samples-token-SECRET-77d2e0"
PASSWORD = "basic-auth-SECRET-b1e3"
PROMPT = "PROMPT-SECRET: the launch code is 0000"
OUTPUT = "OUTPUT-SECRET reading</think><｜DSML｜toolcalls>broken"


def _serve(tmp_path: Path, web: Path, *extra: str) -> tuple[subprocess.Popen, Path, dict]:
    listen = tmp_path / "listen.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSV4_SIDECAR_")}
    env.update(
        DSV4_SIDECAR_LISTEN_FILE=str(listen),
        DSV4_SIDECAR_INGEST_TOKEN=INGEST_TOKEN,
        DSV4_SIDECAR_SAMPLES_TOKEN=SAMPLES_TOKEN,
        DSV4_SIDECAR_LOG_FORMAT="json",
    )
    proc = subprocess.Popen(
        [CLI, "serve", "--host", "127.0.0.1", "--port", "0", "--sglang-url",
         dead_url(), "--gpu-backend", "fake", "--canary", "false",
         "--web.config.file", str(web), "--log-level", "debug", *extra],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    return proc, listen, env


def test_json_logs_hold_no_payload_and_the_healthcheck_speaks_tls(
    tmp_path: Path,
    pki: dict[str, Path],  # noqa: F811
) -> None:
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()
    web = tmp_path / "web.yml"
    web.write_text(
        f"tls_server_config:\n  cert_file: {pki['server_crt']}\n  key_file: {pki['server_key']}\n"
        f"basic_auth_users:\n  prometheus: '{hashed}'\n"
    )
    proc, listen, env = _serve(tmp_path, web)
    try:
        data = wait_for(lambda: json.loads(listen.read_text()), timeout=60)
        assert data["tls"] is True
        base = f"https://127.0.0.1:{data['port']}"
        with httpx.Client(verify=_trusting(pki), timeout=10) as client:
            wait_for(lambda: client.get(base + "/healthz").status_code == 200, timeout=60)
            sample = {
                "messages": [{"role": "user", "content": PROMPT}],
                "text": OUTPUT,
                "grammar": "v4",
            }
            auth = {"Authorization": f"Bearer {INGEST_TOKEN}"}
            assert client.post(base + "/api/v1/samples", json=sample, headers=auth).is_success
            wrong = {"Authorization": "Bearer wrong-SECRET-token"}
            refused = client.post(base + "/api/v1/samples", json=sample, headers=wrong)
            assert refused.status_code == 401
            stored = {"Authorization": f"Bearer {SAMPLES_TOKEN}"}
            wait_for(lambda: client.get(base + "/api/v1/samples", headers=stored).json()["samples"])
            assert client.get(base + "/metrics", auth=("prometheus", PASSWORD)).status_code == 200
            assert client.get(base + "/metrics", auth=("prometheus", "x-SECRET")).status_code == 401
        hc = [sys.executable, "-I", "-m", "exporter.healthcheck"]
        ok = subprocess.run(hc, env=env, capture_output=True, timeout=30, check=False)
        assert ok.returncode == 0, ok.stderr  # https to the TLS port, no credentials needed
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines, "serve logged nothing"
    records = [json.loads(line) for line in lines]  # every line is one JSON object
    for r in records:
        assert {"time", "level", "logger", "message"} <= set(r)
    loggers = {r["logger"] for r in records}
    assert any(name.startswith("uvicorn") for name in loggers)  # uvicorn's own lines too
    assert any(name.startswith("exporter.") for name in loggers)
    for secret in ("SECRET", PASSWORD, INGEST_TOKEN, SAMPLES_TOKEN, "launch code", "DSML"):
        assert secret not in err


def test_text_logs_stay_the_default(tmp_path: Path, pki: dict[str, Path]) -> None:  # noqa: F811
    web = tmp_path / "web.yml"
    web.write_text("")  # an empty web config: plain HTTP, no auth
    proc, listen, _ = _serve(tmp_path, web, "--log-format", "text")
    try:
        data = wait_for(lambda: json.loads(listen.read_text()), timeout=60)
        assert data["tls"] is False
        url = f"http://127.0.0.1:{data['port']}/healthz"
        wait_for(lambda: httpx.get(url, timeout=5).status_code == 200, timeout=60)
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    first = next(line for line in err.splitlines() if line.strip())
    with pytest.raises(ValueError):
        json.loads(first)
