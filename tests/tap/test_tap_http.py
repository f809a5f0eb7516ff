"""HTTP/1.1 details of the tap: hop-by-hop headers, framing on each hop, odd clients."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import hashlib
import json
import socket

import pytest

from exporter.samplers.tap import Tap, TapConfig
from exporter.samplers.tap.client import ClientConnection
from exporter.samplers.tap.exchange import Exchange
from tests.tap.fake_upstream import expected_body
from tests.tap.support import (
    FAST,
    RawConnection,
    build_request,
    chat_body,
    counter,
    one_request,
    run,
    settle,
    tap_env,
)

pytestmark = pytest.mark.e2e
CHAT = "/v1/chat/completions"


def test_hop_by_hop_headers_are_dropped_and_end_to_end_ones_kept() -> None:
    async def scenario() -> None:
        async with tap_env() as (_, tap, _):
            resp = await one_request(
                tap.port or 0,
                "POST",
                "/echo?q=1",
                b"abc",
                headers=[
                    ("Connection", "keep-alive, X-Hop"),
                    ("X-Hop", "1"),
                    ("Keep-Alive", "timeout=5"),
                    ("Proxy-Connection", "keep-alive"),
                    ("TE", "trailers"),
                    ("Authorization", "Bearer sk-pass-through"),
                    ("X-Custom", "Kept"),
                ],
            )
            seen = json.loads(resp.body)
            assert seen["url"] == "/echo?q=1" and seen["body_len"] == 3
            assert seen["headers"] == [
                ["Host", "tap-test"],
                ["Authorization", "Bearer sk-pass-through"],
                ["X-Custom", "Kept"],
                ["Content-Length", "3"],
            ]
            assert resp.header("Content-Length") == str(len(resp.body)).encode()

    run(scenario())


def test_chunked_upload_and_expect_continue_reach_upstream_intact() -> None:
    payload = bytes(range(256)) * 600  # 150 KiB, several reads

    async def scenario() -> None:
        async with tap_env() as (_, tap, _):
            conn = await RawConnection.open(tap.port or 0)
            head = build_request("POST", "/echo", headers=[("Transfer-Encoding", "chunked")])
            pieces = [payload[i : i + 40000] for i in range(0, len(payload), 40000)]
            framed = b"".join(b"%x\r\n%b\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
            await conn.send(head)
            await conn.send(framed)
            seen = json.loads((await conn.read_response()).body)
            assert seen["body_sha256"] == hashlib.sha256(payload).hexdigest()
            assert ["Transfer-Encoding", "chunked"] in seen["headers"]

            head = build_request(
                "POST",
                "/echo",
                headers=[("Expect", "100-continue"), ("Content-Length", str(len(payload)))],
            )
            await conn.send(head)
            interim = await asyncio.wait_for(conn.reader.readuntil(b"\r\n\r\n"), 2)
            assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
            await conn.send(payload)
            resp = await conn.read_response()
            seen = json.loads(resp.body)
            assert seen["body_sha256"] == hashlib.sha256(payload).hexdigest()
            assert not any(k.lower() == "expect" for k, _ in seen["headers"])
            await conn.close()

    run(scenario())


def test_http10_client_gets_a_close_delimited_stream() -> None:
    async def scenario() -> None:
        async with tap_env() as (_, tap, _):
            conn = await RawConnection.open(tap.port or 0)
            body = chat_body(1, stream=True, **FAST)
            await conn.send(build_request("POST", CHAT, body, version="HTTP/1.0"))
            raw = await asyncio.wait_for(conn.reader.read(), 2)  # until the tap closes
            head, rest = raw.split(b"\r\n\r\n", 1)
            assert b"Transfer-Encoding" not in head and b"Connection: close" in head
            assert rest == expected_body(CHAT, body)
            await conn.close()

    run(scenario())


def test_close_delimited_upstream_body_is_rechunked_for_the_client() -> None:
    async def scenario() -> None:
        async with tap_env() as (_, tap, _):
            conn = await RawConnection.open(tap.port or 0)
            for stream in (True, False):
                body = chat_body(1, stream=stream, close_delimited=True, **FAST)
                resp = await conn.request("POST", CHAT, body)
                assert resp.complete and resp.header("Transfer-Encoding") == b"chunked"
                assert resp.body == expected_body(CHAT, body)
            # and the client connection is still usable
            assert (await conn.request("GET", "/health")).status == 200
            await conn.close()
            assert counter(tap, "dsv4_tap_aborted_total", reason="upstream_reset") == 0

    run(scenario())


def test_head_pipelining_and_keep_alive_reuse() -> None:
    async def scenario() -> None:
        async with tap_env() as (_, tap, _):
            conn = await RawConnection.open(tap.port or 0)
            head = await conn.request("HEAD", "/health")
            assert head.status == 200 and head.body == b"" and head.header("Content-Length")
            get = await conn.request("GET", "/health")
            assert get.status == 200 and len(get.body) == int(head.header("Content-Length") or 0)
            # two requests in one write: answered in order on the same connection
            b1 = chat_body(1, stream=True, **FAST)
            b2 = chat_body(2, stream=False, first_ms=0)
            await conn.send(build_request("POST", CHAT, b1) + build_request("POST", CHAT, b2))
            r1 = await conn.read_response()
            r2 = await conn.read_response()
            assert (r1.body, r2.body) == (expected_body(CHAT, b1), expected_body(CHAT, b2))
            await conn.close()

    run(scenario())


def test_malformed_request_gets_400_and_upgrade_is_not_tunnelled() -> None:
    async def scenario() -> None:
        async with tap_env() as (_, tap, _):
            conn = await RawConnection.open(tap.port or 0)
            await conn.send(b"THIS IS NOT HTTP\r\n\r\n")
            resp = await conn.read_response()
            assert resp.status == 400
            assert counter(tap, "dsv4_tap_requests_total", code="400_bad_request") == 1
            await conn.close()

            conn = await RawConnection.open(tap.port or 0)
            await conn.send(
                build_request(
                    "GET", "/echo", headers=[("Connection", "Upgrade"), ("Upgrade", "ws")]
                )
            )
            resp = await conn.read_response()
            seen = json.loads(resp.body)
            assert not any(k.lower() in ("upgrade", "connection") for k, _ in seen["headers"])
            assert resp.header("Connection") == b"close"
            await conn.close()

    run(scenario())


def test_slow_reader_back_pressure_pauses_upstream_and_keeps_bytes_exact(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[str] = []
    original_pause = ClientConnection.pause_writing
    original_made = ClientConnection.connection_made

    def spy(self: ClientConnection) -> None:
        original_pause(self)
        up = self.active.up if self.active is not None else None
        calls.append("paused" if up and not up.transport.is_reading() else "not paused")

    def small_buffer(self: ClientConnection, transport: asyncio.BaseTransport) -> None:
        # loopback buffers megabytes in the kernel; shrink it so back-pressure shows quickly
        transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8192)
        original_made(self, transport)

    monkeypatch.setattr(ClientConnection, "pause_writing", spy)
    monkeypatch.setattr(ClientConnection, "connection_made", small_buffer)

    async def scenario() -> None:
        async with tap_env() as (_, tap, _):
            conn = await RawConnection.open(tap.port or 0)
            body = chat_body(7, stream=True, chunks=6000, first_ms=1, every_ms=0)
            await conn.send(build_request("POST", CHAT, body))
            # not reading: the tap must pause SGLang, not buffer
            assert await settle(lambda: bool(calls))
            assert set(calls) == {"paused"}, calls  # SGLang's socket stopped too
            resp = await conn.read_response()
            assert resp.body == expected_body(CHAT, body)  # ~1 MB, in order, complete
            await conn.close()

    run(scenario())


def test_stop_cuts_streams_after_grace_and_cancels_upstream() -> None:
    async def scenario() -> None:
        async with tap_env() as (fake, tap, _):
            conn = await RawConnection.open(tap.port or 0)
            body = chat_body(1, stream=True, chunks=5000, first_ms=1, every_ms=5, tag="stop")
            await conn.send(build_request("POST", CHAT, body))
            await conn.reader.readuntil(b"\n\n")
            await tap.stop(grace=0.05)
            assert await settle(lambda: "stop" in fake.stats.disconnects)
            assert tap.port is None and tap.inflight == 0
            rest = await asyncio.wait_for(conn.reader.read(), 2)  # connection ends, no hang
            assert isinstance(rest, bytes)
            await conn.close()

    run(scenario())


def test_interim_1xx_and_bodiless_204_are_forwarded_and_connection_reused() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                if b"/early" in head:
                    writer.write(
                        b"HTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\n\r\n"
                        b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc"
                    )
                else:
                    writer.write(b"HTTP/1.1 204 No Content\r\nX-A: 1\r\n\r\n")
                await writer.drain()

    async def scenario() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        tap = Tap(TapConfig(upstream=f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"))
        conn = await RawConnection.open(await tap.start())
        await conn.send(build_request("GET", "/early"))
        want = (
            b"HTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\n\r\n"
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc"
        )
        got = b""
        while len(got) < len(want):
            got += await asyncio.wait_for(conn.reader.read(4096), 2)
        assert got == want
        for _ in range(2):
            resp = await asyncio.wait_for(conn.request("GET", "/nobody"), 2)
            assert (resp.status, resp.body, resp.header("X-A")) == (204, b"", b"1")
        assert counter(tap, "dsv4_tap_upstream_connections_total") == 1
        await conn.close()
        await tap.stop()
        server.close()
        await server.wait_closed()

    run(scenario())


def test_finished_exchanges_are_freed_by_refcount_not_the_cyclic_gc() -> None:
    """Cycles per request would pile up between GC runs, and the GC pauses stall streams."""

    async def scenario() -> int:
        async with tap_env(sample_rate=0.5) as (_, tap, _):
            conn = await RawConnection.open(tap.port or 0)
            for i in range(30):
                await conn.request("POST", CHAT, chat_body(i, stream=i % 2 == 0, **FAST))
            await conn.close()
            await settle(lambda: tap.inflight == 0)
            return sum(isinstance(o, Exchange) for o in gc.get_objects())

    gc.collect()
    gc.disable()
    try:
        assert run(scenario()) == 0
    finally:
        gc.enable()
