"""The client side of the tap: one llhttp request parser per keep-alive connection.

Requests on a connection are served one at a time in arrival order (pipelined ones wait, with
reading paused). Back-pressure is passed through: when the client reads slowly its transport
pauses SGLang's, and when SGLang reads a request body slowly the client's reading is paused.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections import deque
from typing import TYPE_CHECKING

from httptools import HttpParserError, HttpParserUpgrade, HttpRequestParser

from exporter.samplers.tap import http
from exporter.samplers.tap.exchange import Exchange

if TYPE_CHECKING:
    from exporter.samplers.tap.core import TapCore

_perf = time.perf_counter
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


class HeadTooLarge(Exception):
    """Request line + headers over the configured cap."""


class ClientConnection(asyncio.Protocol):
    """One client connection; see the module docstring."""

    __slots__ = (
        "active",
        "closing",
        "core",
        "current",
        "head_bytes",
        "headers",
        "idle_since",
        "parser",
        "pending",
        "reading",
        "t_data",
        "transport",
        "url",
    )

    def __init__(self, core: TapCore) -> None:
        self.core = core
        self.transport: asyncio.Transport | None = None
        self.parser = HttpRequestParser(self)
        self.active: Exchange | None = None
        self.current: Exchange | None = None
        self.pending: deque[Exchange] = deque()
        self.closing = False
        self.reading = False  # inside data_received: exchanges queue upstream writes
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.head_bytes = 0
        self.t_data = 0.0
        self.idle_since = time.monotonic()

    # --- asyncio.Protocol --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop transports are not asyncio.Transport subclasses: no isinstance check
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.core.clients.add(self)

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        self.t_data = _perf()
        self.reading = True
        try:
            self.parser.feed_data(data)
        except HttpParserUpgrade:
            # Upgrade/CONNECT: the head was forwarded without Upgrade; what follows is not
            # HTTP, so the connection ends after this response.
            current = self.current
            if current is not None and not current.req_done:
                current.request_complete()
            for exchange in (self.active, *self.pending):
                if exchange is not None:
                    exchange.close_after = True
            self.closing = True
        except HttpParserError:
            self._bad_request()
        finally:
            self.reading = False
        active = self.active
        if active is not None and active.up_out:
            active.flush_up()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self.parser = None  # type: ignore[assignment]  # break the parser <-> protocol cycle
        self.core.clients.discard(self)
        active, self.active = self.active, None
        pending = list(self.pending)
        self.pending.clear()
        if active is not None:
            active.client_lost()
        for exchange in pending:
            exchange.client_lost()

    def pause_writing(self) -> None:
        active = self.active
        if active is not None and active.up is not None and active.up.transport is not None:
            active.up.transport.pause_reading()

    def resume_writing(self) -> None:
        active = self.active
        if active is not None and active.up is not None and active.up.transport is not None:
            active.up.transport.resume_reading()

    # --- llhttp callbacks (request parser) ---------------------------------------------------

    def on_message_begin(self) -> None:
        self.url = b""
        self.headers = []
        self.head_bytes = 0

    def on_url(self, url: bytes) -> None:
        self.url += url
        self.head_bytes += len(url)
        if self.head_bytes > self.core.config.max_header_bytes:
            raise HeadTooLarge

    def on_header(self, name: bytes, value: bytes) -> None:
        self.head_bytes += len(name) + len(value) + 4
        if self.head_bytes > self.core.config.max_header_bytes:
            raise HeadTooLarge
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        parser = self.parser
        http11 = parser.get_http_version() == "1.1"
        exchange = Exchange(
            self.core,
            self,
            parser.get_method(),
            self.url,
            self.headers,
            keep_alive=http11 and parser.should_keep_alive(),
            t_in=self.t_data,
        )
        self.current = exchange
        if http11 and exchange.expect_continue:
            self.transport.write(_CONTINUE)  # type: ignore[union-attr]
        if self.active is None:
            self.active = exchange
            exchange.start()
        else:
            self.pending.append(exchange)
            self.pause_reading()

    def on_body(self, body: bytes) -> None:
        current = self.current
        if current is not None:
            current.request_body(body)

    def on_message_complete(self) -> None:
        current, self.current = self.current, None
        if current is not None:
            current.request_complete()

    # --- called by exchanges -----------------------------------------------------------------

    def write(self, data: bytes) -> None:
        self.transport.write(data)  # type: ignore[union-attr]

    def pause_reading(self) -> None:
        if not self.closing and self.transport is not None:
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if not self.closing and self.transport is not None:
            self.transport.resume_reading()

    def exchange_done(self, exchange: Exchange) -> None:
        if exchange is not self.active:
            return
        self.active = None
        if exchange.close_after or self.closing:
            self.close()
            return
        self.idle_since = time.monotonic()
        if self.pending:
            nxt = self.pending.popleft()
            self.active = nxt
            nxt.start()
        if not self.pending:
            self.resume_reading()

    def close(self) -> None:
        """Graceful close: what was written is flushed, then FIN."""
        self.closing = True
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    @property
    def idle(self) -> bool:
        return self.active is None and not self.pending

    def _bad_request(self) -> None:
        if self.active is None:
            self.core.stats.requests["400_bad_request"] += 1
            self.write(
                http.error_response(400, "Bad Request", "malformed request", "bad_request", True)
            )
            self.close()
        else:  # mid-response: finish it, then close; what follows is not a request
            self.active.close_after = True
            self.closing = True
