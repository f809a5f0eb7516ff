"""The tap's protocol classes without sockets: bytes in, bytes out (issue 36, item 3).

uvicorn tests its protocol classes by handing them a mock transport (its
``tests/protocols/test_http.py``: a ``MockTransport`` that records what the protocol writes,
``data_received`` called with the request's bytes). The same here, with the two ends joined:
:func:`pipe` connects two ``asyncio.Protocol`` objects through a pair of
:class:`MemoryTransport`, so the tap's :class:`~exporter.samplers.tap.client.ClientConnection`
and :class:`~exporter.samplers.tap.upstream.UpstreamConnection` run unchanged between a test's
client and the differential suite's :class:`~tests.tap.logging_upstream.LoggingUpstream`
protocol, on an event loop but with no socket, port or timer. What a transport is written is
delivered to the other end's ``data_received`` on a later loop turn (as a socket would), a
close reaches both ends' ``connection_lost``, and ``pause_reading`` holds deliveries back
until ``resume_reading``.

:class:`Wire` is one tap's state (:class:`~exporter.samplers.tap.core.TapCore`) whose upstream
pool opens such in-memory connections instead of TCP ones; the sweeper is never started, so
nothing here depends on elapsed time: :meth:`Wire.settle` runs the loop until no delivery or
task is left.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from exporter.samplers.tap.client import ClientConnection
from exporter.samplers.tap.config import TapConfig
from exporter.samplers.tap.core import TapCore
from exporter.samplers.tap.sampling import SampleSink
from exporter.samplers.tap.stats import TapStats
from exporter.samplers.tap.upstream import UpstreamConnection, UpstreamPool
from tests.tap.logging_upstream import LoggingUpstream

_TURNS = 100_000  # loop turns before settle() gives up: a livelock, not a slow machine


class MemoryTransport:
    """One end of an in-memory connection, owned by ``protocol``."""

    def __init__(self, wire: Wire, protocol: asyncio.BaseProtocol, peername: tuple[str, int]):
        self.wire = wire
        self.protocol = protocol
        self.peername = peername
        self.other: MemoryTransport | None = None
        self.sent = bytearray()  # everything this end wrote
        self.closed = False
        self.aborted = False
        self.lost = False
        self.read_paused = False
        self._held: list[bytes] = []

    # --- the transport API the tap uses -----------------------------------------------------

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": self.peername}.get(name, default)  # no "socket": no TCP options

    def write(self, data: bytes) -> None:
        if self.closed:
            return
        self.sent += data
        if self.other is not None:
            self.wire.soon(self.other._deliver, bytes(data))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.wire.soon(self._connection_lost)
        if self.other is not None:
            self.wire.soon(self.other._eof)

    def abort(self) -> None:
        self.aborted = True
        self.close()

    def pause_reading(self) -> None:
        self.read_paused = True

    def resume_reading(self) -> None:
        self.read_paused = False
        held, self._held = self._held, []
        for data in held:
            self._deliver(data)

    def get_write_buffer_size(self) -> int:
        return 0

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    # --- deliveries from the other end --------------------------------------------------------

    def _deliver(self, data: bytes) -> None:
        if self.lost:
            return
        if self.read_paused:
            self._held.append(data)
            return
        self.protocol.data_received(data)  # type: ignore[attr-defined]

    def _eof(self) -> None:
        """The other end closed: after its last bytes (deliveries run in order), as a FIN."""
        if self.closed:
            return
        if self._held:  # what the protocol has not read yet still comes first
            self.wire.soon(self._eof)
            return
        keep_open = getattr(self.protocol, "eof_received", lambda: None)()
        if not keep_open:
            self.close()

    def _connection_lost(self) -> None:
        if not self.lost:
            self.lost = True
            self.protocol.connection_lost(None)


class Peer(asyncio.Protocol):
    """A test's end of a connection: records what it receives and when the tap closed it."""

    def __init__(self) -> None:
        self.received = bytearray()
        self.eof = False
        self.transport: MemoryTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.received += data

    def eof_received(self) -> None:
        self.eof = True

    def send(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)

    def close(self) -> None:
        assert self.transport is not None
        self.transport.close()


class _MemoryPool(UpstreamPool):
    """The tap's pool, connecting to an in-memory LoggingUpstream instead of a TCP port."""

    wire: Wire

    async def connect(self) -> UpstreamConnection:
        up = UpstreamConnection(self._stats)
        self.wire.pipe(up, self.wire.upstream.protocol(), ("127.0.0.1", 30000))
        self._stats.upstream_connections += 1
        return up


class Wire:
    """One tap's connection state between in-memory clients and an in-memory upstream."""

    def __init__(self, **config: Any) -> None:
        self.loop = asyncio.get_running_loop()
        self.config = TapConfig(upstream="http://sglang.invalid:30000", **config)
        self.stats = TapStats()
        self.core = TapCore[ClientConnection](
            self.config, self.stats, SampleSink(self.config.queue_size, self.stats, None)
        )
        pool = _MemoryPool.for_config(self.config, self.stats)
        assert isinstance(pool, _MemoryPool)
        pool.wire = self
        self.core.pool = pool
        self.upstream = LoggingUpstream()
        self.pending = 0

    def soon(self, fn: Callable[..., None], *args: Any) -> None:
        self.pending += 1
        self.loop.call_soon(self._run, fn, args)

    def _run(self, fn: Callable[..., None], args: tuple[Any, ...]) -> None:
        self.pending -= 1
        fn(*args)

    def pipe(
        self, a: asyncio.BaseProtocol, b: asyncio.BaseProtocol, b_address: tuple[str, int]
    ) -> tuple[MemoryTransport, MemoryTransport]:
        """Join ``a`` and ``b``; each sees the other's address as its peer."""
        ta = MemoryTransport(self, a, b_address)
        tb = MemoryTransport(self, b, ("192.0.2.1", 40000))
        ta.other, tb.other = tb, ta
        b.connection_made(tb)
        a.connection_made(ta)
        return ta, tb

    def connect(self, peer: str = "192.0.2.1") -> tuple[Peer, ClientConnection]:
        """A new client connection to the tap, from address ``peer``."""
        client, tap_side = Peer(), ClientConnection(self.core)
        ta = MemoryTransport(self, client, ("127.0.0.1", 9401))
        tb = MemoryTransport(self, tap_side, (peer, 40000))
        ta.other, tb.other = tb, ta
        client.connection_made(ta)
        tap_side.connection_made(tb)
        return client, tap_side

    async def settle(self) -> None:
        """Run the loop until nothing is left to deliver and no task (a connect) is pending."""
        me = asyncio.current_task()
        for _ in range(_TURNS):
            if not self.pending and all(t is me or t.done() for t in asyncio.all_tasks()):
                return
            await asyncio.sleep(0)
        raise AssertionError(f"still busy after {_TURNS} loop turns")

    async def exchange(self, *writes: bytes, peer: str = "192.0.2.1") -> Peer:
        """A client that writes each of ``writes`` (the tap reads each as one read), then
        waits for the tap; the client is returned still connected."""
        client, _ = self.connect(peer)
        await self.settle()
        for data in writes:
            client.send(data)
            await self.settle()
        return client

    def rejected(self) -> dict[str, int]:
        return {k: v for k, v in self.stats.rejected.items() if v}
