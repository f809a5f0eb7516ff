"""The tap fails open: faults upstream, at the client and in the sampling path never change,
delay or break a response beyond what the fault itself does; each counter moves."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading

import httpx
import pytest
from openai import AsyncOpenAI

from exporter.samplers.tap import CapturedExchange, Tap, TapConfig
from exporter.samplers.tap.sampling import Capture
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


def _events(body: bytes) -> list[bytes]:
    return [e for e in body.split(b"\n\n") if e]


def test_upstream_reset_mid_stream_gives_bytes_so_far_then_a_prompt_close() -> None:
    async def scenario() -> None:
        async with tap_env(sample_rate=1.0) as (_, tap, samples):
            body = chat_body(1, stream=True, reset_after=5, first_ms=3, every_ms=2)
            # a hang would fail here (the tap must close after the bytes so far)
            resp = await asyncio.wait_for(one_request(tap.port or 0, "POST", CHAT, body), 30)
            assert resp.status == 200 and not resp.complete  # truncation stays visible
            full = expected_body(CHAT, body.replace(b', "reset_after": 5', b""))
            assert resp.body == b"".join(_events(full)[i] + b"\n\n" for i in range(5))
            assert await settle(
                lambda: counter(tap, "dsv4_tap_aborted_total", reason="upstream_reset") == 1
            )
            assert counter(tap, "dsv4_tap_requests_total", code="2xx") == 1
            assert await settle(lambda: len(samples) == 1)
            assert not samples[0].complete and samples[0].response_body == resp.body

            # Content-Length body cut in half: the client gets the half, then EOF
            body = chat_body(2, stream=False, reset_after=1, first_ms=1)
            resp = await one_request(tap.port or 0, "POST", CHAT, body)
            length = int(resp.header("Content-Length") or 0)
            assert not resp.complete and 0 < len(resp.body) < length

            # the OpenAI client yields what arrived, then raises instead of hanging
            client = AsyncOpenAI(
                base_url=f"http://127.0.0.1:{tap.port}/v1", api_key="k", max_retries=0
            )
            got = []
            with pytest.raises(Exception):  # noqa: B017 - httpx/openai truncation errors vary
                stream = await client.chat.completions.create(
                    model="m",
                    messages=[{"role": "user", "content": "x"}],
                    stream=True,
                    extra_body={"fake": {"reset_after": 4, "first_ms": 2, "every_ms": 2}},
                )
                async for chunk in stream:
                    got.append(chunk)
            assert len(got) == 4
            await client.close()

    run(scenario())


def test_client_disconnect_cancels_the_upstream_request() -> None:
    async def scenario() -> None:
        async with tap_env() as (fake, tap, _):
            conn = await RawConnection.open(tap.port or 0)
            body = chat_body(1, stream=True, chunks=2000, first_ms=5, every_ms=10, tag="gone")
            await conn.send(build_request("POST", CHAT, body))
            first = await conn.reader.readuntil(b"\n\n")  # head + first event
            assert b"200 OK" in first
            assert await settle(lambda: tap.inflight == 1)
            conn.writer.transport.abort()
            # the stream had 20 s left: SGLang sees the cancel long before it would end
            assert await settle(lambda: "gone" in fake.stats.disconnects)
            assert await settle(lambda: tap.inflight == 0)
            assert counter(tap, "dsv4_tap_aborted_total", reason="client_disconnect") == 1
            assert counter(tap, "dsv4_tap_requests_total", code="2xx") == 1

            # leaving before any response head counts as client_closed
            conn = await RawConnection.open(tap.port or 0)
            body = chat_body(2, stream=False, first_ms=3000, tag="early")
            await conn.send(build_request("POST", CHAT, body))
            assert await settle(lambda: tap.inflight == 1)
            conn.writer.transport.abort()
            assert await settle(lambda: "early" in fake.stats.disconnects)
            assert await settle(
                lambda: counter(tap, "dsv4_tap_requests_total", code="client_closed") == 1
            )

    run(scenario())


def test_raising_consumer_never_affects_responses_and_is_counted() -> None:
    def explode(sample: CapturedExchange) -> None:
        raise RuntimeError("grader bug")

    async def scenario() -> None:
        async with tap_env(on_sample=explode, sample_rate=1.0) as (_, tap, _):
            conn = await RawConnection.open(tap.port or 0)
            for i in range(40):
                body = chat_body(i, stream=i % 2 == 0, **FAST)
                resp = await conn.request("POST", CHAT, body)
                assert resp.complete and resp.body == expected_body(CHAT, body)
            await conn.close()
            assert await settle(
                lambda: counter(tap, "dsv4_tap_sampling_errors_total", stage="consumer") == 40
            )
            assert counter(tap, "dsv4_tap_sampled_total") == 40

    run(scenario())


def test_slow_consumers_only_fill_the_queue_and_drops_are_counted() -> None:
    release = asyncio.Event()

    async def stuck(sample: CapturedExchange) -> None:
        await release.wait()

    unblocked = threading.Event()

    def blocking(sample: CapturedExchange) -> None:
        unblocked.wait(30)  # blocks its worker thread until the burst is over: not the loop

    async def burst(port: int, n: int) -> None:
        """``n`` requests, all forwarded while every consumer is stuck: a tap that waited on
        its consumers would never finish this (the wait_for below fails instead)."""
        conn = await RawConnection.open(port)
        for i in range(n):
            body = chat_body(1000 + i, stream=True, **FAST)
            resp = await asyncio.wait_for(conn.request("POST", CHAT, body), 30)
            assert resp.complete and resp.body == expected_body(CHAT, body)
        await conn.close()

    async def scenario() -> None:
        async with tap_env(on_sample=stuck, sample_rate=1.0, queue_size=2) as (_, tap, _):
            await burst(tap.port or 0, 20)
            # one sample held by the consumer, two queued, the rest dropped
            assert counter(tap, "dsv4_tap_samples_dropped_total", reason="queue_full") == 17
            assert counter(tap, "dsv4_tap_sampled_total") == 3
            release.set()
        async with tap_env(on_sample=blocking, sample_rate=1.0, queue_size=4) as (_, tap, _):
            await burst(tap.port or 0, 10)
            try:
                assert counter(tap, "dsv4_tap_samples_dropped_total", reason="queue_full") >= 4
            finally:  # a failed assertion must not leave the consumers blocked for 30 s
                unblocked.set()

    run(scenario())


def test_capture_errors_and_oversized_samples_never_touch_the_response(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(self: Capture, piece: bytes) -> None:
        raise MemoryError("capture bug")

    async def scenario() -> None:
        async with tap_env(sample_rate=1.0, max_sample_bytes=1500) as (_, tap, samples):
            body = chat_body(1, stream=True, **FAST)  # ~2 KB of events: over the limit
            resp = await one_request(tap.port or 0, "POST", CHAT, body)
            assert resp.body == expected_body(CHAT, body)
            assert counter(tap, "dsv4_tap_samples_dropped_total", reason="too_large") == 1
            monkeypatch.setattr(Capture, "add_response", broken)
            body = chat_body(2, stream=True, chunks=3, first_ms=1, every_ms=1)
            resp = await one_request(tap.port or 0, "POST", CHAT, body)
            assert resp.complete and resp.body == expected_body(CHAT, body)
            assert counter(tap, "dsv4_tap_sampling_errors_total", stage="capture") == 1
            assert samples == []

    run(scenario())


def test_upstream_errors_pass_through_unchanged() -> None:
    async def scenario() -> None:
        async with tap_env() as (fake, tap, _):
            direct_port = int(fake.url.rsplit(":", 1)[1])
            for status in (500, 429):
                body = chat_body(status, stream=True, status=status)
                d = await one_request(direct_port, "POST", CHAT, body)
                t = await one_request(tap.port or 0, "POST", CHAT, body)
                assert (t.status, t.reason, t.body) == (d.status, d.reason, d.body)
                assert t.status == status and t.body == d.body != b""
                assert t.headers == d.headers  # same names, case, order, values
                assert t.header("Content-Length") == str(len(d.body)).encode()
            assert t.header("Retry-After") == b"7"
            assert counter(tap, "dsv4_tap_requests_total", code="5xx") == 1
            assert counter(tap, "dsv4_tap_requests_total", code="4xx") == 1
            resp = await one_request(tap.port or 0, "GET", "/nope")
            assert resp.status == 404

    run(scenario())


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unreachable_upstream_gives_502_json_and_secrets_are_never_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)

    async def scenario() -> None:
        tap = Tap(TapConfig(upstream=f"http://127.0.0.1:{_closed_port()}", sample_rate=1.0))
        port = await tap.start()
        async with httpx.AsyncClient() as client:
            resp = await client.post(
                f"http://127.0.0.1:{port}{CHAT}",
                content=chat_body(1, stream=True),
                headers={"Authorization": "Bearer sk-SECRET-123"},
            )
        assert resp.status_code == 502
        assert resp.json()["error"]["type"] == "upstream_unreachable"
        assert counter(tap, "dsv4_tap_requests_total", code="502_upstream_unreachable") == 1
        await tap.stop()

    run(scenario())
    assert "SECRET" not in caplog.text
    assert "upstream unreachable" in caplog.text  # the log line exists, without headers


async def _serve_then_close(behaviour: bytes) -> tuple[asyncio.Server, int]:
    """An upstream that reads a request, writes ``behaviour`` and closes the connection."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(behaviour)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, int(server.sockets[0].getsockname()[1])


