"""Ingest abuse against a real sidecar on uvicorn: surrogates, depth, size, concurrency, auth.

Each test is the regression test of one finding of the hostile review: it fails on the code
before the fix (500s, an open ingest, unbounded queues, uncounted oversized text)."""

from __future__ import annotations

import json
import threading

import httpx
import pytest

from exporter.samplers.decode import GradingRequest, TextOutput
from exporter.samplers.grading import GradingPipeline
from exporter.samplers.tap import handover
from tests.hostile.ingest_support import (
    AUTH,
    BAD,
    GOOD,
    TOKEN,
    graded,
    reason_count,
    sidecar,
)
from tests.support import sample_value, scrape, wait_for

pytestmark = pytest.mark.e2e
SAMPLES = "/api/v1/samples"


def test_lone_surrogate_sample_never_breaks_the_samples_list() -> None:
    # JSON allows a lone "\ud800" escape; Python decodes it to a str UTF-8 cannot encode
    raw = (
        b'{"text": "\\ud800 '
        + json.dumps(BAD)[1:-1].encode()
        + b'", "request_id": "r-\\udfff", "concurrency": 3}'
    )
    with sidecar() as sc:
        r = httpx.post(sc.url + SAMPLES, content=raw, timeout=10)
        assert r.status_code == 200 and r.json()["accepted"] == 1
        wait_for(lambda: graded(sc.url) == 1)
        listed = httpx.get(sc.url + SAMPLES, headers=AUTH, timeout=10)
        assert listed.status_code == 200
        item = json.loads(listed.content.decode("utf-8"))["samples"][0]
        assert item["text"].startswith("\ufffd ") and item["request_id"] == "r-\ufffd"
        assert "\\ud800" not in listed.text


def test_deeply_nested_json_is_a_400_with_its_reason_not_a_500() -> None:
    with sidecar() as sc:
        deep = b"[" * 50_000 + b"]" * 50_000
        r = httpx.post(sc.url + SAMPLES, content=deep, timeout=10)
        assert r.status_code == 400 and r.json()["reason"] == "too_deep"
        # one item too deep in a batch is rejected alone; the good one is graded
        nested: object = "x"
        for _ in range(100):
            nested = [nested]
        batch = {"samples": [{"text": GOOD, "tools": nested}, {"text": GOOD}]}
        r = httpx.post(sc.url + SAMPLES, json=batch, timeout=10)
        assert r.status_code == 200 and r.json()["accepted"] == 1
        assert r.json()["rejected"] == [
            {
                "index": 0,
                "reason": "too_deep",
                "error": "JSON nested deeper than 64 levels; flatten it",
            }
        ]
        wait_for(lambda: graded(sc.url) == 1)


def test_size_bounds_are_413_with_a_reason() -> None:
    limit = handover.BATCH_BYTES  # the lowest the sidecar accepts (the tap's batch)
    with sidecar(ingest_max_bytes=limit) as sc:
        r = httpx.post(sc.url + SAMPLES, content=b'{"text": "' + b"a" * limit + b'"}', timeout=30)
        assert r.status_code == 413 and r.json()["reason"] == "too_large"
        batch = [{"text": "a"}] * 1001
        r = httpx.post(sc.url + SAMPLES, json=batch, timeout=10)
        assert r.status_code == 413 and r.json()["reason"] == "too_large"


def test_grading_queue_is_bounded_in_bytes_and_drops_are_counted() -> None:
    with sidecar(grading_queue_bytes=1 << 20) as sc:
        big = {"text": BAD + " " + "lorem ipsum " * 50_000}  # ~600 kB each
        r = httpx.post(sc.url + SAMPLES, json=[big] * 6, timeout=30)
        body = r.json()
        assert r.status_code == 200 and body["accepted"] + body["dropped"] == 6
        assert body["accepted"] <= 2 and body["dropped"] >= 4  # 1 MiB holds one at a time
        text = scrape(sc.url)
        assert (
            sample_value(text, "dsv4_dsml_samples_dropped_total", source="ingest")
            == body["dropped"]
        )
        pipeline = sc.app.state.sidecar.pipeline  # type: ignore[attr-defined]
        wait_for(lambda: pipeline.pending == 0 and pipeline.pending_bytes == 0)


