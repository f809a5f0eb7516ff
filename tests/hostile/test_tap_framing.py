"""Hostile HTTP framing on the tap (issue 15, item 4): every case gets an answer, both sides are
closed, nothing hangs past the sweep, and each refusal is counted under a documented reason."""

from __future__ import annotations

import json
import re

import pytest

from exporter.samplers.tap.client import transfer_coding_problem
from exporter.samplers.tap.stats import REJECT_REASONS
from tests.tap.support import (
    RawConnection,
    counter,
    metric_values,
    read_until_close,
    run,
    send_raw,
    settle,
    tap_env,
)

pytestmark = pytest.mark.e2e

HEAD_CHUNKED = (
    b"POST /echo HTTP/1.1\r\nHost: tap-test\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n"
)


def _statuses(raw: bytes) -> list[int]:
    """Status codes of the responses in a raw byte stream (the bodies here never say HTTP/)."""
    return [int(code) for code in re.findall(rb"HTTP/1\.1 (\d{3}) ", raw)]


def test_every_reject_reason_is_exported_from_zero() -> None:
    async def scenario() -> None:
        async with tap_env() as (_, tap, _):
            for reason in REJECT_REASONS:
                key = ("dsv4_tap_rejected_total", (("reason", reason),))
                assert metric_values(tap)[key] == 0

    run(scenario())


def test_bad_chunk_after_the_head_was_forwarded_closes_both_sides() -> None:
    """The issue's case: 50 such requests held 51 SGLang sockets for 100 s."""

    async def scenario() -> None:
        async with tap_env() as (fake, tap, _):
            port = tap.port or 0
            conns = [await RawConnection.open(port) for _ in range(50)]
            try:
                for conn in conns:
                    await conn.send(HEAD_CHUNKED)
                # every head (and first chunk) reached SGLang: each holds a connection there
                assert await settle(lambda: len(fake.conns) == 50)
                for conn in conns:
                    await conn.send(b"ZZZ-not-a-chunk-size\r\n")
                answers = [await read_until_close(conn) for conn in conns]
            finally:
                for conn in conns:
                    await conn.close()
            assert all(_statuses(a) == [400] for a in answers)
            assert all(b"Connection: close" in a for a in answers)
            assert await settle(lambda: not fake.conns), len(fake.conns)
            assert counter(tap, "dsv4_tap_rejected_total", reason="bad_chunked_body") == 50
            assert counter(tap, "dsv4_tap_requests_total", code="400_bad_request") == 50
            assert tap.inflight == 0 and fake.stats.requests == 0

    run(scenario())


@pytest.mark.parametrize(
    ("te", "status", "reason"),
    [
        ("xchunked", 400, "bad_transfer_encoding"),
        ("identity", 400, "bad_transfer_encoding"),
        ("gzip", 400, "bad_transfer_encoding"),
        ("gzip, chunked", 501, "unsupported_transfer_coding"),
    ],
)
def test_transfer_encodings_the_tap_cannot_frame_are_refused(te: str, status: int, reason: str):
    raw = f"POST /echo HTTP/1.1\r\nHost: tap-test\r\nTransfer-Encoding: {te}\r\n\r\n".encode()

    async def scenario() -> None:
        async with tap_env() as (fake, tap, _):
            answer = await send_raw(tap.port or 0, raw + b"5\r\nhello\r\n0\r\n\r\n")
            assert _statuses(answer) == [status]
            assert counter(tap, "dsv4_tap_rejected_total", reason=reason) == 1
            assert fake.stats.requests == 0 and tap.inflight == 0

    run(scenario())


def test_transfer_coding_rules() -> None:
    assert transfer_coding_problem([b"chunked"]) is None
    assert transfer_coding_problem([b" Chunked "]) is None
    assert transfer_coding_problem([b"gzip", b"chunked"]) == "unsupported_transfer_coding"
    assert transfer_coding_problem([b"chunked", b"gzip"]) == "bad_transfer_encoding"
    assert transfer_coding_problem([b""]) == "bad_transfer_encoding"