def test_upstream_closing_or_garbling_before_a_head_gives_502() -> None:
    async def scenario() -> None:
        for behaviour in (b"", b"NOT HTTP AT ALL\r\n\r\n"):
            server, port = await _serve_then_close(behaviour)
            tap = Tap(TapConfig(upstream=f"http://127.0.0.1:{port}"))
            tport = await tap.start()
            resp = await one_request(tport, "GET", "/v1/models")
            assert resp.status == 502 and b"upstream_failed" in resp.body
            assert counter(tap, "dsv4_tap_requests_total", code="502_upstream_failed") == 1
            await tap.stop()
            server.close()
            await server.wait_closed()

    run(scenario())


def test_pooled_connection_closed_while_idle_is_not_reused() -> None:
    async def scenario() -> None:
        # SGLang-like upstream closing idle keep-alive connections after 0.1 s, while the
        # tap would keep them for 30 s: the second request meets a closed connection.
        async with tap_env(upstream_idle=0.1, upstream_idle_timeout=30.0) as (fake, tap, _):
            conn = await RawConnection.open(tap.port or 0)
            body = chat_body(1, stream=False, first_ms=0)
            assert (await conn.request("POST", CHAT, body)).status == 200
            # closed by the upstream, and seen closed by the tap: until the tap's loop has read
            # the FIN the connection looks alive and a request sent on it meets the close (a
            # window a loaded machine can stretch; this test is about the pool skipping it)
            pool = tap._core.pool
            assert await settle(lambda: fake.stats.idle_closes == 1 and pool.idle_count == 0)
            resp = await conn.request("POST", CHAT, body)
            assert resp.status == 200 and resp.body == expected_body(CHAT, body)
            assert counter(tap, "dsv4_tap_upstream_connections_total") == 2
            await conn.close()

    run(scenario())


