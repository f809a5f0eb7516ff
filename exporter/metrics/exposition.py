"""Serve /metrics from cached bytes, re-rendered only after a source changed.

prometheus_client renders synchronously (~3-5 ms for a sidecar-sized registry, see
measurements.md) and its ASGI app would do that on the event loop for every scrape, stalling
the tap and the API. Here every source bumps a generation counter when its snapshot changes;
a scrape whose format was already rendered at the current generation gets the cached bytes
(the HTTP floor), and otherwise one render runs in a worker thread while concurrent scrapes
wait for it.
"""

from __future__ import annotations

import asyncio
import gzip
import threading

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.openmetrics.exposition import CONTENT_TYPE_LATEST as OPENMETRICS_TYPE
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics


class Exposition:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self._generation = 0
        self._gen_lock = threading.Lock()
        self._cache: dict[tuple[bool, bool], tuple[int, bytes]] = {}
        self._render_lock = asyncio.Lock()
        self.renders = 0

    def bump(self) -> None:
        """Mark the registry changed (called by sources from any thread)."""
        with self._gen_lock:
            self._generation += 1

    @property
    def generation(self) -> int:
        return self._generation

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
        gen = self._generation
        hit = self._cache.get(key)
        if hit is not None and hit[0] == gen:
            return hit[1]
        async with self._render_lock:
            gen = self._generation
            hit = self._cache.get(key)
            if hit is not None and hit[0] == gen:
                return hit[1]
            body = await asyncio.to_thread(self._render, openmetrics, gz)
            self._cache[key] = (gen, body)
            return body
