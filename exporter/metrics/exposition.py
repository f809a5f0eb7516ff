"""Serve /metrics from cached bytes, re-rendered only after a source changed.

prometheus_client renders synchronously (~3-5 ms for a sidecar-sized registry, see
"Measurements behind the design" in docs/architecture.md) and its ASGI app would do that on the
event loop for every scrape, stalling the tap and the API. Here every source bumps a generation
counter when its snapshot changes; a scrape whose format was already rendered at the current
generation gets the cached bytes (the HTTP floor), and otherwise one render runs in a worker
thread while concurrent scrapes wait for it.

Sources change every few seconds while Prometheus scrapes every 15-30 s, so most scrapes
would miss the cache. After a change, a background task therefore re-renders (debounced) every
format a scraper has asked for, and the next scrape finds warm bytes. A scrape that arrives
while that render is still pending gets the previous bytes if they are younger than
``max_stale`` (1 s): values are polled anyway, and waiting for a render would put its cost
back on the scrape.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import logging
import threading
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.openmetrics.exposition import CONTENT_TYPE_LATEST as OPENMETRICS_TYPE
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

log = logging.getLogger(__name__)


class Exposition:
    def __init__(
        self,
        registry: CollectorRegistry,
        max_stale: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.registry = registry
        self.max_stale = max_stale
        self._clock = clock  # how old a cached render is (a test steps it)
        self._generation = 0
        self._gen_lock = threading.Lock()
        self._cache: dict[tuple[bool, bool], tuple[int, bytes, float]] = {}
        self._render_lock = asyncio.Lock()
        self.renders = 0
        self._formats: set[tuple[bool, bool]] = {(False, False)}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._dirty: asyncio.Event | None = None
        self._task: asyncio.Task | None = None

    def bump(self) -> None:
        """Mark the registry changed (called by sources, from any thread)."""
        with self._gen_lock:
            self._generation += 1
        loop, dirty = self._loop, self._dirty
        if loop is not None and dirty is not None and not loop.is_closed():
            loop.call_soon_threadsafe(dirty.set)

    def start(self, debounce: float = 0.05) -> None:
        """Start pre-rendering after changes (call from the running event loop)."""
        self._loop = asyncio.get_running_loop()
        self._dirty = asyncio.Event()
        self._task = asyncio.create_task(self._prerender(debounce), name="metrics-prerender")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._loop = self._dirty = self._task = None

    async def _prerender(self, debounce: float) -> None:
        assert self._dirty is not None
        while True:
            await self._dirty.wait()
            await asyncio.sleep(debounce)  # coalesce bursts of changes into one render
            self._dirty.clear()
            for key in sorted(self._formats):
                try:
                    await self._refresh(key)
                except Exception:  # a failing collector must not kill pre-rendering
                    log.exception("pre-render of /metrics failed")

    @staticmethod
    def negotiate(accept: str | None, accept_encoding: str | None) -> tuple[bool, bool]:
        openmetrics = bool(accept) and "application/openmetrics-text" in accept  # type: ignore[operator]
        gz = bool(accept_encoding) and "gzip" in accept_encoding  # type: ignore[operator]
        return openmetrics, gz

    @staticmethod
    def content_type(openmetrics: bool) -> str:
        return OPENMETRICS_TYPE if openmetrics else CONTENT_TYPE_LATEST

    def _render(self, openmetrics: bool, gz: bool) -> bytes:
        body = (
            generate_openmetrics(self.registry) if openmetrics else generate_latest(self.registry)
        )
        self.renders += 1
        return gzip.compress(body, compresslevel=1) if gz else body

    async def body(self, openmetrics: bool, gz: bool) -> bytes:
        key = (openmetrics, gz)
        self._formats.add(key)
        gen = self._generation
        hit = self._cache.get(key)
        if hit is not None and hit[0] == gen:
            return hit[1]
        prerendering = self._task is not None and not self._task.done()
        if hit is not None and prerendering and self._clock() - hit[2] < self.max_stale:
            return hit[1]  # the background render is on its way; no scrape waits for it
        return await self._refresh(key)

    async def _refresh(self, key: tuple[bool, bool]) -> bytes:
        async with self._render_lock:
            gen = self._generation
            hit = self._cache.get(key)
            if hit is not None and hit[0] == gen:
                return hit[1]
            body = await asyncio.to_thread(self._render, *key)
            self._cache[key] = (gen, body, self._clock())
            return body
