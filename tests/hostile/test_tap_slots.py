"""Issue 31, item 1: per-connection limits of the tap, on real sockets on loopback.

512 sockets that never read shut every other user out (503 for the 95 s measured): no
timeout applied to a paused stream and one address could hold every slot. Here a client that
stops reading is cut after ``client_send_timeout`` (counted), one address holds at most
``max_connections_per_client`` slots (counted), and a user on another address is served
throughout. Conditions are awaited, never slept for; nothing asserts on timing.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from exporter.samplers.tap import Tap, TapConfig
from tests.support import serve_with_tap
from tests.tap.support import RawConnection, counter, run, settle

pytestmark = pytest.mark.e2e

BIG = 256 << 20  # far more than any socket buffer: the tap must pause on a client not reading


@contextlib.asynccontextmanager
async def tap_over_big_upstream(**config: object) -> AsyncIterator[Tap]:
    """A tap in front of an upstream that answers ``/big`` with ``BIG`` bytes (written as the
    tap reads them) and anything else with a small 200."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                if head.split(b" ", 2)[1] != b"/big":
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                    await writer.drain()
                    continue
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % BIG)
                piece = b"x" * (1 << 20)
                for _ in range(BIG >> 20):
                    writer.write(piece)
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    tap = Tap(TapConfig(upstream=f"http://127.0.0.1:{port}", **config))  # type: ignore[arg-type]
    await tap.start("127.0.0.1", 0)
    try:
        yield tap
    finally:
        await tap.stop(grace=0.5)
        server.close()


async def _open_from(source: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection from ``source`` (any 127.0.0.0/8 address is this host's loopback), with a
    small receive buffer so that a client that does not read fills it quickly."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.bind((source, 0))
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    return await asyncio.open_connection(sock=sock)


async def _served(port: int) -> bool:
    conn = await RawConnection.open(port)
    try:
        got = await conn.request("GET", "/small", headers=[("Connection", "close")])
    finally:
        await conn.close()
    return got.status == 200 and got.body == b"ok"


def test_a_client_that_stops_reading_is_cut_after_the_send_timeout() -> None:
    async def scenario() -> None:
        async with tap_over_big_upstream(client_send_timeout=1.0) as tap:
            port = tap.port or 0
            _reader, writer = await _open_from("127.0.0.2", port)
            writer.write(b"GET /big HTTP/1.1\r\nHost: t\r\n\r\n")
            await writer.drain()
            # never read: the tap's write buffer fills, it pauses, then it gives up
            assert await settle(
                lambda: counter(tap, "dsv4_tap_aborted_total", reason="client_send_timeout") == 1
            )
            assert counter(tap, "dsv4_tap_aborted_total", reason="client_disconnect") == 0
            assert await settle(lambda: tap.inflight == 0)
            assert await _served(port)  # everyone else still is
            writer.transport.abort()

    run(scenario(), timeout=60)


def test_one_address_cannot_take_every_slot_and_others_are_served() -> None:
    async def scenario() -> None:
        async with tap_over_big_upstream(max_connections_per_client=3) as tap:
            port = tap.port or 0
            held = []
            for _ in range(3):
                reader, writer = await _open_from("127.0.0.2", port)
                writer.write(b"GET /big HTTP/1.1\r\nHost: t\r\n\r\n")  # and never read
                held.append(writer)
            assert await settle(lambda: tap.inflight == 3)
            reader, writer = await _open_from("127.0.0.2", port)
            answer = await reader.read()  # the tap answers and closes
            writer.transport.abort()
            assert answer.startswith(b"HTTP/1.1 503 "), answer[:200]
            assert (
                counter(tap, "dsv4_tap_rejected_total", reason="too_many_client_connections") == 1
            )
            assert await _served(port)  # 127.0.0.1 is another address: its own slots
            for w in held:  # slots come back when the connections go
                w.transport.abort()
            assert await settle(lambda: tap.inflight == 0)
            reader, writer = await _open_from("127.0.0.2", port)
            writer.write(b"GET /small HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            answer = await reader.read()
            writer.transport.abort()
            assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]

    run(scenario(), timeout=60)


def test_the_per_address_cap_is_a_setting_of_the_real_cli(tmp_path: Path) -> None:
    """``serve --tap-max-connections-per-client 2``: a third connection from one address gets
    503 while another address is served (the setting reaches the tap)."""

    async def scenario() -> None:
        held = [await _open_from("127.0.0.2", tap_port) for _ in range(2)]
        reader, writer = await _open_from("127.0.0.2", tap_port)
        answer = await reader.read()
        writer.transport.abort()
        assert answer.startswith(b"HTTP/1.1 503 "), answer[:200]
        conn = await RawConnection.open(tap_port)
        got = await conn.request("GET", "/x", headers=[("Connection", "close")])
        await conn.close()
        assert got.status == 502  # served (by the tap: SGLang is not there), not refused
        for _, w in held:
            w.transport.abort()

    proc, _, tap_port = serve_with_tap(
        "http://127.0.0.1:9",  # nothing there: requests get 502, slots still count
        tmp_path / "serve.stderr",
        "--tap-max-connections-per-client",
        "2",
    )
    try:
        run(scenario(), timeout=60)
    finally:
        proc.terminate()
        proc.wait(15)
