"""The one poll loop and the one base every source polls on.

A source is a pure parser (bytes or JSON in, validated dataclasses out: ``sources/sglang/``,
``sources/vllm/``) plus a thin poller built on this module, the node_exporter model: the loop,
the health, the mapping from errors to health and the backoff are written here once, so a new
source writes only its reading, its parsing and its ``collect()``.

- :func:`poll_forever` is the loop: one cycle, then wait for the delay the cycle returns (its
  backoff) or the stop event, whichever comes first.
- :class:`Poller` is the base: :meth:`Poller.poll_once` turns a :class:`PollError` raised
  anywhere in a cycle into the source being down with that bounded reason (its reasons are
  declared once, in :mod:`exporter.sources.reasons`), a success into it being up, and failures
  in a row into a doubling backoff. Anything else a cycle raises is a sidecar bug: it is not
  caught here, so the supervisor counts it, marks the source down with ``internal_error`` and
  restarts the loop (exporter/supervisor.py).
- :class:`HttpPoller` adds the HTTP part: one :class:`exporter.outbound.Outbound` client per
  source (caps, timeouts, no redirects), :meth:`HttpPoller.get` and
  :meth:`HttpPoller.get_json`. Parsing runs in a worker thread (:meth:`Poller.offload`):
  a hostile answer can cost CPU, never the event loop the tap and ``/healthz`` answer on.
- :class:`ThreadPoller` adds a worker thread for reads that can block for good (NVML on a
  wedged driver, a hung mount): each read has a timeout, a timed-out read is abandoned, and no
  new read starts until the abandoned one returns (``wedged``), so threads cannot pile up.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, TypeVar

from prometheus_client.core import Metric

from exporter import outbound
from exporter.sources import bounded
from exporter.sources import reasons as source_reasons
from exporter.sources.base import SourceHealth

log = logging.getLogger(__name__)
T = TypeVar("T")

# Reasons every HTTP source can be down for (each source adds its own parse reasons).
HTTP_REASONS = tuple(r.name for r in source_reasons.HTTP)
MAX_BACKOFF_S = 60.0


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


class Poller:
    """Base of every polling source; subclasses implement :meth:`poll` and :meth:`collect`,
    and clear stale state in :meth:`went_down`.

    ``max_backoff``: after failures in a row the next cycle waits ``poll_interval`` doubled per
    failure up to this (NVML re-initialises on that schedule); equal to ``poll_interval``, the
    default, it never backs off (an HTTP server that is down is retried at the interval).
    """

    def __init__(
        self,
        name: str,
        *,
        poll_interval: float,
        reasons: Sequence[str],
        on_change: Callable[[], None] | None = None,
        max_backoff: float | None = None,
    ) -> None:
        self.poll_interval = poll_interval
        self.max_backoff = poll_interval if max_backoff is None else max_backoff
        self.health = SourceHealth(name)
        self.health.errors = dict.fromkeys(reasons, 0)
        self._on_change = on_change or (lambda: None)
        self._failures_in_row = 0
        self._degraded: list[tuple[str, str]] = []

    # --- what a source writes ------------------------------------------------------------------
    async def poll(self) -> None:
        """One cycle: read, parse (off the loop), keep the result; raise PollError on failure."""
        raise NotImplementedError

    def went_down(self) -> None:
        """Drop whatever must not outlive a failed cycle (stale live numbers look healthy)."""

    def collect(self) -> Iterable[Metric]:
        """Families from the latest snapshot; no I/O."""
        raise NotImplementedError

    async def aclose(self) -> None:
        """Release what the loop holds (clients, threads); the loop may run again after."""

    def degraded(self, reason: str, detail: str) -> None:
        """Within :meth:`poll`: part of the cycle failed (one GPU of eight) and what was read is
        kept; the source is down with ``reason`` this cycle but retried at the interval."""
        self._degraded.append((reason, detail))

    # --- what the base does --------------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        try:
            await poll_forever(stop, self.poll_once, self.poll_interval)
        finally:
            await self.aclose()

    async def poll_once(self) -> float:
        """One cycle with its outcome recorded in ``health`` and ``on_change`` called; returns
        the delay until the next (the backoff after failures in a row)."""
        t0 = time.perf_counter()
        self._degraded = []
        try:
            await self.poll()
        except PollError as exc:
            if self.health.up or self.health.cycles == 0:
                log.warning("%s source down: %s: %s", self.health.name, exc.reason, exc)
            self.health.failure(exc.reason, str(exc), time.perf_counter() - t0)
            self.went_down()
            self._on_change()
            self._failures_in_row += 1
            backoff = self.poll_interval * 2 ** (self._failures_in_row - 1)
            return min(backoff, max(self.max_backoff, self.poll_interval))
        duration = time.perf_counter() - t0
        if self._degraded:
            for reason, detail in self._degraded:
                self.health.failure(reason, detail, duration)
        else:
            self.health.success(duration)
            self._failures_in_row = 0
        self._on_change()
        return self.poll_interval

    async def offload(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in a worker thread: parsing never runs on the event loop."""
        return await asyncio.to_thread(fn, *args)


class HttpPoller(Poller):
    """Base of a source polled over HTTP: the bounded GETs (``reasons`` are every label value
    it counts, the HTTP ones included: ``reasons.names(source)``)."""

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
        super().__init__(name, poll_interval=poll_interval, reasons=reasons, on_change=on_change)
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.http = outbound.Outbound(timeout=timeout, limit=max_body_bytes)

    async def aclose(self) -> None:
        await self.http.close()

    async def close(self) -> None:
        await self.aclose()

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


class ThreadPoller(Poller):
    """Base of a source whose reads run in one worker thread of its own, each under
    ``timeout`` seconds (:meth:`in_worker`); a read that times out is abandoned (``timeout``,
    :meth:`abandoned` is called) and, until it returns, every cycle fails as ``wedged``
    without starting another thread."""

    def __init__(
        self,
        name: str,
        *,
        poll_interval: float,
        timeout: float,
        reasons: Sequence[str],
        on_change: Callable[[], None] | None = None,
        max_backoff: float | None = None,
    ) -> None:
        super().__init__(
            name,
            poll_interval=poll_interval,
            reasons=reasons,
            on_change=on_change,
            max_backoff=max_backoff,
        )
        self.timeout = timeout
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._inflight: concurrent.futures.Future[Any] | None = None

    def abandoned(self) -> None:
        """A read timed out and its thread was left behind (reset what it was part way
        through: the next read starts on a fresh thread)."""

    async def in_worker(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the worker thread within ``timeout``; PollError ``wedged`` or
        ``timeout`` otherwise. What ``fn`` raises is raised here."""
        if self._inflight is not None and not self._inflight.done():
            raise PollError("wedged", "a previous call has not returned")
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix=self.health.name
            )
        fut = self._executor.submit(fn, *args)
        self._inflight = fut
        try:
            return await asyncio.wait_for(asyncio.wrap_future(fut), timeout=self.timeout)
        except asyncio.TimeoutError:
            # Abandon the wedged thread: a fresh executor takes the next read once it returns.
            self._executor.shutdown(wait=False)
            self._executor = None
            self.abandoned()
            detail = f"{self.health.name} read exceeded {self.timeout}s"
            raise PollError("timeout", detail) from None

    def close(self) -> None:
        """Stop the worker (a blocked read is left to finish on its own)."""
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    async def aclose(self) -> None:
        self.close()
