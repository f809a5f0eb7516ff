"""One request through the tap: forward its head and body to SGLang, stream the response back.

The byte path is callback-driven (no task per request when a pooled connection is free): the
upstream connection's ``data_received`` feeds an llhttp response parser whose callbacks append
framed pieces to ``out``; after each read the pieces go to the client in one write. Sampling
only keeps references to pieces on the side (``Capture``) and builds the sample after the last
byte was written; any exception there is counted and swallowed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Protocol

from httptools import HttpParserError, HttpResponseParser

from exporter.samplers.tap import http
from exporter.samplers.tap.sampling import Capture, build_sample
from exporter.samplers.tap.stats import status_code_label
from exporter.samplers.tap.upstream import UpstreamConnection

if TYPE_CHECKING:
    from exporter.samplers.tap.core import TapCore

log = logging.getLogger(__name__)

# Request body bytes held while no SGLang connection is attached yet (connecting); past this
# the client's reading pauses until the connection is there. The same bound caps what a
# GET/HEAD keeps for a replay.
HOLD_LIMIT = 64 << 10
# Replayed on a fresh connection when a pooled one closed before answering: only these (RFC
# 9110 §9.2.2 idempotent, and safe), or a request of which no byte was written.
_REPLAYABLE = frozenset({b"GET", b"HEAD"})
_perf = time.perf_counter
_mono = time.monotonic
_NO_BODY_STATUS = frozenset({204, 304})
# Interim (1xx) responses forwarded per request; one more and the response is refused (502).
# RFC 9110 §15.2 sets no limit, but SGLang sends at most one 100 Continue; nginx forwards none.
MAX_INTERIM = 4


class ClientEnd(Protocol):
    """What an exchange calls on the client connection it answers (``client.ClientConnection``),
    named here so that this module does not import the client side, which imports it (no
    import cycle)."""

    transport: asyncio.Transport | None
    write_paused: bool  # the client's transport is over its high-water mark
    reading: bool  # inside data_received: writes to SGLang are flushed once at its end

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...

    def exchange_done(self, exchange: Exchange) -> None: ...


class _ExtraBytes(Exception):
    """Raised from the response parser: SGLang sent bytes after the complete response."""


class Exchange:
    """Request/response pass for one client request; see the module docstring."""

    __slots__ = (
        "body",
        "body_size",
        "capture",
        "client",
        "client_chunked",
        "close_after",
        "close_delimited",
        "concurrency",
        "connecting",
        "content_type",
        "core",
        "discard",
        "expect_continue",
        "extra",
        "finished",
        "got_bytes",
        "head",
        "head_bytes",
        "head_read",
        "head_sent",
        "interim",
        "interims",
        "is_head",
        "last_up",
        "method",
        "out",
        "parser",
        "reason",
        "relay",
        "relay_left",
        "req_chunked",
        "req_done",
        "request_id",
        "resp_done",
        "resp_headers",
        "retried",
        "reused",
        "sent",
        "started_at",
        "started_perf",
        "status",
        "t_head_in",
        "t_request",
        "up",
        "up_keep_alive",
        "up_out",
        "url",
        "write",
    )

    def __init__(
        self,
        core: TapCore[ClientEnd],
        client: ClientEnd,
        method: bytes,
        url: bytes,
        headers: list[tuple[bytes, bytes]],
        *,
        keep_alive: bool,
        t_in: float,
    ) -> None:
        self.core = core
        self.client = client
        # the client's transport.write, bound once: the per-chunk path calls nothing else
        self.write = client.transport.write  # type: ignore[union-attr]
        self.method = method
        self.url = url
        self.is_head = method == b"HEAD"
        self.started_perf = t_in
        self.started_at = time.time()
        fwd, chunked, request_id, self.expect_continue = _request_headers(headers)
        self.req_chunked = chunked
        self.request_id = request_id
        self.head = http.request_head(method, url, fwd, chunked)
        self.close_after = not keep_alive
        self.up: UpstreamConnection | None = None
        self.parser: HttpResponseParser | None = None
        self.connecting: asyncio.Task[None] | None = None
        self.body: list[bytes] | None = []
        self.body_size = 0
        self.req_done = False
        self.retried = False
        self.reused = False
        self.sent = False  # a byte of this request was written to an SGLang connection
        self.extra = False  # SGLang sent bytes past the end of its response
        self.discard: str | None = None  # why SGLang's response was refused (counted)
        self.last_up = 0.0  # monotonic time of the last write to / read from SGLang
        self.got_bytes = False
        self.head_bytes = 0  # response bytes read before the final head was complete
        self.interims = 0  # 1xx responses read (forwarded up to MAX_INTERIM)
        self.status = 0
        self.reason = b""
        self.resp_headers: list[tuple[bytes, bytes]] = []
        self.content_type = b""
        self.interim = False
        self.relay = False  # the body after this head goes through the C relay
        # inside the head's read: what the relay left to llhttp (None: nothing), or True when
        # it found broken framing
        self.relay_left: bytes | bool | None = None
        self.head_read = False  # the relay runs on the head's own read (see _relay_head_read)
        self.head_sent = False
        self.client_chunked = False
        self.close_delimited = False
        self.resp_done = False
        self.up_keep_alive = False
        self.finished = False
        self.out: list[bytes] = []
        self.up_out: list[bytes] = []
        self.t_request = 0.0
        self.t_head_in = 0.0
        stats = core.stats
        stats.inflight += 1
        self.concurrency = stats.inflight
        self.capture: Capture | None = None
        sampler = core.sampler
        if sampler.is_candidate(method, url):
            try:
                self.capture = Capture(
                    sampler.hasher(url), core.config.max_sample_bytes, core.capture_budget
                )
            except Exception:
                self._capture_failed()

    # --- request side (called by the client connection) ------------------------------------

    def start(self) -> None:
        """Forward on a pooled connection now, or connect first (the only awaited step)."""
        up = self.core.pool.take()
        if up is not None:
            self._attach(up, reused=True)
        else:
            self.connecting = asyncio.get_running_loop().create_task(self._connect())

    def request_body(self, piece: bytes) -> None:
        capture = self.capture
        if capture is not None:
            try:
                capture.add_request(piece)
            except Exception:
                self._capture_failed()
        if self.finished:
            return
        if self.up is not None:
            self._send_up(http.chunk(piece) if self.req_chunked else piece)
        body = self.body
        if body is not None:  # kept while connecting, and for a replay of a GET/HEAD
            body.append(piece)
            self.body_size += len(piece)
            if self.body_size > HOLD_LIMIT:
                if self.up is None:  # still connecting: no more until attached
                    self.client.pause_reading()
                else:
                    self.body = None

    def request_complete(self) -> None:
        self.req_done = True
        capture = self.capture
        if capture is not None:
            try:
                capture.chosen = self.core.sampler.chosen(capture.hasher)
                if not capture.chosen:
                    self.capture = None
                    capture.release()
            except Exception:
                self._capture_failed()
        if not self.finished and self.req_chunked and self.up is not None:
            self._send_up(http.CHUNK_END)

    def request_broken(self, answer: bytes, code: str) -> None:
        """The client's body framing broke (or stalled) after the head went to SGLang. SGLang's
        connection is aborted: the half-sent request can neither complete nor be reused. The
        client gets ``answer`` (the tap's 400/408) when no response head was sent yet, else the
        response is cut where it is; either way its connection closes."""
        if self.finished:
            return
        self.close_after = True
        up, self.up = self.up, None
        if up is not None:
            up.abort()
        self.out.clear()
        if self.head_sent:
            self._finish(status_code_label(self.status), complete=False)
        else:
            self.write(answer)
            self._finish(code, complete=False)

    def client_lost(self, reason: str = "client_disconnect") -> None:
        """The client went away (or was cut, ``reason``): drop SGLang's connection at once so
        generation stops."""
        if self.finished:
            return
        up, self.up = self.up, None
        if up is not None:
            up.abort()
        self.core.stats.aborted[reason] += 1
        code = status_code_label(self.status) if self.head_sent else "client_closed"
        self._finish(code, complete=False)

    def pause_client_reading(self) -> None:
        self.client.pause_reading()

    def resume_client_reading(self) -> None:
        self.client.resume_reading()

    # --- upstream side ----------------------------------------------------------------------

    async def _connect(self) -> None:
        try:
            up = await self.core.pool.connect()
        except Exception as exc:  # refused, timed out, DNS...: the client gets a 502, never a hang
            self.connecting = None
            log.debug("upstream unreachable: %s", type(exc).__name__)
            if not self.finished:
                self._send_error(
                    502, "upstream unreachable", "upstream_unreachable", "502_upstream_unreachable"
                )
            return
        self.connecting = None
        if self.finished:
            up.close()
            return
        self._attach(up, reused=False)

    def _attach(self, up: UpstreamConnection, *, reused: bool) -> None:
        self.up = up
        self.reused = reused
        up.exchange = self
        self.parser = HttpResponseParser(self)
        transport = up.transport
        if up.closed or transport is None or transport.is_closing():
            up.exchange = None
            self.upstream_lost(up)
            return
        if self.client.write_paused:  # the client is behind: SGLang waits for it
            up.pause_reading()
        pending = self.up_out
        pending.append(self.head)
        body = self.body
        if body:
            pending.extend(map(http.chunk, body) if self.req_chunked else body)
            if self.body_size > HOLD_LIMIT:
                self.body = None  # too large to replay; reading resumes now it can flow
            self.client.resume_reading()
        if self.req_done and self.req_chunked:
            pending.append(http.CHUNK_END)
        if not self.client.reading:  # attached from a task: nothing else will flush
            self.flush_up()

    def _send_up(self, data: bytes) -> None:
        self.up_out.append(data)
        if not self.client.reading:
            self.flush_up()

    def flush_up(self) -> None:
        """Write what is queued for SGLang in one call. While the client connection is parsing
        a read, pieces queue up and it flushes once at the end, so a request whose head and
        body came in one read reaches SGLang in one write."""
        pending = self.up_out
        if not pending:
            return
        up = self.up
        if up is not None and up.transport is not None:
            up.transport.write(pending[0] if len(pending) == 1 else b"".join(pending))
            self.sent = True
            self.last_up = _mono()
            if self.method not in _REPLAYABLE:  # never replayed once sent: nothing to keep
                self.body = None
            if not self.t_request:
                self.t_request = _perf() - self.started_perf
        pending.clear()

    def upstream_data(self, data: bytes) -> None:
        if self.head_sent:  # body bytes of a response under way (unless the C relay has it)
            try:
                self.parser.feed_data(data)  # type: ignore[union-attr]
            except HttpParserError as exc:
                if not self.extra:
                    log.debug("bad response from upstream: %s", type(exc).__name__)
                    self._upstream_broken()
                    return
            out = self.out
            if out:
                self.write(out[0] if len(out) == 1 else b"".join(out))
                out.clear()
            if self.resp_done:
                self._complete()
            return
        self.t_head_in = _perf()
        self.got_bytes = True
        self.body = None
        self.head_bytes += len(data)
        try:
            relay_from = self._feed_head(data)
            if relay_from:
                self._relay_head_read(data[relay_from:])
        except HttpParserError as exc:
            if not self.extra:
                # Nothing of this read reached the client yet: a response whose head and
                # broken body came in one read is answered 502 (and counted so), not a
                # silent empty 2xx.
                log.debug("bad response from upstream: %s", type(exc).__name__)
                self.head_sent = False
                self.status = 0
                self._upstream_broken(self.discard)
                return
        if not self.head_sent and self.head_bytes > self.core.config.max_header_bytes:
            # an endless head (or 1xx flood) from SGLang: bounded like a client's head
            self.discard = "response_head_too_large"
            self.head_sent = False
            self.status = 0
            self._upstream_broken(self.discard)
            return
        self._flush()
        if self.resp_done:
            self._complete()

    def _feed_head(self, data: bytes) -> int:
        """Feed llhttp a read of the response head; where the C relay takes the body over in
        ``data`` (0: it does not, llhttp read all of it).

        The relay must start exactly where the final head ends, at the body's first chunk
        boundary, and llhttp does not say where that is. So a read is split at its first
        CRLFCRLF, and that is the head's end only when llhttp completes the head on that
        sequence's last byte and not before it (a head whose CRLFCRLF was split across reads
        completes early, an interim 1xx head does not complete it): then llhttp has read
        nothing of the body, and ``on_headers_complete`` said whether the body qualifies."""
        parser = self.parser
        assert parser is not None
        cut = data.find(http.HEAD_END) if self._may_relay() else -1
        if cut < 0:
            parser.feed_data(data)
            return 0
        end = cut + 4
        self.relay = True  # tentatively: on_headers_complete keeps it only for a fit body
        parser.feed_data(data[: end - 1])
        if self.head_sent:  # the head ended before this CRLFCRLF
            self.relay = False
            parser.feed_data(data[end - 1 :])
            return 0
        parser.feed_data(data[end - 1 : end])
        if self.head_sent and self.relay and not self.resp_done:
            return end
        self.relay = False
        if end < len(data):
            parser.feed_data(data[end:])
        return 0

    def _relay_head_read(self, rest: bytes) -> None:
        """Start the C relay on the body bytes that came with the head. They go to ``out``
        behind the head, as llhttp's pieces would, so that what this read does to the client
        is the Python path's: one write, and a broken body in it answered 502 (raised here as
        llhttp raises it: nothing of the response reached the client yet)."""
        up = self.up
        assert up is not None and self.parser is not None
        self.relay_left = None
        self.head_read = True
        try:
            up.relay_begin(self.out.append, rest)
        finally:
            self.head_read = False
        if up.relaying:
            up.relay_to(self.write)
            return
        left, self.relay_left = self.relay_left, None
        if left is True:
            raise HttpParserError("broken chunk framing")
        if left:
            self.parser.feed_data(left)

    def _may_relay(self) -> bool:
        """Whether this response's body may go through the C relay: turned on, not sampled
        (a sample keeps the pieces llhttp hands out), a client that reads chunked framing."""
        return (
            self.core.relay and self.capture is None and not self.close_after and not self.is_head
        )

    def relay_end(self, extra: bool) -> None:
        """The C relay forwarded the last chunk (``extra``: bytes followed it in its read)."""
        self.resp_done = True
        if extra:
            self.extra = True
        if not self.head_read:  # else upstream_data completes it after its flush
            self._complete()

    def relay_fallback(self, rest: bytes) -> None:
        """The C relay met a line outside its subset: llhttp reads on from there."""
        if self.head_read:
            self.relay_left = rest
        else:
            self.upstream_data(rest)

    def relay_broken(self) -> None:
        """The C relay found no CRLF after a chunk's data, which llhttp refuses too."""
        if self.head_read:
            self.relay_left = True
            return
        log.debug("bad response from upstream: broken chunk framing")
        self._upstream_broken()

    def upstream_lost(self, up: UpstreamConnection) -> None:
        """SGLang's connection closed while this exchange owned it."""
        if self.finished or up is not self.up:
            return
        self.up = None
        if self.head_sent and self.close_delimited:  # EOF is this response's end
            self.resp_done = True
            if self.client_chunked:
                self.out.append(http.CHUNK_END)
            self._flush()
            self._finish(status_code_label(self.status), complete=True)
        elif self.head_sent:
            self._truncated()
        elif self._replayable():
            # A pooled connection SGLang closed while idle: replay once on a fresh one.
            self.retried = True
            self.sent = False
            self.parser = None
            self.connecting = asyncio.get_running_loop().create_task(self._connect())
        else:
            self._send_error(
                502,
                "upstream closed the connection before responding",
                "upstream_failed",
                "502_upstream_failed",
            )

    def _replayable(self) -> bool:
        """Whether a request SGLang's connection dropped before any response byte may be sent
        again: once, on a pooled connection (a fresh one that fails is a real failure), and
        only if it is idempotent or provably never reached SGLang (nothing was written), with
        its whole body still at hand (a POST SGLang may have received is answered 502)."""
        if not self.reused or self.got_bytes or self.retried:
            return False
        if self.sent and self.method not in _REPLAYABLE:
            return False
        return self.body is not None and (self.req_done or not self.sent)

    def waiting_since(self, deadline: float) -> bool:
        """True when a response is owed on an attached connection and SGLang has neither read
        nor sent a byte of it since ``deadline`` (not while the tap paused reading for a slow
        client: that wait is the client's)."""
        up = self.up
        return (
            up is not None
            and not self.finished
            and self.sent
            and not up.paused
            and max(self.last_up, up.last_read) < deadline
        )

    def upstream_timed_out(self) -> None:
        """No byte from SGLang for ``upstream_read_timeout`` while a response is owed: abort its
        connection; the client gets 504, or keeps what it got with its connection closed."""
        if self.finished:
            return
        up, self.up = self.up, None
        if up is not None:
            up.abort()
        self.core.stats.aborted["upstream_timeout"] += 1
        self.out.clear()
        if self.head_sent:
            self._truncated(counted=True)
        else:
            self.close_after = True
            self.write(
                http.error_response(
                    504,
                    "Gateway Timeout",
                    "upstream sent nothing within the read timeout",
                    "upstream_timeout",
                    True,
                )
            )
            self._finish("504_upstream_timeout", complete=False)

    # llhttp callbacks (response parser) -------------------------------------------------------

    def on_message_begin(self) -> None:
        if self.resp_done:  # a second response on the same read: SGLang's stream is off
            self.extra = True
            raise _ExtraBytes
        self.reason = b""  # every per-response field starts empty (1xx, then the final one)
        self.resp_headers = []

    def on_status(self, reason: bytes) -> None:
        self.reason += reason

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self.head_sent:  # after the head these are chunked trailers: dropped
            self.resp_headers.append((name, value))

    def on_headers_complete(self) -> None:
        parser = self.parser
        assert parser is not None
        status = parser.get_status_code()
        headers, has_length, chunked, ctype, request_id, chunked_only = _response_headers(
            self.resp_headers
        )
        if status < 200:  # 100 Continue / 103 Early Hints: forward, then read the final head
            self.interim = True
            self.interims += 1
            if self.interims > MAX_INTERIM:  # a 1xx flood: SGLang's stream is off
                self.discard = "too_many_interim"
                raise _ExtraBytes
            if not self.close_after:
                self.out.append(http.response_head(status, self.reason, headers, False, False))
            return
        self.status = status
        self.content_type = ctype
        if request_id is not None and self.request_id is None:
            self.request_id = request_id
        no_body = self.is_head or status in _NO_BODY_STATUS
        if not no_body and not has_length:
            self.close_delimited = not chunked
            if self.close_after:  # HTTP/1.0 or closing client: the close ends the body
                self.client_chunked = False
            else:
                self.client_chunked = True
        if not self.req_done:  # answered before the request body ended: cannot reuse
            self.close_after = True
        self.up_keep_alive = parser.should_keep_alive() and not self.is_head
        self.out.append(
            http.response_head(status, self.reason, headers, self.client_chunked, self.close_after)
        )
        self.head_sent = True
        # the C relay reads "chunked" framing only: one Transfer-Encoding, exactly that
        self.relay = self.relay and chunked_only and self.client_chunked and not no_body
        if self.is_head:  # llhttp would wait for a body a HEAD response never has
            self.resp_done = True

    def on_body(self, piece: bytes) -> None:
        if self.resp_done:  # a body after a HEAD response: never forwarded, never pooled
            self.extra = True
            raise _ExtraBytes
        if self.client_chunked:
            self.out.append(b"%x\r\n%b\r\n" % (len(piece), piece))
        else:
            self.out.append(piece)
        capture = self.capture
        if capture is not None:
            try:
                capture.add_response(piece)
            except Exception:
                self._capture_failed()

    def on_message_complete(self) -> None:
        if self.interim:
            self.interim = False
            return
        self.resp_done = True
        if self.client_chunked:
            self.out.append(http.CHUNK_END)

    # --- endings ----------------------------------------------------------------------------

    def _flush(self) -> None:
        out = self.out
        if not out:
            return
        data = out[0] if len(out) == 1 else b"".join(out)
        out.clear()
        self.write(data)
        if self.head_sent and self.t_head_in:
            self.core.stats.added_latency.observe(self.t_request + _perf() - self.t_head_in)
            self.t_head_in = 0.0

    def _complete(self) -> None:
        """The response ended: its connection goes back to the pool only if it is clean (see
        :meth:`UpstreamConnection.reusable`), else it is closed; bytes past the end are
        counted and never reach another client."""
        up, self.up = self.up, None
        if up is not None:
            if self.extra:
                self.core.stats.upstream_discarded["extra_bytes"] += 1
                up.close()
            elif self.up_keep_alive and self.req_done and up.reusable():
                self.core.pool.release(up)
            else:
                up.close()
        self._finish(status_code_label(self.status), complete=True)

    def _truncated(self, *, counted: bool = False) -> None:
        """SGLang broke off mid-body: the client keeps what it got; its connection is closed
        (no terminating chunk, so the truncation stays visible, as nginx does)."""
        self._flush()
        if not counted:
            self.core.stats.aborted["upstream_reset"] += 1
        self.close_after = True
        self._finish(status_code_label(self.status), complete=False)

    def _upstream_broken(self, discard: str | None = None) -> None:
        if discard is not None:
            self.core.stats.upstream_discarded[discard] += 1
        up, self.up = self.up, None
        if up is not None:
            up.abort()
        self.out.clear()
        if self.head_sent:
            self._truncated()
        else:
            self._send_error(
                502, "upstream sent an invalid response", "upstream_failed", "502_upstream_failed"
            )

    def _send_error(self, status: int, message: str, kind: str, code: str) -> None:
        if not self.req_done:
            self.close_after = True
        self.write(http.error_response(status, "Bad Gateway", message, kind, self.close_after))
        self._finish(code, complete=False)

    def _finish(self, code: str, *, complete: bool) -> None:
        if self.finished:
            return
        self.finished = True
        # the parser holds bound methods of this exchange: drop the cycle so that refcounting
        # frees both now instead of leaving them to the cyclic GC (whose pauses stall streams)
        self.parser = None
        stats = self.core.stats
        stats.inflight -= 1
        stats.requests[code] += 1
        task = self.connecting
        if task is not None:
            self.connecting = None
            task.cancel()
        capture, self.capture = self.capture, None
        if capture is not None:
            if capture.chosen and self.status:
                self._hand_off(capture, complete)
            capture.release()
        self.client.exchange_done(self)

    def _hand_off(self, capture: Capture, complete: bool) -> None:
        stats = self.core.stats
        try:
            if capture.overflow:
                stats.dropped[capture.overflow] += 1
                return
            sample = build_sample(
                capture,
                status=self.status,
                content_type=self.content_type,
                request_id_header=self.request_id,
                concurrency=self.concurrency,
                method=self.method,
                path=self.url,
                complete=complete,
                started_at=self.started_at,
                started_perf=self.started_perf,
            )
            self.core.sink.offer(sample)
        except Exception:
            self._capture_failed()

    def _capture_failed(self) -> None:
        """Sampling broke for this exchange: stop capturing; the response carries on."""
        capture, self.capture = self.capture, None
        if capture is not None:
            capture.release()
        self.core.stats.errors["capture"] += 1