def test_pending_bytes_never_exceed_the_bound_under_concurrent_submits() -> None:
    pipeline = GradingPipeline(max_pending_bytes=1 << 20)  # not started: nothing drains
    text = "x" * 100_000
    results: list[bool] = []

    def submit() -> None:
        for _ in range(20):
            results.append(
                pipeline.submit(GradingRequest("ingest", TextOutput(text), size=text.__sizeof__()))
            )

    threads = [threading.Thread(target=submit) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert pipeline.pending_bytes <= 1 << 20 and sum(results) == pipeline.pending == 10
    assert pipeline.dropped["ingest"] == 160 - 10


def test_concurrent_large_posts_get_429_or_200_never_5xx() -> None:
    body = json.dumps({"text": BAD + " " + "dolor sit amet " * 300_000}).encode()  # 4.5 MB
    with sidecar(ingest_concurrency=1) as sc:
        codes: list[int] = []

        def post() -> None:
            r = httpx.post(sc.url + SAMPLES, content=body, timeout=60)
            codes.append(r.status_code)
            if r.status_code == 429:
                assert r.headers["Retry-After"] == "1" and r.json()["reason"] == "busy"

        threads = [threading.Thread(target=post) for _ in range(10)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(codes) == 10 and set(codes) <= {200, 429} and 200 in codes


@pytest.mark.parametrize(
    ("header", "ok"),
    [
        (f"Bearer {TOKEN}", True),
        (f"bearer {TOKEN}", True),  # the scheme is case-insensitive (RFC 7235 2.1)
        (f"BEARER {TOKEN}", True),
        (f"Bearer  {TOKEN}", True),  # 1*SP
        (f"Bearer \t{TOKEN}", False),  # a tab is not SP
        (f"Bearer {TOKEN} extra", False),
        (f'Bearer "{TOKEN}"', False),
        (f"Bearer{TOKEN}", False),
        (f"Basic {TOKEN}", False),
        (f"Token {TOKEN}", False),
        ("Bearer", False),
        (f"Bearer {TOKEN.upper()}", False),  # the token itself is case-sensitive
    ],
)
def test_bearer_accepted_case_insensitively_and_nothing_looser(header: str, ok: bool) -> None:
    with sidecar(ingest_token=TOKEN) as sc:
        r = httpx.post(
            sc.url + SAMPLES, json={"text": GOOD}, headers={"Authorization": header}, timeout=10
        )
        assert r.status_code == (200 if ok else 401)
        listed = httpx.get(sc.url + SAMPLES, headers={"Authorization": header}, timeout=10)
        assert listed.status_code == (200 if ok else 401)


def test_oversized_text_sample_is_graded_on_head_and_tail_and_counted() -> None:
    text = BAD + " " + "lorem ipsum dolor " * 330_000  # 5.9 M characters
    with sidecar() as sc:
        r = httpx.post(sc.url + SAMPLES, json={"text": text}, timeout=60)
        assert r.status_code == 200 and r.json()["accepted"] == 1
        wait_for(lambda: graded(sc.url) == 1, timeout=60)
        assert reason_count(sc.url, "oversized") == 1
        assert reason_count(sc.url, "tag_unknown") == 1  # the head was graded


def test_a_slow_body_gets_408_and_frees_the_ingest_slot(monkeypatch) -> None:
    import socket

    import exporter.app

    monkeypatch.setattr(exporter.app, "INGEST_READ_SECONDS", 0.5)
    with sidecar() as sc:
        with socket.create_connection(("127.0.0.1", sc.port), timeout=10) as s:
            s.sendall(
                b"POST /api/v1/samples HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b"Content-Length: 1000\r\n\r\n" + b'{"text": "'  # and then nothing
            )
            head = s.recv(65536)
        assert head.startswith(b"HTTP/1.1 408") and b"too_slow" in head
        r = httpx.post(sc.url + SAMPLES, json={"text": GOOD}, timeout=10)
        assert r.status_code == 200
