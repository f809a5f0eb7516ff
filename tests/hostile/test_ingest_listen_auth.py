"""Ingest without a token answers only when the sidecar *listens* on loopback (docs/deploy.md).

The caller's address proves nothing inside a pod: a local nginx forwards remote clients from
127.0.0.1 and Istio's in-pod proxy connects from 127.0.0.6, so a check on the peer opened
ingest to the network. Each case runs a real ``dsv4-sidecar serve --config FILE``: bound to a
wildcard (0.0.0.0, reached through 127.0.0.1, as every in-pod proxy reaches it) ingest without
a token is refused from every source address; bound to 127.0.0.1 it answers.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from exporter.config import listens_on_loopback
from exporter.config_loader import ConfigError, load_settings
from tests.hostile.ingest_support import (
    GOOD,
    INGEST_TOKEN,
    non_loopback_ipv4,
    serve_config,
)

pytestmark = pytest.mark.e2e
SAMPLES = "/api/v1/samples"
# where in-pod callers connect from: the pod's own processes and a local nginx (127.0.0.1),
# Istio's sidecar proxy (127.0.0.6)
LOCAL_SOURCES = ["127.0.0.1", "127.0.0.6"]


def post_from(source: str, url: str, **headers: str) -> httpx.Response:
    """POST a good sample to ``url`` from the local address ``source``."""
    transport = httpx.HTTPTransport(local_address=source)
    with httpx.Client(transport=transport, timeout=10) as client:
        return client.post(url + SAMPLES, json={"text": GOOD}, headers=headers)


def test_wildcard_bind_refuses_ingest_without_a_token_from_every_source(tmp_path: Path) -> None:
    with serve_config(tmp_path, host="0.0.0.0", ingest_token=None) as url:
        for source in LOCAL_SOURCES:
            r = post_from(source, url)
            assert r.status_code == 403, (source, r.text)
            assert r.json()["reason"] == "token_required"
            assert "ingest_token_file" in r.json()["hint"]
        remote = non_loopback_ipv4()
        if remote is not None:
            port = url.rsplit(":", 1)[1]
            r = httpx.post(f"http://{remote}:{port}{SAMPLES}", json={"text": GOOD}, timeout=10)
            assert r.status_code == 403


def test_loopback_bind_answers_ingest_without_a_token(tmp_path: Path) -> None:
    with serve_config(tmp_path, host="127.0.0.1", ingest_token=None) as url:
        for source in LOCAL_SOURCES:
            r = post_from(source, url)
            assert r.status_code == 200 and r.json()["accepted"] == 1, (source, r.text)


def test_ingest_token_file_is_required_and_read_per_request(tmp_path: Path) -> None:
    token_file = tmp_path / "ingest-token"
    token_file.write_text(INGEST_TOKEN + "\n", encoding="utf-8")  # as `echo` writes a Secret
    with serve_config(
        tmp_path, host="0.0.0.0", ingest_token=None, ingest_token_file=str(token_file)
    ) as url:
        assert post_from("127.0.0.1", url).status_code == 401  # a local peer needs it too
        wrong = {"Authorization": "Bearer not-the-token"}
        assert post_from("127.0.0.6", url, **wrong).status_code == 401
        good = {"Authorization": f"Bearer {INGEST_TOKEN}"}
        assert post_from("127.0.0.1", url, **good).status_code == 200
        token_file.write_text("rotated-token-42", encoding="utf-8")  # the Secret is rotated
        assert post_from("127.0.0.1", url, **good).status_code == 401
        rotated = {"Authorization": "Bearer rotated-token-42"}
        assert post_from("127.0.0.1", url, **rotated).status_code == 200


def test_a_token_and_its_file_together_are_refused(tmp_path: Path) -> None:
    token_file = tmp_path / "t"
    token_file.write_text("abc-123", encoding="utf-8")
    with pytest.raises(ConfigError, match="ingest_token_file"):
        load_settings({"ingest_token": "abc-123", "ingest_token_file": str(token_file)})


def test_an_unusable_ingest_token_file_stops_the_start(tmp_path: Path) -> None:
    big = tmp_path / "big"
    big.write_bytes(b"a" * 10_000)
    for path, why in [(tmp_path / "missing", "cannot read"), (big, "over 4096 bytes")]:
        with pytest.raises(ConfigError, match=why):
            load_settings({"ingest_token_file": str(path)}, check_files=True)


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.0.6", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("::ffff:127.0.0.1", True),
        ("0.0.0.0", False),
        ("::", False),
        ("", False),
        ("10.0.0.7", False),
        ("sidecar.internal", False),
        ("localhost.example.com", False),
    ],
)
def test_listens_on_loopback(host: str, loopback: bool) -> None:
    assert listens_on_loopback(host) is loopback
