"""The client side of the tap: one llhttp request parser per keep-alive connection.

The tap decides where each request begins and ends, and llhttp only checks what it is handed:
between requests the connection's bytes are buffered until a whole head (up to the first
CRLFCRLF, at most ``max_header_bytes``) is there; its request line must be
``method SP target SP HTTP/1.1`` or ``HTTP/1.0`` (anything else, HTTP/0.9 and RTSP included, is
refused); then llhttp gets exactly that head, and exactly ``Content-Length`` body bytes after
it. So no byte of a later request is ever parsed while an earlier one is still being served:
pipelined bytes wait unparsed (reading paused) until the response before them is complete,
and the tap holds at most one read of them. A chunked body is the one place llhttp finds the
end itself; bytes pipelined after a chunked body in the same read are refused.

Back-pressure is passed through: when the client reads slowly its transport pauses SGLang's,
and when SGLang reads a request body slowly the client's reading is paused.

Hostile input is refused, counted under a reason (``dsv4_tap_rejected_total``) and ends the
connection: what can still be answered is answered (the response to a complete request before
the bad bytes), then the tap's own 400/408/501/503 with ``Connection: close``. A request whose
body framing breaks after its head was forwarded has its SGLang connection aborted at once, so
the half-sent request neither waits for bytes that never come nor returns to the pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import time
from typing import TYPE_CHECKING

from httptools import HttpParserError, HttpParserUpgrade, HttpRequestParser

from exporter.samplers.tap import http
from exporter.samplers.tap.exchange import Exchange

if TYPE_CHECKING:
    from exporter.samplers.tap.core import TapCore

_perf = time.perf_counter
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
# RFC 9112 §3: request-line = method SP request-target SP HTTP-version CRLF, method a token
# (RFC 9110 §5.6.2), the target without whitespace or controls (llhttp checks it further).
# Leading empty lines are skipped, as RFC 9112 §2.2 allows and llhttp and nginx do.
_REQUEST_LINE = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+ ([^\x00-\x20\x7f]+)")
_LINE_ENDS = frozenset({b" HTTP/1.1\r\n", b" HTTP/1.0\r\n"})
# origin-form only (RFC 9112 §3.2.1): SGLang serves paths; an absolute-form target would name
# a host the tap does not route by, and nginx refuses the asterisk-form of OPTIONS.
_TARGET = re.compile(rb"/[^\x00-\x20\x7f]*")
# Host = uri-host [ ":" port ] (RFC 9110 §7.2, RFC 3986 §3.2.2): a reg-name or an IP literal,
# never empty, no ".." (what nginx refuses as an invalid host).
_LABEL = rb"[A-Za-z0-9_~!$&'()*+,;=%-]+"
_HOST = re.compile(
    rb"(?:\[[0-9A-Fa-f:.]+\]|" + _LABEL + rb"(?:\." + _LABEL + rb")*\.?)(?::[0-9]*)?"
)
# Headers the tap frames or routes by: a Connection header naming one would have the tap
# drop it while still forwarding what it framed (request smuggling), so it is refused instead.
_FRAMING = frozenset({b"content-length", b"transfer-encoding", b"host", b"expect"})


_HEX = frozenset(b"0123456789abcdefABCDEF")


def target_problem(target: bytes) -> str | None:
    """``bad_target`` for a path nginx refuses with 400 (ngx_http_parse_complex_uri), else
    None: a ``%`` not followed by two hex digits, a ``%00`` (a NUL in SGLang's path), or dot
    segments that climb above the root once percent-decoded (``/..``, ``/a/%2e%2e/..``,
    ``/a%2f..%2f..``; empty segments merge as nginx's ``merge_slashes`` does). The query is not
    decoded (nginx leaves it alone too). Plain paths skip the work: only a ``%`` or ``/.``
    in the path costs a decode."""
    path = target.split(b"?", 1)[0]
    if b"%" not in path and b"/." not in path:
        return None
    if b"%" in path:
        parts = path.split(b"%")
        out = bytearray(parts[0])
        for part in parts[1:]:
            if len(part) < 2 or part[0] not in _HEX or part[1] not in _HEX:
                return "bad_target"
            out.append(int(part[:2], 16))
            out += part[2:]
        if 0 in out:
            return "bad_target"
        path = bytes(out)
    depth = 0
    for segment in path.split(b"/")[1:]:
        if segment == b"..":
            if depth == 0:
                return "bad_target"
            depth -= 1
        elif segment not in (b"", b"."):
            depth += 1
    return None


class Rejected(Exception):
    """Raised from a parser callback to refuse a request (llhttp then reports a callback error;
    the connection keeps the reason in ``rejection``)."""


# reason -> (status, reason phrase, message) of the tap's own answer
_ANSWERS = {
    "malformed_head": (400, "Bad Request", "malformed request"),
    "head_too_large": (400, "Bad Request", "request head too large"),
    "bad_version": (400, "Bad Request", "only HTTP/1.1 and HTTP/1.0 requests"),
    "bad_target": (400, "Bad Request", "invalid request path"),
    "bad_host": (400, "Bad Request", "a request needs exactly one Host header"),
    "bad_connection": (400, "Bad Request", "Connection must not name a framing header"),
    "bad_transfer_encoding": (400, "Bad Request", "Transfer-Encoding must end with chunked"),
    "unsupported_transfer_coding": (501, "Not Implemented", "only chunked transfer coding"),
    "bad_chunked_body": (400, "Bad Request", "malformed request body"),
    "body_timeout": (408, "Request Timeout", "request body stalled"),
    "junk_after_request": (400, "Bad Request", "malformed request"),
    "pipelined_after_chunked": (400, "Bad Request", "no request may follow a chunked body"),
    "too_many_connections": (503, "Service Unavailable", "too many connections"),
    "too_many_client_connections": (
        503,
        "Service Unavailable",
        "too many connections from this address",
    ),
}
_CODES = {
    400: "400_bad_request",
    408: "408_request_timeout",
    501: "501_not_implemented",
    503: "503_too_many_connections",
}


def error_answer(reason: str) -> bytes:
    status, phrase, message = _ANSWERS[reason]
    return http.error_response(status, phrase, message, "bad_request", True)


def _tab_in_framing(head: bytes) -> str | None:
    """A tab around a Content-Length or Transfer-Encoding value (llhttp strips it as OWS, RFC
    9110 §5.6.3; nginx skips only spaces and refuses the value): refused, so that no value is
    read one way by the tap and another by a hop behind it."""
    for line in head.split(b"\r\n")[1:]:
        if b"\t" in line:
            name = line.split(b":", 1)[0].strip().lower()
            if name == b"content-length":
                return "malformed_head"
            if name == b"transfer-encoding":
                return "bad_transfer_encoding"
    return None


def transfer_coding_problem(values: list[bytes]) -> str | None:
    """Why a request's Transfer-Encoding cannot be framed (RFC 9112 §6.1), or None when it is
    plain ``chunked``: the final coding must be chunked (else 400), chunked only once, and the
    tap (like SGLang's uvicorn) decodes no other coding (501)."""
    codings = [c.strip().lower() for v in values for c in v.split(b",")]
    if (
        not codings
        or b"" in codings  # empty list elements (", chunked"): nginx takes only "chunked"
        or codings[-1] != b"chunked"
        or codings.count(b"chunked") > 1
    ):
        return "bad_transfer_encoding"
    if len(codings) > 1:
        return "unsupported_transfer_coding"
    return None


class ClientConnection(asyncio.Protocol):
    """One client connection; see the module docstring."""

    __slots__ = (
        "active",
        "body_left",
        "buf",
        "chunked_body",
        "closing",
        "core",
        "current",
        "headers",
        "idle_since",
        "last_read",
        "parser",
        "paused",
        "peer",
        "reading",
        "rejection",
        "scan_from",
        "served",
        "t_data",
        "transport",
        "url",
        "write_paused",
        "write_paused_since",
    )

    def __init__(self, core: TapCore[ClientConnection]) -> None:
        self.core = core
        self.transport: asyncio.Transport | None = None
        self.parser = HttpRequestParser(self)
        self.active: Exchange | None = None  # the request being served (one at a time)
        self.current: Exchange | None = None  # the request whose bytes llhttp is reading
        self.buf = bytearray()  # unparsed bytes: a head still arriving, or pipelined bytes
        self.scan_from = 0  # where the CRLFCRLF search in ``buf`` resumes
        self.body_left = 0  # Content-Length bytes of the current request still to come
        self.chunked_body = False  # llhttp is inside a chunked request body
        self.closing = False
        self.paused = False  # reading paused by the tap itself (back-pressure, pipelining)
        self.write_paused = False  # the client's transport is over its high-water mark
        self.write_paused_since = 0.0
        self.peer: str | None = None  # counted in core.by_address while set
        self.reading = False  # inside data_received: exchanges queue upstream writes
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.t_data = 0.0
        self.idle_since = self.last_read = time.monotonic()
        # reason of a refusal answered after the response already owed (pipelining)
        self.rejection: str | None = None
        self.served = 0  # requests begun on this connection (junk after one is named so)

    # --- asyncio.Protocol --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop transports are not asyncio.Transport subclasses: no isinstance check
        self.transport = transport  # type: ignore[assignment]
        core = self.core
        clients = core.clients
        if len(clients) >= core.config.max_connections:
            core.stats.rejected["too_many_connections"] += 1
            self._answer_and_close("too_many_connections")
            return
        peername = transport.get_extra_info("peername")
        peer = str(peername[0]) if isinstance(peername, tuple) and peername else ""
        held = core.by_address.get(peer, 0)
        if held >= core.config.max_connections_per_client:
            core.stats.rejected["too_many_client_connections"] += 1
            self._answer_and_close("too_many_client_connections")
            return
        core.by_address[peer] = held + 1
        self.peer = peer
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        clients.add(self)

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        self.t_data = _perf()
        self.last_read = time.monotonic()
        if self.buf:
            self.buf += data
            self._process()
        else:
            self._process(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self.parser = None  # type: ignore[assignment]  # break the parser <-> protocol cycle
        self.buf = bytearray()
        self.core.clients.discard(self)
        peer, self.peer = self.peer, None
        if peer is not None:
            left = self.core.by_address.get(peer, 1) - 1
            if left > 0:
                self.core.by_address[peer] = left
            else:
                self.core.by_address.pop(peer, None)
        active, self.active = self.active, None
        if active is not None:
            active.client_lost()

    def pause_writing(self) -> None:
        self.write_paused = True
        self.write_paused_since = time.monotonic()
        active = self.active
        if active is not None and active.up is not None:
            active.up.pause_reading()

    def resume_writing(self) -> None:
        self.write_paused = False
        active = self.active
        if active is not None and active.up is not None:
            active.up.resume_reading()

    # --- framing: what llhttp is handed -------------------------------------------------------

    def _process(self, data: bytes | None = None) -> None:
        """Feed llhttp what belongs to the current request; keep the rest in ``buf``.

        ``data`` is a fresh read when nothing was buffered (the common case: no copy), else
        None and the bytes are in ``buf``."""
        if data is None:
            data, self.buf = bytes(self.buf), bytearray()
        view = memoryview(data)
        end = len(data)
        pos = 0
        parser = self.parser
        self.reading = True
        try:
            while pos < end and not self.closing:
                if self.body_left:
                    take = min(self.body_left, end - pos)
                    self.body_left -= take
                    parser.feed_data(view[pos : pos + take])
                    pos += take
                elif self.chunked_body:
                    parser.feed_data(view[pos:])
                    pos = end
                elif self.active is not None:  # served one at a time: later bytes wait
                    self._keep(data, pos, end)
                    self.pause_reading()
                    break
                else:
                    stop = self._head_end(data, pos)
                    if stop < 0:
                        self._keep(data, pos, end)
                        break
                    problem = self._line_problem(data, pos)
                    if problem is None and data.find(b"\t", pos, stop) >= 0:
                        problem = _tab_in_framing(data[pos:stop])
                    if problem is not None:
                        self.rejection = problem
                        raise Rejected
                    parser.feed_data(view[pos:stop])
                    pos = stop
        except HttpParserUpgrade:
            # Upgrade/CONNECT: the head was forwarded without Upgrade; what follows is not
            # HTTP, so the connection ends after this response.
            current = self.current
            if current is not None and not current.req_done:
                current.request_complete()
            if self.active is not None:
                self.active.close_after = True
            self.closing = True
        except HttpParserError:
            self._refuse(self.rejection or self._parse_error_reason())
        except Rejected:
            self._refuse(self.rejection or "malformed_head")
        finally:
            self.reading = False
            view.release()
        active = self.active
        if active is not None and active.up_out:
            active.flush_up()

    def _keep(self, data: bytes, pos: int, end: int) -> None:
        """Keep ``data[pos:end]`` (a head still arriving, or bytes behind the active request)."""
        if pos < end:
            self.buf = bytearray(data[pos:end]) if pos else bytearray(data)

    def _head_end(self, data: bytes, pos: int) -> int:
        """End of the head starting at ``pos`` (after its CRLFCRLF), or -1 while incomplete.

        A head arriving in many reads is searched only from where the last search stopped, so
        a byte-at-a-time client costs linear time; over ``max_header_bytes`` it is refused."""
        limit = self.core.config.max_header_bytes
        start = pos + max(self.scan_from - 3, 0)  # nonzero only for a head kept in ``buf``
        found = data.find(http.HEAD_END, start, pos + limit + 4)
        if found >= 0:
            self.scan_from = 0
            return found + 4
        if len(data) - pos > limit:
            self.rejection = "head_too_large"
            raise Rejected
        self.scan_from = len(data) - pos
        problem = self._line_problem(data, pos)  # a bad line is refused before the head ends
        if problem is not None:
            self.rejection = problem
            raise Rejected
        return -1

    def _line_problem(self, data: bytes, pos: int) -> str | None:
        """Why the request line at ``pos`` is refused before llhttp sees it (None: hand it on,
        or it is still arriving; llhttp refuses other malformed lines with its own diagnosis)."""
        while data.startswith(b"\r\n", pos):  # empty lines before a request (RFC 9112 §2.2)
            pos += 2
        line_end = data.find(b"\r\n", pos)
        if line_end < 0:
            return None
        m = _REQUEST_LINE.match(data, pos, line_end)
        if m is None or not _TARGET.fullmatch(m.group(1)):
            return self._junk_reason()
        if data[m.end() : line_end + 2] not in _LINE_ENDS:
            return "bad_version"
        return target_problem(m.group(1))

    def _junk_reason(self) -> str:
        return "junk_after_request" if self.served else "malformed_head"

    # --- llhttp callbacks (request parser) ---------------------------------------------------

    def on_message_begin(self) -> None:
        if self.active is not None:  # a request pipelined after a chunked body, same read
            self.rejection = "pipelined_after_chunked"
            raise Rejected
        self.served += 1
        self.url = b""
        self.headers = []

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        parser = self.parser
        http11 = parser.get_http_version() == "1.1"
        problem, length = self._head_problem(http11)
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
        self.active = exchange
        if length is None:
            self.chunked_body = True
        else:
            self.body_left = length
        if http11 and exchange.expect_continue:
            self.transport.write(_CONTINUE)  # type: ignore[union-attr]
        exchange.start()

    def on_body(self, body: bytes) -> None:
        current = self.current
        if current is not None:
            current.request_body(body)

    def on_message_complete(self) -> None:
        self.chunked_body = False
        self.body_left = 0
        current, self.current = self.current, None
        if current is not None:
            current.request_complete()

    def _head_problem(self, http11: bool) -> tuple[str | None, int | None]:
        """A complete head the tap must refuse rather than forward, and the body's framing:
        (None, Content-Length or 0) to forward, (None, None) for a chunked body."""
        hosts = 0
        host_ok = True
        codings: list[bytes] = []
        length = 0
        named: set[bytes] = set()
        for name, value in self.headers:
            lname = name.lower()
            if lname == b"host":
                hosts += 1
                host_ok = _HOST.fullmatch(value) is not None
            elif lname == b"transfer-encoding":
                codings.append(value)
            elif lname == b"content-length":
                length = int(value)  # llhttp accepted it: digits, and only one
            elif lname == b"connection":
                named |= http.connection_tokens(value)
        if hosts != 1 or not host_ok:  # RFC 9112 §3.2 for 1.1; HTTP/1.0 needs one here too
            return "bad_host", None
        if named & _FRAMING:
            return "bad_connection", None
        if codings:
            if not http11:  # RFC 9112 §6.1: a 1.0 recipient cannot rely on chunked framing
                return "bad_transfer_encoding", None
            return transfer_coding_problem(codings), None
        return None, length

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
        if self.buf and self.active is not None:  # bytes wait behind the active request
            return
        if not self.closing and self.transport is not None:
            if self.paused:  # the stall clock restarts: the pause was the tap's doing
                self.paused = False
                self.last_read = time.monotonic()
            self.transport.resume_reading()

    def exchange_done(self, exchange: Exchange) -> None:
        if exchange is not self.active:
            return
        self.active = None
        if self.current is exchange:  # answered before its body ended: nothing more is read
            self.current = None
        if exchange.close_after:
            self.close()
            return
        self.idle_since = time.monotonic()
        if self.rejection is not None:  # the owed response is out: now the refusal
            self._answer_and_close(self.rejection)
        elif self.closing:
            self.close()
        elif self.reading:  # finished inside _process: its loop goes on with the next bytes
            return
        else:
            if self.buf:  # the next pipelined request starts now: its latency clock too
                self.t_data = _perf()
                self._process()
            if self.active is None or not self.buf:
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
        return self.active is None

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
        self.buf = bytearray()
        current, self.current = self.current, None
        if current is not None and not current.req_done:
            # its head already went to SGLang
            self.rejection = None
            current.request_broken(error_answer(reason), _CODES[_ANSWERS[reason][0]])
            return
        if self.active is None:
            self._answer_and_close(reason)

    def _answer_and_close(self, reason: str) -> None:
        self.rejection = None
        self.core.stats.requests[_CODES[_ANSWERS[reason][0]]] += 1
        if self.transport is not None and not self.transport.is_closing():
            self.write(error_answer(reason))
        self.close()

    def send_stalled_since(self, deadline: float) -> bool:
        """True when the client has read nothing of what the tap wrote since ``deadline``
        (its transport still over the high-water mark it crossed then)."""
        return self.write_paused and self.write_paused_since < deadline

    def send_timed_out(self) -> None:
        """The client stopped reading a response for client_send_timeout: cut it (SGLang's
        request is cancelled) so that its slot and buffers go to other users."""
        active, self.active = self.active, None
        if active is not None:
            active.client_lost("client_send_timeout")
        self.closing = True
        self.abort()

    def body_stalled(self) -> None:
        """The idle sweep found the request body stalled: refuse it like a broken one."""
        if not self.closing:
            self._refuse("body_timeout")
