"""Issue 22: what a hostile client (or a desynchronised SGLang) can make the tap hold or do.

Each test is one bound: a second response glued to the first is dropped and counted, never
handed to the next client; pipelined bytes are not parsed ahead of the request being served;
withheld candidate bodies share one capture budget; the connection cap answers 503; a silent
SGLang gets 504 after the read timeout; the request line and Connection header cannot
redefine framing.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from exporter.samplers.tap import Tap, TapConfig
from tests.tap.support import (
    RawConnection,
    chat_body,
    counter,
    run,
    send_raw,
    settle,
    tap_env,
)

pytestmark = pytest.mark.e2e


@contextlib.asynccontextmanager
async def glued_upstream() -> AsyncIterator[tuple[int, list[bytes]]]:
    """An upstream that answers each request with its response and a second one glued after
    it in the same write (what a desynchronised or smuggled-into SGLang sends)."""
    received: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                received.append(head)
                path = head.split(b" ", 2)[1]
                own = b'{"path":"%s"}' % path
                smuggled = b'{"path":"/smuggled"}'
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(own), own)
                    + b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(smuggled), smuggled)
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1], received
    finally:
        server.close()
        await server.wait_closed()


def test_a_second_response_glued_to_the_first_never_reaches_another_client() -> None:
    async def scenario() -> None:
        async with glued_upstream() as (port, received):
            tap = Tap(TapConfig(upstream=f"http://127.0.0.1:{port}"))
            await tap.start()
            try:
                for n in range(5):
                    conn = await RawConnection.open(tap.port or 0)
                    got = await asyncio.wait_for(conn.request("GET", f"/v1/models/{n}"), 10)
                    await conn.close()
                    assert got.status == 200 and got.reason == b"OK"
                    assert got.body == b'{"path":"/v1/models/%d"}' % n
                assert await settle(
                    lambda: (
                        counter(tap, "dsv4_tap_upstream_discarded_total", reason="extra_bytes") == 5
                    )
                )
                assert len(received) == 5  # every request on a connection of its own
            finally:
                await tap.stop(grace=0.5)

    run(scenario())


def test_pipelined_requests_are_not_parsed_ahead_of_the_one_served() -> None:
    """The issue's case: 10.5 MB of pipelined requests became 61k in-flight exchanges."""

    async def scenario() -> None:
        async with tap_env() as (fake, tap, _):
            one = b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n"
            flood = one * ((4 << 20) // len(one))
            conn = await RawConnection.open(tap.port or 0)
            conn.writer.write(flood)  # not drained: the tap reads it at its own pace
            answers = 0
            seen = b""
            while answers < 200:
                piece = await asyncio.wait_for(conn.reader.read(65536), 10)
                assert piece
                seen += piece
                answers = seen.count(b"HTTP/1.1 200 ")
                assert tap.inflight <= 1
                (client,) = tap._core.clients
                assert len(client.buf) <= (1 << 20)  # one read's worth, not the flood
            conn.writer.transport.abort()
            assert await settle(lambda: tap.inflight == 0)
            assert fake.stats.requests >= 200

    run(scenario())


def test_withheld_candidate_bodies_share_one_capture_budget() -> None:
    """The issue's case: 30 bodies withholding their last bytes took RSS from 72 to 309 MB."""
    budget = 2 << 20
    size = 1 << 20

    async def one(port: int, i: int, release: asyncio.Event) -> int:
        body = chat_body(i, stream=False, first_ms=1).ljust(size, b" ")
        conn = await RawConnection.open(port)
        try:
            head = (
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\n"
                b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
            )
            await conn.send(head + body[:-10])
            await release.wait()
            await conn.send(body[-10:])
            return (await asyncio.wait_for(conn.read_response(), 10)).status
        finally:
            await conn.close()

    async def scenario() -> None:
        async with tap_env(sample_rate=1.0, capture_budget_bytes=budget) as (fake, tap, got):
            release = asyncio.Event()
            tasks = [asyncio.create_task(one(tap.port or 0, i, release)) for i in range(12)]
            assert await settle(lambda: tap.inflight == 12)
            held = tap._core.capture_budget.held
            assert 0 < held <= budget
            release.set()
            statuses = await asyncio.gather(*tasks)
            assert statuses == [200] * 12  # every request forwarded and answered
            assert fake.stats.requests == 12
            dropped = counter(tap, "dsv4_tap_samples_dropped_total", reason="capture_budget")
            assert dropped >= 12 - budget // size
            assert len(got) + dropped == 12
            assert tap._core.capture_budget.held == 0  # every reservation given back

    run(scenario())


def test_connections_past_the_cap_get_503() -> None:
    async def scenario() -> None:
        async with tap_env(max_connections=2) as (_, tap, _):
            port = tap.port or 0
            a, b = await RawConnection.open(port), await RawConnection.open(port)
            assert await settle(lambda: len(tap._core.clients) == 2)
            answer = await send_raw(port, b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n")
            assert answer.startswith(b"HTTP/1.1 503 ")
            assert counter(tap, "dsv4_tap_rejected_total", reason="too_many_connections") == 1
            ok = await a.request("GET", "/health")
            assert ok.status == 200
            await a.close()
            await b.close()
            assert await settle(lambda: len(tap._core.clients) == 0)
            again = await send_raw(
                port, b"GET /health HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
            )
            assert again.startswith(b"HTTP/1.1 200 ")

    run(scenario())


def test_a_silent_upstream_is_timed_out_with_504() -> None:
    async def scenario() -> None:
        async with tap_env(upstream_read_timeout=0.3) as (_, tap, _):
            conn = await RawConnection.open(tap.port or 0)
            body = chat_body(1, stream=False, first_ms=60_000)
            got = await asyncio.wait_for(conn.request("POST", "/v1/chat/completions", body), 10)
            await conn.close()
            assert got.status == 504
            assert counter(tap, "dsv4_tap_aborted_total", reason="upstream_timeout") == 1
            assert counter(tap, "dsv4_tap_requests_total", code="504_upstream_timeout") == 1
            assert await settle(lambda: tap.inflight == 0)

    run(scenario())


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (b"GET /a\r\n\r\n", "bad_version"),
        (b"GET /a HTTP/0.9\r\nHost: t\r\n\r\n", "bad_version"),
        (b"GET /a HTTP/2.0\r\nHost: t\r\n\r\n", "bad_version"),
        (b"GET /a RTSP/1.0\r\nHost: t\r\n\r\n", "bad_version"),
        (b"GET /a HTTP/1.1 \r\nHost: t\r\n\r\n", "bad_version"),
        (b"GET http://other/a HTTP/1.1\r\nHost: t\r\n\r\n", "malformed_head"),
        (b"GET /a HTTP/1.1\r\nHost: \r\n\r\n", "bad_host"),
        (b"GET /a HTTP/1.1\r\nHost: a..b\r\n\r\n", "bad_host"),
        (b"GET /a HTTP/1.1\r\nHost: a/b\r\n\r\n", "bad_host"),
        (b"GET /a HTTP/1.0\r\nHost: t\r\nHost: t\r\n\r\n", "bad_host"),
        (
            b"POST /a HTTP/1.1\r\nHost: t\r\nConnection: content-length\r\nContent-Length: 40"
            b"\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: t\r\n\r\n\r\n",
            "bad_connection",
        ),
        (b"GET /a HTTP/1.1\r\nHost: t\r\nConnection: close, Host\r\n\r\n", "bad_connection"),
        (
            b"POST /a HTTP/1.1\r\nHost: t\r\nConnection: transfer-encoding\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            "bad_connection",
        ),
        (
            b"POST /a HTTP/1.0\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            "bad_transfer_encoding",
        ),
        (b"OPTIONS * HTTP/1.1\r\nHost: t\r\n\r\n", "malformed_head"),
        (b"POST /a HTTP/1.1\r\nHost: t\r\nContent-Length:\t2\r\n\r\nok", "malformed_head"),
        (b"POST /a HTTP/1.1\r\nHost: t\r\nContent-Length: 2\t\r\n\r\nok", "malformed_head"),
        (
            b"POST /a HTTP/1.1\r\nHost: t\r\nTransfer-Encoding:\tchunked\r\n\r\n0\r\n\r\n",
            "bad_transfer_encoding",
        ),
        (
            b"POST /a HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: ,chunked\r\n\r\n0\r\n\r\n",
            "bad_transfer_encoding",
        ),
        # issue 31: paths nginx refuses (a NUL in SGLang's path, bad escapes, above the root)
        *(
            (b"GET " + target + b" HTTP/1.1\r\nHost: t\r\n\r\n", "bad_target")
            for target in (
                b"/a%00b",
                b"/%00",
                b"/a%zz",
                b"/a%2",
                b"/a%",
                b"/..",
                b"//..",
                b"/../x",
                b"/a/b/../../..",
                b"/%2e%2e/x",
                b"/.%2e/x",
                b"/a%2f..%2f..%2fx",
                b"/a%2F%2E%2E%2F%2E%2E",
                b"/a/..%00",
            )
        ),
    ],
)
def test_heads_that_would_redefine_framing_are_refused(raw: bytes, reason: str) -> None:
    async def scenario() -> None:
        async with tap_env() as (fake, tap, _):
            answer = await send_raw(tap.port or 0, raw)
            assert answer.startswith(b"HTTP/1.1 400 ")
            assert counter(tap, "dsv4_tap_rejected_total", reason=reason) == 1
            assert fake.stats.requests == 0

    run(scenario())