def test_request_on_a_pooled_connection_closed_mid_send_is_replayed_once() -> None:
    """The keep-alive race: SGLang closes a pooled connection just as the tap reuses it."""
    served: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # answers the first request of each connection, drops the connection on the second
        await reader.readuntil(b"\r\n\r\n")
        served.append(1)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        await reader.readuntil(b"\r\n\r\n")
        writer.transport.abort()

    async def scenario() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = int(server.sockets[0].getsockname()[1])
        tap = Tap(TapConfig(upstream=f"http://127.0.0.1:{port}"))
        conn = await RawConnection.open(await tap.start())
        first = await conn.request("GET", "/health")
        second = await conn.request("GET", "/health")
        assert (first.status, first.body, second.status, second.body) == (200, b"ok", 200, b"ok")
        assert counter(tap, "dsv4_tap_upstream_connections_total") == 2 == len(served)
        await conn.close()
        await tap.stop()
        server.close()
        await server.wait_closed()

    run(scenario())


def test_metrics_inflight_latency_and_connections_move() -> None:
    async def scenario() -> None:
        async with tap_env() as (_, tap, _):
            conn = await RawConnection.open(tap.port or 0)
            await conn.send(build_request("POST", CHAT, chat_body(1, stream=True, **FAST)))
            assert await settle(lambda: tap.inflight == 1)
            assert counter(tap, "dsv4_tap_inflight_requests") == 1
            await conn.read_response()
            assert await settle(lambda: tap.inflight == 0)
            for i in range(4):
                await conn.request("GET", "/health")
                assert i >= 0
            await conn.close()
            assert counter(tap, "dsv4_tap_added_latency_seconds_count") == 5
            total = counter(tap, "dsv4_tap_added_latency_seconds_sum")
            assert 0 < total < 0.5
            assert counter(tap, "dsv4_tap_added_latency_seconds_bucket", le="+Inf") == 5
            assert counter(tap, "dsv4_tap_upstream_connections_total") == 1

    run(scenario())