@pytest.mark.parametrize(
    "head",
    [
        b"GET /health HTTP/1.1\r\n\r\n",
        b"GET /health HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
    ],
)
def test_http11_without_exactly_one_host_is_refused(head: bytes) -> None:
    async def scenario() -> None:
        async with tap_env() as (fake, tap, _):
            assert _statuses(await send_raw(tap.port or 0, head)) == [400]
            assert counter(tap, "dsv4_tap_rejected_total", reason="bad_host") == 1
            assert fake.stats.requests == 0

    run(scenario())


def test_http10_without_host_is_refused() -> None:
    """Issue 22: HTTP/1.0 without Host used to be forwarded as HTTP/1.1 with none."""

    async def scenario() -> None:
        async with tap_env() as (fake, tap, _):
            answer = await send_raw(tap.port or 0, b"GET /health HTTP/1.0\r\n\r\n")
            assert _statuses(answer) == [400]
            assert counter(tap, "dsv4_tap_rejected_total", reason="bad_host") == 1
            ok = await send_raw(tap.port or 0, b"GET /health HTTP/1.0\r\nHost: a\r\n\r\n")
            assert _statuses(ok) == [200]
            assert fake.stats.requests == 1

    run(scenario())


def test_junk_pipelined_after_valid_requests_is_answered_400_after_them() -> None:
    valid = b"GET /echo HTTP/1.1\r\nHost: tap-test\r\n\r\n"

    async def scenario() -> None:
        async with tap_env() as (fake, tap, _):
            answer = await send_raw(tap.port or 0, valid + valid + b"\x00\x01GARBAGE\r\n\r\n")
            assert _statuses(answer) == [200, 200, 400]
            assert answer.endswith(b'"code":400}}')
            assert counter(tap, "dsv4_tap_rejected_total", reason="junk_after_request") == 1
            assert fake.stats.requests == 2 and tap.inflight == 0

    run(scenario())


def test_bad_request_pipelined_after_a_valid_one_is_answered_in_order() -> None:
    valid = b"GET /echo HTTP/1.1\r\nHost: tap-test\r\n\r\n"

    async def scenario() -> None:
        async with tap_env() as (_, tap, _):
            answer = await send_raw(tap.port or 0, valid + b"GET /echo HTTP/1.1\r\n\r\n")
            assert _statuses(answer) == [200, 400]
            first_body = answer.split(b"\r\n\r\n")[1].split(b"HTTP/1.1")[0]
            assert json.loads(first_body)["url"] == "/echo"
            assert counter(tap, "dsv4_tap_rejected_total", reason="bad_host") == 1

    run(scenario())


def test_bad_chunk_in_a_queued_pipelined_request() -> None:
    """The broken request never started: the one before it is answered, then the 400."""
    valid = b"POST /echo HTTP/1.1\r\nHost: tap-test\r\nContent-Length: 2\r\n\r\nhi"

    async def scenario() -> None:
        async with tap_env() as (fake, tap, _):
            answer = await send_raw(tap.port or 0, valid + HEAD_CHUNKED + b"XYZ\r\n")
            assert _statuses(answer) == [200, 400]
            assert counter(tap, "dsv4_tap_rejected_total", reason="bad_chunked_body") == 1
            assert fake.stats.requests == 1 and tap.inflight == 0

    run(scenario())


def test_stalled_request_body_gets_408_at_the_sweep_and_sglang_is_released() -> None:
    async def scenario() -> None:
        async with tap_env(client_idle_timeout=0.3) as (fake, tap, _):
            conn = await RawConnection.open(tap.port or 0)
            try:
                await conn.send(HEAD_CHUNKED)  # and then nothing more
                assert await settle(lambda: len(fake.conns) == 1)
                answer = await read_until_close(conn, timeout=5.0)
            finally:
                await conn.close()
            assert _statuses(answer) == [408]
            assert await settle(lambda: not fake.conns)
            assert counter(tap, "dsv4_tap_rejected_total", reason="body_timeout") == 1
            assert counter(tap, "dsv4_tap_requests_total", code="408_request_timeout") == 1

    run(scenario())
