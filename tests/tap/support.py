"""Helpers for the tap tests: a raw HTTP/1.1 client and a fake-SGLang + tap harness.

The raw client speaks HTTP by hand (llhttp for parsing) so the tests see exactly what the tap
put on the wire: framing headers, de-chunked body bytes, and whether the stream ended cleanly.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from httptools import HttpResponseParser

from exporter.samplers.tap import CapturedExchange, Tap, TapConfig
from tests.support import settle  # noqa: F401 - the tap suites import it from here
from tests.tap.fake_upstream import FakeUpstream


def run(coro: Coroutine[Any, Any, Any], timeout: float = 30.0, uvloop: bool = False) -> Any:
    """Run a scenario on a fresh loop with an overall timeout (no pytest-asyncio needed)."""

    async def bounded() -> Any:
        return await asyncio.wait_for(coro, timeout)

    if uvloop:
        import uvloop as _uvloop

        return _uvloop.run(bounded())
    return asyncio.run(bounded())


@dataclass
class RawResponse:
    status: int = 0
    reason: bytes = b""
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: bytes = b""
    complete: bool = False  # llhttp saw the end of the message
    http_version: str = ""

    def header(self, name: str) -> bytes | None:
        for key, value in self.headers:
            if key.lower() == name.lower().encode():
                return value
        return None

    def end_to_end(self) -> list[tuple[bytes, bytes]]:
        """Headers minus per-hop framing, lower-cased names (what must match direct)."""
        hop = {b"connection", b"keep-alive", b"transfer-encoding"}
        return [(k.lower(), v) for k, v in self.headers if k.lower() not in hop]


class _Collector:
    def __init__(self, out: RawResponse) -> None:
        self.out = out
        self.pieces: list[bytes] = []
        self.done = False

    def on_status(self, reason: bytes) -> None:
        self.out.reason += reason

    def on_header(self, name: bytes, value: bytes) -> None:
        self.out.headers.append((name, value))

    def on_body(self, body: bytes) -> None:
        self.pieces.append(body)

    def on_message_complete(self) -> None:
        self.done = True


class RawConnection:
    """One keep-alive connection; ``request`` sends bytes and reads one response."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, port: int) -> RawConnection:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    async def send(self, raw: bytes) -> None:
        self.writer.write(raw)
        await self.writer.drain()

    async def read_response(self, head_request: bool = False) -> RawResponse:
        """Read one response; a HEAD response ends with its head (llhttp cannot know that)."""
        out = RawResponse()
        collector = _Collector(out)
        parser = HttpResponseParser(collector)
        seen = b""
        while not collector.done:
            data = await self.reader.read(65536)
            if not data:
                break
            seen += data
            parser.feed_data(data)
            if head_request and b"\r\n\r\n" in seen:
                collector.done = True
        out.status = parser.get_status_code() if seen else 0
        out.body = b"".join(collector.pieces)
        out.complete = collector.done
        out.http_version = parser.get_http_version()
        return out

    async def request(
        self,
        method: str,
        path: str,
        body: bytes = b"",
        headers: list[tuple[str, str]] | None = None,
    ) -> RawResponse:
        await self.send(build_request(method, path, body, headers))
        return await self.read_response(head_request=method == "HEAD")

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(Exception):
            await self.writer.wait_closed()


async def read_until_close(conn: RawConnection, timeout: float = 10.0) -> bytes:
    """Everything until the peer closes the connection (fails the test on a hang)."""
    data = b""
    while True:
        piece = await asyncio.wait_for(conn.reader.read(65536), timeout)
        if not piece:
            return data
        data += piece


async def send_raw(port: int, raw: bytes) -> bytes:
    """Send ``raw`` on a new connection and return all it answered until it was closed."""
    conn = await RawConnection.open(port)
    try:
        await conn.send(raw)
        return await read_until_close(conn)
    finally:
        await conn.close()


def build_request(
    method: str,
    path: str,
    body: bytes = b"",
    headers: list[tuple[str, str]] | None = None,
    version: str = "HTTP/1.1",
) -> bytes:
    lines = [f"{method} {path} {version}", "Host: tap-test"]
    names = {k.lower() for k, _ in headers or []}
    for key, value in headers or []:
        lines.append(f"{key}: {value}")
    if body and "content-length" not in names and "transfer-encoding" not in names:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def one_request(
    port: int, method: str, path: str, body: bytes = b"", **kw: Any
) -> RawResponse:
    conn = await RawConnection.open(port)
    try:
        return await conn.request(method, path, body, **kw)
    finally:
        await conn.close()


def chat_body(i: int, *, stream: bool, path: str = "/v1/chat/completions", **fake: Any) -> bytes:
    """A distinct request body; ``fake`` steers the fake upstream (see fake_upstream)."""
    obj: dict[str, Any] = {"model": "deepseek-v4", "stream": stream}
    if path == "/generate":
        obj["text"] = f"prompt {i}"
    else:
        obj["messages"] = [{"role": "user", "content": f"question number {i}"}]
    if fake:
        obj["fake"] = fake
    return json.dumps(obj).encode()


FAST = {"first_ms": 3, "every_ms": 1, "chunks": 12}


@contextlib.asynccontextmanager
async def tap_env(
    on_sample: Callable[[CapturedExchange], Any] | None = None,
    *,
    upstream_idle: float | None = None,
    **config: Any,
) -> AsyncIterator[tuple[FakeUpstream, Tap, list[CapturedExchange]]]:
    """Fake SGLang + a tap in front of it; samples land in the yielded list by default."""
    fake = FakeUpstream(idle_timeout=upstream_idle)
    port = await fake.start()
    got: list[CapturedExchange] = []

    async def collect(sample: CapturedExchange) -> None:
        got.append(sample)

    tap = Tap(
        TapConfig(upstream=f"http://127.0.0.1:{port}", **config),
        on_sample=collect if on_sample is None else on_sample,
    )
    await tap.start()
    try:
        yield fake, tap, got
    finally:
        await tap.stop(grace=0.5)
        await fake.stop()


def metric_values(tap: Tap) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """{(sample name, sorted labels): value} from the tap's collector."""
    out = {}
    for fam in tap.collect():
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def counter(tap: Tap, name: str, **labels: str) -> float:
    return metric_values(tap).get((name, tuple(sorted(labels.items()))), 0.0)
