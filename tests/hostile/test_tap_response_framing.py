"""Issue 31, item 4: what a misbehaving SGLang's responses can make the tap do, with counters.

The nginx differential (tests/tap/test_response_differential.py) holds the tap to nginx on a
generated corpus; these are the issue's named cases against an in-process tap, each with the
counter that must move: a HEAD answered with a body (the next request on that connection got
the body), a 1xx flood (forwarded without limit), an endless response head (30 -> 670 MB), a
chunked error in the same read as the head (0 bytes to the client, counted 2xx).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from exporter.samplers.tap import Tap, TapConfig
from exporter.samplers.tap.exchange import MAX_INTERIM
from tests.tap.support import RawConnection, counter, read_until_close, run, settle

pytestmark = pytest.mark.e2e

OK = b'{"ok":true}'


@contextlib.asynccontextmanager
async def scripted(answer: bytes, endless: bytes = b"") -> AsyncIterator[tuple[Tap, list[int]]]:
    """A tap in front of an upstream that answers ``/bad`` with ``answer`` (then ``endless``
    repeated until the tap stops reading) and every other path with a 200 echo of it.
    Yields the tap and a one-item list: bytes written of ``endless``."""
    written = [0]

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                path = head.split(b" ", 2)[1]
                if path != b"/bad":
                    body = b'{"path":"%s"}' % path
                    writer.write(
                        b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
                    )
                    await writer.drain()
                    continue
                writer.write(answer)
                await writer.drain()
                while endless and written[0] < 64 << 20:
                    writer.write(endless)
                    written[0] += len(endless)
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    tap = Tap(TapConfig(upstream=f"http://127.0.0.1:{port}", max_idle_upstream=1))
    await tap.start()
    try:
        yield tap, written
    finally:
        await tap.stop(grace=0.5)
        server.close()


def test_a_head_response_with_a_body_never_reaches_the_next_request() -> None:
    planted = b'HTTP/1.1 200 OK\r\nContent-Length: 17\r\n\r\n{"url":"/stolen"}'
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(planted), planted)

    async def scenario() -> None:
        async with scripted(answer) as (tap, _):
            conn = await RawConnection.open(tap.port or 0)
            first = await conn.request("HEAD", "/bad")
            assert first.status == 200 and first.body == b""
            # the same client connection, and a new one: each gets its own answer
            again = await conn.request("GET", "/mine")
            assert again.status == 200 and again.body == b'{"path":"/mine"}'
            await conn.close()
            other = await RawConnection.open(tap.port or 0)
            got = await other.request("GET", "/other")
            assert got.body == b'{"path":"/other"}'
            await other.close()
            assert await settle(
                lambda: counter(tap, "dsv4_tap_upstream_discarded_total", reason="extra_bytes") == 1
            )

    run(scenario())


def test_a_1xx_flood_is_cut_with_502_and_counted() -> None:
    flood = b"HTTP/1.1 100 Continue\r\n\r\n" * (MAX_INTERIM + 1)
    answer = flood + b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(OK), OK)

    async def scenario() -> None:
        async with scripted(answer) as (tap, _):
            conn = await RawConnection.open(tap.port or 0)
            await conn.send(b"GET /bad HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            raw = await read_until_close(conn)
            assert raw.count(b" 100 Continue") <= MAX_INTERIM
            assert raw.startswith(b"HTTP/1.1 502 ")
            assert counter(tap, "dsv4_tap_upstream_discarded_total", reason="too_many_interim") == 1
            assert counter(tap, "dsv4_tap_requests_total", code="502_upstream_failed") == 1

    run(scenario())


def test_interim_responses_up_to_the_limit_are_forwarded() -> None:
    answer = b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" * MAX_INTERIM
    answer += b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(OK), OK)

    async def scenario() -> None:
        async with scripted(answer) as (tap, _):
            conn = await RawConnection.open(tap.port or 0)
            # keep-alive: a client that asked to close gets no interim responses at all
            await conn.send(b"GET /bad HTTP/1.1\r\nHost: t\r\n\r\n")
            raw = b""
            while not raw.endswith(OK):
                piece = await conn.reader.read(65536)
                assert piece, raw
                raw += piece
            await conn.close()
            assert raw.count(b"HTTP/1.1 103 Early Hints\r\n") == MAX_INTERIM
            assert raw.endswith(OK)

    run(scenario())


@pytest.mark.parametrize(
    ("start", "endless"),
    [
        (b"HTTP/1.1 200 OK\r\n", b"X-Pad: " + b"a" * 1000 + b"\r\n"),
        (b"HTTP/1.1 200 OK\r\nX-Pad: ", b"a" * 4096),
        (b"", b"HTTP/1.1 100 Continue\r\nX-Pad: " + b"a" * 2000 + b"\r\n\r\n"),
    ],
    ids=["many_headers", "one_endless_value", "endless_1xx"],
)
def test_an_endless_response_head_is_bounded_and_answered_502(start: bytes, endless: bytes) -> None:
    async def scenario() -> None:
        async with scripted(start, endless) as (tap, written):
            conn = await RawConnection.open(tap.port or 0)
            await conn.send(b"GET /bad HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            raw = await read_until_close(conn)
            assert raw.startswith(b"HTTP/1.1 502 ")
            # the upstream stopped being read long before its 64 MiB (socket buffers aside)
            assert written[0] < 32 << 20
            reasons = ("response_head_too_large", "too_many_interim")
            assert (
                sum(counter(tap, "dsv4_tap_upstream_discarded_total", reason=r) for r in reasons)
                == 1
            )

    run(scenario(), timeout=60)


@pytest.mark.parametrize(
    "body",
    [b"zz\r\nhello\r\n0\r\n\r\n", b"5\r\nhello\r\nzz\r\n", b"5\r\nhelloEXTRA\r\n0\r\n\r\n"],
    ids=["bad_size", "after_a_good_chunk", "data_longer_than_size"],
)
def test_a_chunked_error_in_the_heads_read_is_a_counted_502_not_an_empty_2xx(body: bytes) -> None:
    answer = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + body

    async def scenario() -> None:
        async with scripted(answer) as (tap, _):
            conn = await RawConnection.open(tap.port or 0)
            await conn.send(b"GET /bad HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            raw = await read_until_close(conn)
            assert raw.startswith(b"HTTP/1.1 502 ") and b"upstream_failed" in raw
            assert counter(tap, "dsv4_tap_requests_total", code="502_upstream_failed") == 1
            assert counter(tap, "dsv4_tap_requests_total", code="2xx") == 0

    run(scenario())