@pytest.mark.parametrize(
    "target",
    [b"/a/../b", b"/a/..", b"/a?q=%00", b"/a?x=%zz", b"/a%20b", b"/a%ff", b"/a/./b", b"/a//b"],
)
def test_paths_nginx_accepts_are_forwarded(target: bytes) -> None:
    async def scenario() -> None:
        async with tap_env() as (fake, tap, _):
            answer = await send_raw(
                tap.port or 0,
                b"GET " + target + b" HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
            )
            assert not answer.startswith(b"HTTP/1.1 400 "), answer[:200]
            assert counter(tap, "dsv4_tap_rejected_total", reason="bad_target") == 0
            assert fake.stats.requests == 1

    run(scenario())


def test_a_request_pipelined_after_a_chunked_body_is_refused_after_its_answer() -> None:
    async def scenario() -> None:
        async with tap_env() as (fake, tap, _):
            raw = (
                b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
                b"5\r\nhello\r\n0\r\n\r\nGET /health HTTP/1.1\r\nHost: t\r\n\r\n"
            )
            answer = await send_raw(tap.port or 0, raw)
            assert answer.startswith(b"HTTP/1.1 200 ")
            assert answer.count(b"HTTP/1.1 ") == 2 and b"HTTP/1.1 400 " in answer
            assert counter(tap, "dsv4_tap_rejected_total", reason="pipelined_after_chunked") == 1
            assert fake.stats.requests == 1

    run(scenario())