def _request_headers(
    raw: list[tuple[bytes, bytes]],
) -> tuple[list[tuple[bytes, bytes]], bool, bytes | None, bool]:
    """End-to-end request headers, chunked body?, any X-Request-Id, Expect: 100-continue?"""
    out: list[tuple[bytes, bytes]] = []
    tokens: set[bytes] = set()
    chunked = expect_continue = False
    request_id = None
    for name, value in raw:
        lname = name.lower()
        if lname in http.HOP_BY_HOP:
            if lname == b"connection":
                tokens |= http.connection_tokens(value)
            elif lname == b"transfer-encoding":
                chunked = True
            continue
        if lname == b"expect":  # the client connection answers 100-continue itself
            expect_continue = value.strip().lower() == b"100-continue"
            continue
        if lname == b"x-request-id":
            request_id = value
        out.append((name, value))
    if chunked:  # llhttp framed the body by chunks; a Content-Length would be wrong
        tokens.add(b"content-length")
    if tokens:
        out = http.drop_named(out, tokens)
    return out, chunked, request_id, expect_continue


def _response_headers(
    raw: list[tuple[bytes, bytes]],
) -> tuple[list[tuple[bytes, bytes]], bool, bool, bytes, bytes | None, bool]:
    """End-to-end response headers, has Content-Length, was chunked, content type, request id,
    and whether its one Transfer-Encoding is ``chunked`` alone (what the C relay reads)."""
    out: list[tuple[bytes, bytes]] = []
    tokens: set[bytes] = set()
    has_length = chunked = False
    codings: list[bytes] = []
    ctype = b""
    request_id = None
    for name, value in raw:
        lname = name.lower()
        if lname in http.HOP_BY_HOP:
            if lname == b"connection":
                tokens |= http.connection_tokens(value)
            elif lname == b"transfer-encoding":
                chunked = True
                codings.append(value.strip().lower())
            continue
        if lname == b"content-length":
            has_length = True
        elif lname == b"content-type":
            ctype = value
        elif lname == b"x-request-id":
            request_id = value
        out.append((name, value))
    chunked_only = codings == [b"chunked"] and not has_length
    if chunked and has_length:
        has_length = False
        tokens.add(b"content-length")
    if tokens:
        out = http.drop_named(out, tokens)
    return out, has_length, chunked, ctype, request_id, chunked_only
