"""TLS and basic auth from a web config file (exporter/webconfig.py), against the real
sidecar app served by uvicorn on 127.0.0.1 with a certificate made here by openssl, and
httpx as the client (what Prometheus does when it scrapes with tls_config and basic_auth)."""

from __future__ import annotations

import json
import shutil
import socket
import ssl
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import bcrypt
import httpx
import pytest
import uvicorn

from exporter import webconfig
from exporter.app import create_app
from exporter.cli import main
from exporter.config_loader import load_settings
from tests.support import dead_url

pytestmark = pytest.mark.e2e

USER, PASSWORD = "prometheus", "correct horse battery staple"
TOKEN = "samples-token-0123456789"


def _openssl() -> str:
    binary = shutil.which("openssl")
    if binary is None:
        pytest.skip("openssl not installed")
    return binary


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1 signed by it, and a client certificate."""
    d = tmp_path_factory.mktemp("pki")
    openssl = _openssl()

    def run(*args: str) -> None:
        subprocess.run([openssl, *args], check=True, capture_output=True, timeout=60)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=test-ca",
        "-keyout", str(d / "ca.key"), "-out", str(d / "ca.crt"))  # fmt: skip
    for name in ("server", "client"):
        run("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
            "-keyout", str(d / f"{name}.key"), "-out", str(d / f"{name}.csr"))  # fmt: skip
        ext = d / f"{name}.ext"
        ext.write_text(
            "subjectAltName=IP:127.0.0.1\n" if name == "server" else "extendedKeyUsage=clientAuth\n"
        )
        run("x509", "-req", "-in", str(d / f"{name}.csr"), "-CA", str(d / "ca.crt"),
            "-CAkey", str(d / "ca.key"), "-CAcreateserial", "-days", "2",
            "-extfile", str(ext), "-out", str(d / f"{name}.crt"))  # fmt: skip
    return {p.stem + p.suffix.replace(".", "_"): p for p in d.iterdir()}


def _trusting(pki: dict[str, Path], client_cert: bool = False) -> ssl.SSLContext:
    """A client context that trusts the test CA (and presents the client certificate)."""
    ctx = ssl.create_default_context(cafile=str(pki["ca_crt"]))
    if client_cert:
        ctx.load_cert_chain(pki["client_crt"], pki["client_key"])
    return ctx


def _hash(password: str) -> str:
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(4)).decode()  # cost 4: fast tests


class _Server:
    """The sidecar app served through webconfig.server_config (the path `serve` takes)."""

    def __init__(self, web: webconfig.WebConfig) -> None:
        settings = load_settings(
            {
                "sglang_url": dead_url(),  # nothing listens
                "gpu_backend": "fake",
                "canary": False,
                "samples_token": TOKEN,
            }
        )
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        config = webconfig.server_config(
            create_app(settings), web, log_level="warning", lifespan="on", access_log=False
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )

    def __enter__(self) -> _Server:
        self.thread.start()
        deadline = time.monotonic() + 30  # a hang guard, not a budget
        while not self.server.started:
            assert time.monotonic() < deadline and self.thread.is_alive(), "uvicorn did not start"
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "web.yml"
    path.write_text(text)
    return path


def test_tls_and_basic_auth_with_a_real_client(pki: dict[str, Path], tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        f"tls_server_config:\n  cert_file: {pki['server_crt']}\n  key_file: {pki['server_key']}\n"
        f"basic_auth_users:\n  {USER}: '{_hash(PASSWORD)}'\n  other: '{_hash('x')}'\n",
    )
    web = webconfig.load(path)
    with _Server(web) as srv:
        base = f"https://127.0.0.1:{srv.port}"
        with httpx.Client(verify=_trusting(pki), timeout=10) as client:
            ok = client.get(base + "/metrics", auth=(USER, PASSWORD))
            assert ok.status_code == 200 and "dsv4_" in ok.text
            assert client.get(base + "/api/v1/footprint", auth=(USER, PASSWORD)).status_code == 200
            none = client.get(base + "/metrics")
            assert none.status_code == 401
            assert none.headers["www-authenticate"] == 'Basic realm="dsv4-sidecar"'
            assert client.get(base + "/metrics", auth=(USER, "wrong")).status_code == 401
            assert client.get(base + "/metrics", auth=("nobody", PASSWORD)).status_code == 401
            assert client.get(base + "/metrics", auth=("other", PASSWORD)).status_code == 401
            # a password bcrypt cannot check (> 72 bytes) is a 401, not a 500
            assert client.get(base + "/metrics", auth=(USER, "p" * 100)).status_code == 401
            bad = {"Authorization": "Basic !!!not-base64"}
            assert client.get(base + "/readyz", headers=bad).status_code == 401
            # /healthz stays open (liveness probes); the samples API keeps its bearer token
            assert client.get(base + "/healthz").status_code == 200
            samples = base + "/api/v1/samples"
            assert client.get(samples).status_code == 401
            bearer = {"Authorization": f"Bearer {TOKEN}"}
            assert client.get(samples, headers=bearer).status_code == 200
        # the certificate is verified: a client that does not trust the CA is refused
        with pytest.raises(httpx.ConnectError), httpx.Client(timeout=10) as untrusting:
            untrusting.get(base + "/healthz")
        # plain HTTP to the TLS port gets no answer
        with pytest.raises(httpx.HTTPError), httpx.Client(timeout=10) as plain:
            plain.get(f"http://127.0.0.1:{srv.port}/healthz")


def test_client_certificates_and_min_version(pki: dict[str, Path], tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        f"tls_server_config:\n  cert_file: {pki['server_crt']}\n  key_file: {pki['server_key']}\n"
        f"  client_ca_file: {pki['ca_crt']}\n  min_version: TLS13\n",
    )
    with _Server(webconfig.load(path)) as srv:
        base = f"https://127.0.0.1:{srv.port}"
        with httpx.Client(verify=_trusting(pki, client_cert=True)) as client:
            assert client.get(base + "/metrics").status_code == 200  # no basic auth configured
        with pytest.raises(httpx.HTTPError), httpx.Client(verify=_trusting(pki)) as anon:
            anon.get(base + "/metrics")  # client_ca_file: a client certificate is required
        tls12 = _trusting(pki, client_cert=True)
        tls12.maximum_version = ssl.TLSVersion.TLSv1_2
        with pytest.raises(httpx.ConnectError), httpx.Client(verify=tls12) as old:
            old.get(base + "/metrics")  # min_version: TLS13 refuses a TLS 1.2-only client


@pytest.mark.parametrize(
    ("text", "key", "fix"),
    [
        ("tls_server_config:\n  cert_file: /nonexistent.crt\n  key_file: /nonexistent.key\n",
         "tls_server_config.cert_file", "mount the file there"),
        ("tls_server_config:\n  key_file: /x.key\n", "tls_server_config.cert_file",
         "give both cert_file and key_file"),
        ("basic_auth_users:\n  prometheus: hunter2\n", "basic_auth_users.prometheus",
         "store the hash"),
        ("basic_auth_user:\n  prometheus: x\n", "basic_auth_user", "use only tls_server_config"),
        ("http_server_config:\n  http2: false\n", "http_server_config",
         "remove http_server_config"),
        ("tls_server_config:\n  cert_file: a\n  key_file: b\n  min_version: TLS10\n",
         "tls_server_config.min_version", "use one of TLS12, TLS13"),
        ("tls_server_config: [\n", "web_config_file", "not valid YAML at line"),
        ("tls_server_config:\n", "tls_server_config", "give cert_file and key_file"),
    ],
)  # fmt: skip
def test_a_malformed_web_config_names_the_key_and_the_fix(
    text: str, key: str, fix: str, tmp_path: Path, pki: dict[str, Path]
) -> None:
    # files that exist, so the checks after the file check are reached
    text = text.replace("cert_file: a", f"cert_file: {pki['server_crt']}")
    text = text.replace("key_file: b", f"key_file: {pki['server_key']}")
    path = _write(tmp_path, text)
    with pytest.raises(webconfig.WebConfigError) as err:
        webconfig.load(path)
    assert err.value.key == key and f"{key}:" in str(err.value)
    assert "fix:" in str(err.value) and fix in str(err.value)
    assert "hunter2" not in str(err.value)  # a plain password is never echoed


def test_a_key_that_does_not_match_the_certificate(pki: dict[str, Path], tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        f"tls_server_config:\n  cert_file: {pki['server_crt']}\n  key_file: {pki['client_key']}\n",
    )
    with pytest.raises(webconfig.WebConfigError, match="cert_file/key_file: cannot load"):
        webconfig.load(path)
    # an encrypted key is refused at once (OpenSSL would otherwise prompt for its password)
    encrypted = tmp_path / "encrypted.key"
    subprocess.run(
        [_openssl(), "pkey", "-in", str(pki["server_key"]), "-aes256", "-passout", "pass:x",
         "-out", str(encrypted)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    path = _write(
        tmp_path, f"tls_server_config:\n  cert_file: {pki['server_crt']}\n  key_file: {encrypted}\n"
    )
    with pytest.raises(webconfig.WebConfigError, match="unencrypted PEM private key"):
        webconfig.load(path)


def test_serve_refuses_a_bad_web_config_with_one_line(tmp_path: Path, capsys) -> None:
    path = _write(tmp_path, "basic_auth_users:\n  prometheus: plaintext\n")
    for flag in ("--web.config.file", "--web-config-file"):
        rc = main(["serve", flag, str(path), "--gpu-backend", "fake", "--canary", "false"])
        err = capsys.readouterr().err.strip()
        assert rc == 2 and err.startswith("dsv4-sidecar serve: error: web config")
        assert "basic_auth_users.prometheus" in err and "\n" not in err


def test_unknown_users_pay_a_bcrypt_check_and_good_ones_are_cached(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An unknown user name costs a bcrypt check at the configured cost (against a dummy
    hash), so the answer's timing does not tell which users exist; good credentials are
    checked once and then remembered (a scrape every 15 s does not pay bcrypt each time)."""
    import asyncio
    import base64

    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(5)).decode()
    auth = webconfig.BasicAuth(lambda *a: None, {USER: hashed.encode()})  # type: ignore[arg-type]
    calls: list[bytes] = []
    real = webconfig._checkpw

    def counting(password: bytes, h: bytes) -> bool:
        calls.append(h)
        return real(password, h)

    monkeypatch.setattr(webconfig, "_checkpw", counting)

    def header(user: str, password: str) -> bytes:
        return b"Basic " + base64.b64encode(f"{user}:{password}".encode())

    check = lambda h: asyncio.run(auth.check(h))  # noqa: E731
    assert not check(header("nobody", PASSWORD))
    assert len(calls) == 1 and calls[0] != hashed.encode() and calls[0][:7] == b"$2b$05$"
    assert not check(header(USER, "wrong"))
    assert len(calls) == 2 and calls[1] == hashed.encode()
    assert check(header(USER, PASSWORD)) and check(header(USER, PASSWORD))
    assert len(calls) == 3  # the second good request came from the cache
    # nothing to check at all: no bcrypt call (malformed, other scheme, over-long password)
    for bad in (b"", b"Bearer x", b"Basic ###", header(USER, "p" * 73)):
        assert not check(bad)
    assert len(calls) == 3
    # the cache is bounded: a full cache drops its oldest entry for a new good credential
    auth._good.clear()
    for i in range(webconfig.CACHE_SIZE):
        auth._good[i.to_bytes(4, "big")] = None
    assert check(header(USER, PASSWORD))
    assert len(calls) == 4  # not cached any more: checked again
    assert len(auth._good) == webconfig.CACHE_SIZE and (0).to_bytes(4, "big") not in auth._good


