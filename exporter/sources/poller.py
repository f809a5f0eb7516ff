"""The one poll loop every source runs on, and the base of every source that polls over HTTP.

A source is a pure parser (bytes or JSON in, validated dataclasses out: ``sources/sglang/``,
``sources/vllm/``) plus a thin poller built on this module, the node_exporter model: the loop,
the timeout, the bounded GET and the mapping from errors to health are written here once, so a
new source writes only its parsing and its ``collect()``.

- :func:`poll_forever` is the loop: one cycle, then wait for the delay the cycle returns (its
  backoff) or the stop event, whichever comes first. NVML, probe files and HTTP sources share
  it.
- :class:`HttpPoller` adds the HTTP part: one :class:`exporter.outbound.Outbound` client per
  source (caps, timeouts, no redirects), :meth:`HttpPoller.get_json` /
  :meth:`HttpPoller.get_text`, and :meth:`HttpPoller.poll_once`, which turns a
  :class:`PollError` raised anywhere in a cycle into the source being down with that reason and
  a success into it being up. Parsing runs in a worker thread (:meth:`HttpPoller.offload`):
  a hostile answer can cost CPU, never the event loop the tap and ``/healthz`` answer on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, TypeVar

from prometheus_client.core import Metric

from exporter import outbound
from exporter.sources import bounded
from exporter.sources.base import SourceHealth

log = logging.getLogger(__name__)
T = TypeVar("T")

# Reasons every HTTP source can be down for (each source adds its own parse reasons).
HTTP_REASONS = (
    outbound.UNREACHABLE,
    outbound.TIMEOUT,
    "http_status",
    "bad_json",
    bounded.TOO_LARGE,
    bounded.TOO_DEEP,
    "internal_error",  # the poll loop raised (a sidecar bug); the supervisor restarted it
)


async def poll_forever(
    stop: asyncio.Event,
    cycle: Callable[[], Awaitable[float | None]],
    interval: float,
    until: Callable[[], bool] = lambda: False,
) -> None:
    """Run ``cycle`` until ``stop`` is set or ``until()`` holds (a poller whose job ends, such
    as engine discovery); a cycle returns its own next delay (a backoff) or None for
    ``interval``. The wait ends early when ``stop`` is set."""
    while not stop.is_set() and not until():
        delay = await cycle()
        if until():
            return
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=interval if delay is None else delay)


class PollError(Exception):
    """A cycle that failed; ``reason`` is a bounded label value of the source's errors."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


class HttpPoller:
    """Base of a source polled over HTTP; subclasses implement :meth:`poll` and
    :meth:`collect`, and clear stale state in :meth:`went_down`."""

    def __init__(
        self,
        name: str,
        base_url: str,
        *,
        poll_interval: float,
        timeout: float,
        reasons: Sequence[str],
        on_change: Callable[[], None] | None = None,
        max_body_bytes: int = bounded.METRICS_MAX_BYTES,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.poll_interval = poll_interval
        self.timeout = timeout
        self.health = SourceHealth(name)
        self.health.errors = dict.fromkeys((*HTTP_REASONS, *reasons), 0)
        self.http = outbound.Outbound(timeout=timeout, limit=max_body_bytes)
        self._on_change = on_change or (lambda: None)

    # --- what a source writes ------------------------------------------------------------------
    async def poll(self) -> None:
        """One cycle: fetch, parse (off the loop), keep the result; raise PollError on failure."""
        raise NotImplementedError

    def went_down(self) -> None:
        """Drop whatever must not outlive a failed cycle (stale live numbers look healthy)."""

    def collect(self) -> Iterable[Metric]:
        """Families from the latest snapshot; no I/O."""
        raise NotImplementedError

    # --- what the base does --------------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        try:
            await poll_forever(stop, self._cycle, self.poll_interval)
        finally:
            await self.http.close()

    async def _cycle(self) -> None:
        await self.poll_once()

    async def poll_once(self) -> None:
        """One cycle with its outcome recorded in ``health`` and ``on_change`` called."""
        t0 = time.perf_counter()
        try:
            await self.poll()
        except PollError as exc:
            if self.health.up or self.health.cycles == 0:
                log.warning("%s source down: %s: %s", self.health.name, exc.reason, exc)
            self.health.failure(exc.reason, str(exc), time.perf_counter() - t0)
            self.went_down()
        else:
            self.health.success(time.perf_counter() - t0)
        self._on_change()

    async def close(self) -> None:
        await self.http.close()

    async def get(self, path: str, limit: int) -> outbound.Reply:
        """``GET base_url + path``; transport failures and over-cap bodies as PollError."""
        try:
            return await self.http.get(self.base_url + path, limit=limit)
        except outbound.OutboundError as exc:
            raise PollError(exc.reason, str(exc)) from None

    async def get_json(self, path: str, limit: int) -> Any:
        """The decoded JSON of a 200 answer (size- and depth-bounded), decoded off the loop."""
        reply = await self.get(path, limit)
        if reply.status != 200:
            raise PollError("http_status", f"GET {path} returned {reply.status}")
        try:
            return await self.offload(bounded.loads_bounded, reply.body, limit)
        except bounded.BodyRejected as exc:
            raise PollError(exc.reason, f"GET {path}: {exc}") from None
        except ValueError:  # UnicodeDecodeError included
            raise PollError("bad_json", f"GET {path} returned non-JSON") from None

    async def offload(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in a worker thread: parsing never runs on the event loop."""
        return await asyncio.to_thread(fn, *args)
