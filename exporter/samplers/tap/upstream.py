"""Keep-alive connections to SGLang and the pool that hands them out.

Checkout is a ``deque.pop`` (constant time, most recently used first, so the connection least
likely to have been closed by SGLang's keep-alive timer is reused). A connection enters the
pool only when :meth:`UpstreamConnection.reusable` holds (open, reading, nothing left to
write) and its response ended cleanly; checkout checks it again. A connection SGLang closes
while idle is only marked closed and skipped later; a sweep every second drops closed and
expired ones, so nothing scans the pool per request.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections import deque
from typing import TYPE_CHECKING, Protocol

from exporter.samplers.tap import relay
from exporter.samplers.tap.config import TapConfig
from exporter.samplers.tap.stats import TapStats

if TYPE_CHECKING:
    _ReadPath = relay.PythonReads
else:  # the C relay when built and not turned off (relay.py decides), else Python reads
    _ReadPath = relay.NativeRelay if relay.ENABLED else relay.PythonReads


class ExchangeEnd(Protocol):
    """What a connection calls on the exchange it serves (``exchange.Exchange``), named here
    so that this module does not import the exchange, which imports it (no import cycle)."""

    def upstream_data(self, data: bytes) -> None: ...

    def upstream_lost(self, up: UpstreamConnection) -> None: ...

    def relay_end(self, extra: bool) -> None: ...

    def relay_fallback(self, rest: bytes) -> None: ...

    def relay_broken(self) -> None: ...

    def pause_client_reading(self) -> None: ...

    def resume_client_reading(self) -> None: ...


class UpstreamConnection(_ReadPath, asyncio.Protocol):
    """One TCP connection to SGLang; forwards everything it reads to its current exchange.

    Its base (:mod:`~exporter.samplers.tap.relay`) records each read's time in ``last_read``
    and hands the read to :meth:`_data`, or, while it relays a chunked body in C, forwards it
    to the client itself and calls back only at the body's end (:meth:`_relay_end`), at a line
    it leaves to llhttp (:meth:`_relay_fallback`) or at broken framing (:meth:`_relay_broken`).
    """

    __slots__ = ("closed", "exchange", "idle_since", "paused", "stats", "transport", "uses")

    def __init__(self, stats: TapStats) -> None:
        super().__init__()
        self.transport: asyncio.Transport | None = None
        self.exchange: ExchangeEnd | None = None
        self.stats = stats
        self.closed = False
        self.paused = False  # reading paused for a slow client (back-pressure)
        self.idle_since = 0.0
        self.uses = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop transports are not asyncio.Transport subclasses: no isinstance check
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _data(self, data: bytes) -> None:
        exchange = self.exchange
        if exchange is None:  # bytes nobody asked for: never handed to the next client
            self.stats.upstream_discarded["extra_bytes"] += 1
            self.close()
            return
        exchange.upstream_data(data)

    def _relay_end(self, extra: bool) -> None:
        exchange = self.exchange
        if exchange is not None:
            exchange.relay_end(extra)

    def _relay_fallback(self, rest: bytes) -> None:
        exchange = self.exchange  # llhttp reads on from the chunk boundary the relay left at
        if exchange is not None:
            exchange.relay_fallback(rest)

    def _relay_broken(self) -> None:
        exchange = self.exchange
        if exchange is not None:
            exchange.relay_broken()

    def eof_received(self) -> bool:
        return False  # close our side too; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.relay_stop()
        exchange = self.exchange
        if exchange is not None:
            self.exchange = None
            exchange.upstream_lost(self)

    def pause_writing(self) -> None:
        if self.exchange is not None:
            self.exchange.pause_client_reading()

    def resume_writing(self) -> None:
        if self.exchange is not None:
            self.exchange.resume_client_reading()

    def pause_reading(self) -> None:
        if not self.paused and self.transport is not None and not self.closed:
            self.paused = True
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.paused and self.transport is not None and not self.closed:
            self.paused = False
            self.transport.resume_reading()

    def reusable(self) -> bool:
        """Whether this connection may serve another request: open, reading (a paused one
        would leave the next request waiting for bytes it never reads) and nothing queued to
        write (a request body still going out belongs to the request that just ended)."""
        transport = self.transport
        return (
            not self.closed
            and not self.relaying
            and not self.paused
            and transport is not None
            and not transport.is_closing()
            and transport.get_write_buffer_size() == 0
        )

    def close(self) -> None:
        """Graceful close (pending writes flushed); used for idle or finished connections."""
        self.closed = True
        self.exchange = None
        self.relay_stop()
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        """Immediate close (RST): SGLang sees the disconnect at once and cancels generation."""
        self.closed = True
        self.exchange = None
        self.relay_stop()
        if self.transport is not None:
            self.transport.abort()


class UpstreamPool:
    """Idle keep-alive connections to one SGLang endpoint, most recently used first."""

    def __init__(
        self,
        host: str,
        port: int,
        stats: TapStats,
        *,
        connect_timeout: float,
        idle_timeout: float,
        max_idle: int,
    ) -> None:
        self.host = host
        self.port = port
        self._stats = stats
        self._connect_timeout = connect_timeout
        self._idle_timeout = idle_timeout
        self._max_idle = max_idle
        self._idle: deque[UpstreamConnection] = deque()
        self._sweeper: asyncio.TimerHandle | None = None

    @classmethod
    def for_config(cls, config: TapConfig, stats: TapStats) -> UpstreamPool:
        """The pool a tap with ``config`` forwards through (tests build theirs the same way)."""
        return cls(
            config.upstream_host,
            config.upstream_port,
            stats,
            connect_timeout=config.connect_timeout,
            idle_timeout=config.upstream_idle_timeout,
            max_idle=config.max_idle_upstream,
        )

    def start(self) -> None:
        self._schedule_sweep()

    def take(self) -> UpstreamConnection | None:
        """An idle, live connection, or None (then the caller connects)."""
        idle = self._idle
        if not idle:
            return None
        deadline = time.monotonic() - self._idle_timeout
        while idle:
            conn = idle.pop()
            if not conn.reusable():
                conn.close()
                continue
            if conn.idle_since < deadline:
                conn.close()
                continue
            return conn
        return None

    def release(self, conn: UpstreamConnection) -> None:
        """Return a connection whose exchange finished cleanly."""
        conn.exchange = None
        if not conn.reusable() or len(self._idle) >= self._max_idle:
            conn.close()
            return
        conn.idle_since = time.monotonic()
        self._idle.append(conn)

    async def connect(self) -> UpstreamConnection:
        loop = asyncio.get_running_loop()
        stats = self._stats
        _, conn = await asyncio.wait_for(
            loop.create_connection(lambda: UpstreamConnection(stats), self.host, self.port),
            self._connect_timeout,
        )
        self._stats.upstream_connections += 1
        return conn

    @property
    def idle_count(self) -> int:
        return sum(1 for c in self._idle if not c.closed)

    def _schedule_sweep(self) -> None:
        self._sweeper = asyncio.get_running_loop().call_later(1.0, self._sweep)

    def _sweep(self) -> None:
        deadline = time.monotonic() - self._idle_timeout
        keep: deque[UpstreamConnection] = deque()
        for conn in self._idle:
            if conn.closed:
                continue
            if conn.idle_since < deadline:
                conn.close()
            else:
                keep.append(conn)
        self._idle = keep
        self._schedule_sweep()

    def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        while self._idle:
            self._idle.pop().close()
