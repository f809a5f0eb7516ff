"""The tap's own process hands sampled exchanges to the sidecar over loopback.

`dsv4-sidecar tap` runs the proxy apart from grading, scraping and the API (issue 31: grading
a 7 MB answer on the proxy's loop raised every user's latency to 145 ms). What it samples goes
into a bounded queue (count and bytes) that one sender task drains, posting each exchange to
the sidecar's ``POST /api/v1/samples`` (:mod:`exporter.samplers.tap.handover`). Nothing on the
byte path waits for the sidecar: a full queue drops, a sidecar that is down or refuses drops,
and each drop is counted in ``dsv4_tap_samples_dropped_total{reason}``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import deque
from collections.abc import Callable

import aiohttp

from exporter.samplers.tap import handover
from exporter.samplers.tap.sampling import CapturedExchange, cancel, grading_drop_reason
from exporter.samplers.tap.stats import TapStats

log = logging.getLogger(__name__)

INGEST_PATH = "/api/v1/samples"
CONNECT_SECONDS = 2.0
"""The sidecar is on loopback: a connection that takes longer is a sidecar that is not there."""
POST_SECONDS = 30.0
"""A whole post (up to max_sample_bytes) over loopback; past it the sample is dropped."""


class SidecarForwarder:
    """A :class:`~exporter.samplers.tap.sampling.Handoff` that queues for the sidecar.

    ``handoff`` runs on the tap's loop and never blocks: it filters what is not graded
    (``grading_drop_reason``), refuses past ``max_items`` or ``max_bytes`` queued
    (``queue_full``), else queues. The sender posts one exchange at a time (the sidecar reads
    one ingest body at a time by default) and counts what the sidecar did not take:
    ``sidecar_unavailable`` (no connection, a timeout, a 5xx), ``sidecar_refused`` (a 4xx other
    than 429: a wrong token, a body over ingest_max_bytes) or ``queue_full`` (its grading
    queue was full, or 429). ``token`` is read before each post (a mounted Secret rotates).
    """

    def __init__(
        self,
        sidecar_url: str,
        stats: TapStats,
        *,
        max_items: int,
        max_bytes: int,
        token: Callable[[], str | None] = lambda: None,
    ) -> None:
        self.url = sidecar_url.rstrip("/") + INGEST_PATH
        self._stats = stats
        self._max_items = max_items
        self._max_bytes = max_bytes
        self._token = token
        self._pending: deque[CapturedExchange] = deque()
        self.pending_bytes = 0
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def handoff(self, exchange: CapturedExchange) -> str | None:
        reason = grading_drop_reason(exchange)
        if reason is not None:
            return reason
        size = len(exchange.request_body) + len(exchange.response_body)
        if len(self._pending) >= self._max_items or self.pending_bytes + size > self._max_bytes:
            return "queue_full"
        self._pending.append(exchange)
        self.pending_bytes += size
        self._wake.set()
        return None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        await cancel(self._task)
        self._task = None

    async def _run(self) -> None:
        timeout = aiohttp.ClientTimeout(total=POST_SECONDS, connect=CONNECT_SECONDS)
        connector = aiohttp.TCPConnector(limit=1)
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
            while True:
                if not self._pending:
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                exchange = self._pending.popleft()
                self.pending_bytes -= len(exchange.request_body) + len(exchange.response_body)
                reason = await self._post(session, exchange)
                if reason is not None:
                    self._stats.dropped[reason] += 1

    async def _post(self, session: aiohttp.ClientSession, exchange: CapturedExchange) -> str | None:
        headers = {"Content-Type": handover.CONTENT_TYPE}
        token = self._token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        try:
            async with session.post(
                self.url, data=b"".join(handover.encode(exchange)), headers=headers
            ) as resp:
                body = await resp.read()
                status = resp.status
        except asyncio.CancelledError:
            raise
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
            log.debug("posting a sample to the sidecar failed: %s", type(exc).__name__)
            return "sidecar_unavailable"
        if status == 429:
            return "queue_full"
        if status >= 500:
            return "sidecar_unavailable"
        if status != 200:
            log.debug("the sidecar refused a sample: HTTP %s", status)
            return "sidecar_refused"
        try:
            accepted = json.loads(body).get("accepted", 0)
        except (ValueError, AttributeError):
            return "sidecar_refused"
        return None if accepted else "queue_full"
