"""The embeddable tap: a listening socket on the running event loop, plus its counters.

The tap needs no web framework: it is an ``asyncio.Protocol`` server, so it runs on whatever
loop the sidecar runs (uvloop under uvicorn) and adds no task per request.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

from prometheus_client.core import Metric

from exporter.samplers.tap.client import ClientConnection
from exporter.samplers.tap.config import TapConfig
from exporter.samplers.tap.core import TapCore
from exporter.samplers.tap.sampling import CapturedExchange, Handoff, SampleCallback, SampleSink
from exporter.samplers.tap.stats import TapStats

_SWEEP_SECONDS = 1.0


class Tap:
    """Reverse proxy in front of SGLang that samples responses for grading.

    ``on_sample`` receives each sampled :class:`CapturedExchange` (coroutine functions are
    awaited on the loop, plain functions run on a worker thread); without it, read ``samples``
    (a bounded ``asyncio.Queue``). Either way a full queue drops and counts, and nothing the
    consumer does reaches a response. ``collect()`` yields the ``dsv4_tap_*`` families (register the
    tap itself as a prometheus_client collector, or chain it into the app's collector).
    """

    def __init__(
        self,
        config: TapConfig,
        on_sample: SampleCallback | Handoff | None = None,
        stats: TapStats | None = None,
    ) -> None:
        self.config = config
        # given when the consumer counts into the same families (the tap process's forwarder)
        self.stats = stats or TapStats()
        self._sink = SampleSink(config.queue_size, self.stats, on_sample)
        self._core = TapCore[ClientConnection](config, self.stats, self._sink)
        self._server: asyncio.Server | None = None
        self._sweeper: asyncio.TimerHandle | None = None

    @property
    def samples(self) -> asyncio.Queue[CapturedExchange]:
        """The bounded hand-off queue (read it only when no ``on_sample`` was given)."""
        return self._sink.queue

    @property
    def port(self) -> int | None:
        """The bound port (useful after ``start(port=0)``), or None when stopped."""
        if self._server is None or not self._server.sockets:
            return None
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def inflight(self) -> int:
        return self.stats.inflight

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        """Listen on ``host:port`` and return the bound port."""
        if self._server is not None:
            raise RuntimeError("tap already started")
        loop = asyncio.get_running_loop()
        core = self._core
        self._server = await loop.create_server(
            lambda: ClientConnection(core),
            host,
            port,
            backlog=self.config.backlog,
            reuse_address=True,
        )
        core.pool.start()
        self._sink.start()
        self._sweeper = loop.call_later(_SWEEP_SECONDS, self._sweep)
        port_now = self.port
        assert port_now is not None
        return port_now

    async def stop(self, grace: float = 5.0) -> None:
        """Stop accepting, let in-flight requests finish for up to ``grace`` seconds, then cut
        the rest (their SGLang requests are cancelled) and close every connection."""
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None
        core = self._core
        deadline = time.monotonic() + grace
        while True:
            for client in list(core.clients):
                if client.idle:
                    client.close()
            if self.stats.inflight <= 0 or time.monotonic() >= deadline:
                break
            await asyncio.sleep(0.02)
        for client in list(core.clients):
            client.abort()
        core.pool.close()
        await self._sink.stop()
        await asyncio.sleep(0)  # let connection_lost callbacks run
        await server.wait_closed()

    async def __aenter__(self) -> Tap:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def collect(self) -> Iterator[Metric]:
        """The tap's metric families from its current counters (no I/O)."""
        return self.stats.collect()

    def _sweep(self) -> None:
        """Close client connections idle (or stuck mid-head) for client_idle_timeout, cut
        those that read nothing of a response for client_send_timeout, refuse
        (408) requests whose body stalled that long (their SGLang connection is aborted), and
        time out (504) responses SGLang sent nothing of for upstream_read_timeout."""
        now = time.monotonic()
        deadline = now - self.config.client_idle_timeout
        read_deadline = now - self.config.upstream_read_timeout
        send_deadline = now - self.config.client_send_timeout
        for client in list(self._core.clients):
            if client.idle and client.idle_since < deadline:
                client.close()
            elif client.send_stalled_since(send_deadline):
                client.send_timed_out()
            elif client.body_stalled_since(deadline):
                client.body_stalled()
            else:
                active = client.active
                if active is not None and active.waiting_since(read_deadline):
                    active.upstream_timed_out()
        self._sweeper = asyncio.get_running_loop().call_later(_SWEEP_SECONDS, self._sweep)