def test_triage_reaches_a_sidecar_behind_tls_and_basic_auth(
    pki: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """The on-call tool keeps working once the port is protected: the CA and the basic
    auth user from flags, the password from the environment, never from a flag."""
    path = _write(
        tmp_path,
        f"tls_server_config:\n  cert_file: {pki['server_crt']}\n  key_file: {pki['server_key']}\n"
        f"basic_auth_users:\n  {USER}: '{_hash(PASSWORD)}'\n",
    )
    monkeypatch.delenv("DSV4_SIDECAR_SAMPLES_TOKEN", raising=False)
    with _Server(webconfig.load(path)) as srv:
        url = f"https://127.0.0.1:{srv.port}"
        base = ["triage", "--sidecar", url, "--no-plots", "--json"]
        # without credentials: the report says what is missing
        assert main([*base, "--sidecar-ca-file", str(pki["ca_crt"]), "--out",
                     str(tmp_path / "a")]) == 1  # fmt: skip
        doc = json.loads(capsys.readouterr().out)
        assert any("--sidecar-user" in n for n in doc["evidence"]["notes"])
        # with them: the sidecar is a source, its footprint and /metrics were read
        monkeypatch.setenv("DSV4_TRIAGE_SIDECAR_PASSWORD", PASSWORD)
        rc = main([*base, "--sidecar-ca-file", str(pki["ca_crt"]), "--sidecar-user", USER,
                   "--out", str(tmp_path / "b")])  # fmt: skip
        out = capsys.readouterr().out
        assert rc == 0 and PASSWORD not in out
        doc = json.loads(out)
        assert doc["evidence"]["sources"] == [f"sidecar {url}"]
        assert not any("HTTP 401" in n for n in doc["evidence"]["notes"])
        assert PASSWORD not in "".join(p.read_text() for p in (tmp_path / "b").iterdir())
        # the certificate is verified: without the CA, the system's trust store refuses it
        monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "nothing.pem"))
        assert main([*base, "--sidecar-user", USER, "--out", str(tmp_path / "c")]) == 1
        doc = json.loads(capsys.readouterr().out)
        assert any("CERTIFICATE_VERIFY_FAILED" in n or "certificate" in n.lower()
                   for n in doc["evidence"]["notes"])  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--sidecar-user", "u"], {}, "--sidecar-user needs a password"),
        (["--sidecar-password-file", "/nonexistent"], {}, "needs --sidecar-user"),
        (["--sidecar-ca-file", "/nonexistent.pem"], {}, "is not a readable file"),
    ],
)
def test_triage_sidecar_credential_flags(argv, env, message, monkeypatch, capsys) -> None:
    monkeypatch.delenv("DSV4_TRIAGE_SIDECAR_PASSWORD", raising=False)
    assert main(["triage", "--sidecar", "https://127.0.0.1:1", *argv]) == 2
    assert message in capsys.readouterr().err
