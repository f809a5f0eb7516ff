"""An upstream that logs the raw bytes of every connection it accepts (differential suite).

It stands where SGLang stands behind a proxy: a raw asyncio server on 127.0.0.1 that parses
requests with httptools (llhttp, the parser SGLang's uvicorn uses) and answers each complete
request at once with ``HTTP/1.1 200 OK``, ``Content-Length`` and keep-alive, the body echoing
``{"url", "case", "method", "body_sha256"}`` (``case``: the request's ``X-Case`` header) so a
client can tell whose request a response answers. A parse error is answered 400 (a body naming
itself ``upstream_error``) and the connection closed.

What it *answered* is not the evidence: at comparison time :meth:`LoggingUpstream.received`
re-parses each connection's recorded bytes from scratch, strictly (a fresh llhttp parser, no
lenient flags), into the complete requests (method, url, body) that reached the upstream, in
the order they completed across all connections.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from dataclasses import dataclass, field

from httptools import HttpParserError, HttpParserUpgrade, HttpRequestParser


@dataclass(frozen=True)
class Received:
    """One complete request as the upstream parsed it from the recorded bytes."""

    method: bytes
    url: bytes
    body: bytes
    case: bytes  # the X-Case header ("": none), for targets that cannot carry a tag ("*")
    conn: int  # which upstream connection carried it
    order: float  # when the live parser completed it (for ordering across connections)

    @property
    def key(self) -> tuple[bytes, bytes, bytes]:
        return (self.method, self.url, self.body)


class _Parsed:
    """llhttp callbacks collecting complete requests."""

    def __init__(self) -> None:
        self.requests: list[tuple[bytes, bytes, bytes]] = []
        self.cases: list[bytes] = []
        self.case = b""
        self.url = b""
        self.body: list[bytes] = []
        self.parser = HttpRequestParser(self)
        self.error: str | None = None

    def on_message_begin(self) -> None:
        self.url = b""
        self.case = b""
        self.body = []

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"x-case":
            self.case = value

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        method = self.parser.get_method()
        self.requests.append((method, self.url, b"".join(self.body)))
        self.cases.append(self.case)

    def feed(self, data: bytes) -> bool:
        """Feed bytes; False once the stream cannot be parsed further (error or upgrade)."""
        if self.error is not None:
            return False
        try:
            self.parser.feed_data(data)
        except HttpParserUpgrade:
            self.error = "upgrade"
            return False
        except HttpParserError as exc:
            self.error = f"{type(exc).__name__}: {exc}"
            return False
        return True


def parse_requests(raw: bytes) -> tuple[list[tuple[bytes, bytes, bytes, bytes]], str | None]:
    """Complete requests (method, url, body, X-Case) in one connection's bytes, and the parse
    error that ended it."""
    parsed = _Parsed()
    parsed.feed(raw)
    return [(*r, c) for r, c in zip(parsed.requests, parsed.cases, strict=True)], parsed.error


@dataclass
class _Conn:
    index: int
    raw: bytearray = field(default_factory=bytearray)
    completed: list[float] = field(default_factory=list)  # live completion time per request
    error: str | None = None


class _Protocol(asyncio.Protocol):
    def __init__(self, owner: LoggingUpstream) -> None:
        self.owner = owner
        self.conn = _Conn(len(owner.conns))
        owner.conns.append(self.conn)
        self.live = _Parsed()
        self.transport: asyncio.Transport | None = None
        self.answered = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.owner.open += 1

    def connection_lost(self, exc: Exception | None) -> None:
        self.owner.open -= 1

    def data_received(self, data: bytes) -> None:
        self.conn.raw += data
        ok = self.live.feed(data)
        transport = self.transport
        assert transport is not None
        while self.answered < len(self.live.requests):
            method, url, body = self.live.requests[self.answered]
            self.answered += 1
            self.conn.completed.append(time.monotonic())
            echo = {
                "url": url.decode("latin-1"),
                "case": self.live.cases[self.answered - 1].decode("latin-1"),
                "method": method.decode("latin-1"),
                "body_sha256": hashlib.sha256(body).hexdigest(),
            }
            payload = json.dumps(echo).encode()
            keep = ok and self.live.parser.should_keep_alive()
            transport.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                + str(len(payload)).encode()
                + (b"\r\nConnection: keep-alive" if keep else b"\r\nConnection: close")
                + b"\r\n\r\n"
                + payload
            )
        if not ok:
            self.conn.error = self.live.error
            if self.live.error != "upgrade":
                self.owner.parse_errors += 1
                payload = json.dumps({"upstream_error": self.live.error}).encode()
                transport.write(
                    b"HTTP/1.1 400 Bad Request\r\nContent-Length: "
                    + str(len(payload)).encode()
                    + b"\r\nConnection: close\r\n\r\n"
                    + payload
                )
            transport.close()
        elif self.answered and not self.live.parser.should_keep_alive():
            transport.close()


class LoggingUpstream:
    """The logging upstream; ``start()`` returns its port."""

    def __init__(self) -> None:
        self.conns: list[_Conn] = []
        self.open = 0
        self.parse_errors = 0
        self.server: asyncio.Server | None = None

    def protocol(self) -> asyncio.Protocol:
        """The protocol of one new upstream connection: what ``start()`` serves each accepted
        socket with, and what tests/tap/wire.py connects to an in-memory transport."""
        return _Protocol(self)

    async def start(self) -> int:
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(self.protocol, "127.0.0.1", 0, backlog=1024)
        return int(self.server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()

    def received(self) -> list[Received]:
        """Every complete request any connection carried, re-parsed strictly from the raw
        bytes, ordered by when it completed."""
        out: list[Received] = []
        for conn in self.conns:
            requests, _ = parse_requests(bytes(conn.raw))
            for k, (method, url, body, case) in enumerate(requests):
                order = conn.completed[k] if k < len(conn.completed) else float("inf")
                out.append(Received(method, url, body, case, conn.index, order))
        out.sort(key=lambda r: r.order)
        return out

    def raw_of(self, conn: int) -> bytes:
        return bytes(self.conns[conn].raw)
