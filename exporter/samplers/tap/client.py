"""The client side of the tap: one llhttp request parser per keep-alive connection.

Requests on a connection are served one at a time in arrival order (pipelined ones wait, with
reading paused). Back-pressure is passed through: when the client reads slowly its transport
pauses SGLang's, and when SGLang reads a request body slowly the client's reading is paused.

Hostile input is refused, counted under a reason (``dsv4_tap_rejected_total``) and ends the
connection: what can still be answered is answered (responses to complete requests before the
bad bytes), then the tap's own 400/408/501 with ``Connection: close``. A request whose body
framing breaks after its head was forwarded has its SGLang connection aborted at once, so the
half-sent request neither waits for bytes that never come nor returns to the pool.
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


class Rejected(Exception):
    """Raised from a parser callback to refuse a request (llhttp then reports a callback error;
    the connection keeps the reason in ``rejection``)."""


# reason -> (status, reason phrase, message) of the tap's own answer
_ANSWERS = {
    "malformed_head": (400, "Bad Request", "malformed request"),
    "head_too_large": (400, "Bad Request", "request head too large"),
    "bad_host": (400, "Bad Request", "HTTP/1.1 request needs exactly one Host header"),
    "bad_transfer_encoding": (400, "Bad Request", "Transfer-Encoding must end with chunked"),
    "unsupported_transfer_coding": (501, "Not Implemented", "only chunked transfer coding"),
    "bad_chunked_body": (400, "Bad Request", "malformed request body"),
    "body_timeout": (408, "Request Timeout", "request body stalled"),
    "junk_after_request": (400, "Bad Request", "malformed request"),
}
_CODES = {400: "400_bad_request", 408: "408_request_timeout", 501: "501_not_implemented"}


def error_answer(reason: str) -> bytes:
    status, phrase, message = _ANSWERS[reason]
    return http.error_response(status, phrase, message, "bad_request", True)


def transfer_coding_problem(values: list[bytes]) -> str | None:
    """Why a request's Transfer-Encoding cannot be framed (RFC 9112 §6.1), or None when it is
    plain ``chunked``: the final coding must be chunked (else 400), chunked only once, and the
    tap (like SGLang's uvicorn) decodes no other coding (501)."""
    codings = [c.strip().lower() for v in values for c in v.split(b",") if c.strip()]
    if not codings or codings[-1] != b"chunked" or codings.count(b"chunked") > 1:
        return "bad_transfer_encoding"
    if len(codings) > 1:
        return "unsupported_transfer_coding"
    return None


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
        "last_read",
        "parser",
        "paused",
        "pending",
        "reading",
        "rejection",
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
        self.paused = False  # reading paused by the tap itself (back-pressure, pipelining)
        self.reading = False  # inside data_received: exchanges queue upstream writes
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.head_bytes = 0
        self.t_data = 0.0
        self.idle_since = self.last_read = time.monotonic()
        # reason of a refusal answered after the responses already owed (pipelining)
        self.rejection: str | None = None

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
        self.last_read = time.monotonic()
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
            self._refuse(self.rejection or self._parse_error_reason())
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
            self.rejection = "head_too_large"
            raise Rejected

    def on_header(self, name: bytes, value: bytes) -> None:
        self.head_bytes += len(name) + len(value) + 4
        if self.head_bytes > self.core.config.max_header_bytes:
            self.rejection = "head_too_large"
            raise Rejected
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        parser = self.parser
        http11 = parser.get_http_version() == "1.1"
        problem = self._head_problem(http11)
        if problem is not None:
            self.rejection = problem
            raise Rejected
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

    def _head_problem(self, http11: bool) -> str | None:
        """A complete head the tap must refuse rather than forward (None: forward it)."""
        hosts = 0
        codings: list[bytes] = []
        for name, value in self.headers:
            lname = name.lower()
            if lname == b"host":
                hosts += 1
            elif lname == b"transfer-encoding":
                codings.append(value)
        if http11 and hosts != 1:
            return "bad_host"
        if codings:
            return transfer_coding_problem(codings)
        return None

    def _parse_error_reason(self) -> str:
        """Where llhttp failed: inside a body whose head was accepted, after a complete request
        (bytes pipelined behind it), or in a head."""
        if self.current is not None and not self.current.req_done:
            return "bad_chunked_body"
        if self.active is not None:
            return "junk_after_request"
        return "malformed_head"

    # --- called by exchanges -----------------------------------------------------------------

    def write(self, data: bytes) -> None:
        self.transport.write(data)  # type: ignore[union-attr]

    def pause_reading(self) -> None:
        if not self.closing and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if not self.closing and self.transport is not None:
            if self.paused:  # the stall clock restarts: the pause was the tap's doing
                self.paused = False
                self.last_read = time.monotonic()
            self.transport.resume_reading()

    def exchange_done(self, exchange: Exchange) -> None:
        if exchange is not self.active:
            return
        self.active = None
        if exchange.close_after:
            self.close()
            return
        self.idle_since = time.monotonic()
        if self.pending:
            nxt = self.pending.popleft()
            self.active = nxt
            nxt.start()
            if not self.pending:
                self.resume_reading()
            return
        if self.rejection is not None:  # every owed response is out: now the refusal
            self._answer_and_close(self.rejection)
        elif self.closing:
            self.close()
        else:
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

    def body_stalled_since(self, deadline: float) -> bool:
        """True when a request body is still owed and nothing was read since ``deadline``
        (not while the tap itself paused reading: a slow SGLang is not a stalled client)."""
        active = self.active
        return (
            active is not None
            and not active.req_done
            and not self.paused
            and self.last_read < deadline
        )

    def _refuse(self, reason: str) -> None:
        """Count a refusal and end the connection; see the module docstring."""
        self.core.stats.rejected[reason] += 1
        self.rejection = reason
        self.closing = True  # nothing after the bad bytes is parsed
        current, self.current = self.current, None
        if current is not None and not current.req_done:
            if current is self.active:  # its head already went to SGLang
                self.rejection = None
                current.request_broken(error_answer(reason), _CODES[_ANSWERS[reason][0]])
                return
            self.pending.remove(current)  # queued behind others: never started
            current.discard()
        if self.active is None:
            self._answer_and_close(reason)

    def _answer_and_close(self, reason: str) -> None:
        self.rejection = None
        self.core.stats.requests[_CODES[_ANSWERS[reason][0]]] += 1
        if self.transport is not None and not self.transport.is_closing():
            self.write(error_answer(reason))
        self.close()

    def body_stalled(self) -> None:
        """The idle sweep found the request body stalled: refuse it like a broken one."""
        if not self.closing:
            self._refuse("body_timeout")
