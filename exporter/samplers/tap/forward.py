"""The tap's own process hands sampled exchanges to the sidecar over loopback.

`dsv4-sidecar tap` runs the proxy apart from grading, scraping and the API (issue 31: grading
a 7 MB answer on the proxy's loop raised every user's latency to 145 ms). What it samples goes
into a bounded queue (count and bytes) that one sender task drains, posting what waits in
batches (up to 4 MiB: one post per sampled small answer would cost the tap and the sidecar an
HTTP request each) to the sidecar's ``POST /api/v1/samples``
(:mod:`exporter.samplers.tap.handover`). Nothing on the byte path waits for the sidecar: a
full queue drops, a sidecar that is down or refuses drops, and each drop is counted in
``dsv4_tap_samples_dropped_total{reason}``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator

import aiohttp

from exporter.samplers.tap import handover
from exporter.samplers.tap.sampling import (
    PIECE_OVERHEAD,
    CapturedExchange,
    cancel,
    grading_drop_reason,
)
from exporter.samplers.tap.stats import TapStats

log = logging.getLogger(__name__)

INGEST_PATH = "/api/v1/samples"
CONNECT_SECONDS = 2.0
"""The sidecar is on loopback: a connection that takes longer is a sidecar that is not there."""
ANSWER_MAX_BYTES = 64 << 10
"""The sidecar's answer to a post is a small JSON object; read no more than this of it (a
wrong ``sidecar_url`` may point at anything), and an answer cut there counts as refused."""
POST_SECONDS = 30.0
"""A whole post (up to max_sample_bytes) over loopback; past it the sample is dropped."""


BATCH_LINGER = 0.1
"""Seconds the sender waits after the first sample arrives before posting, so that samples
arriving meanwhile share the post (bounded by the queue's count and bytes all the same)."""
WRITE_SLICE = 256 << 10
"""Bytes written to the sidecar's socket at a time, the loop served between slices: a 7 MB
sample written whole is one long copy during which no client's bytes move."""


def _held_bytes(exchange: CapturedExchange) -> int:
    """Memory a queued exchange holds: its bodies, and the headers of the response's pieces
    beyond the one a joined body would have (tap_queue_bytes bounds memory, whatever the
    chunking SGLang chose)."""
    extra = (len(exchange.response_pieces) - 1) * PIECE_OVERHEAD
    return len(exchange.request_body) + exchange.response_bytes + max(extra, 0)


async def _slices(pieces: list[bytes]) -> AsyncIterator[bytes | memoryview]:
    """The body in writes of at most WRITE_SLICE, yielding to the loop after each so the
    clients' callbacks run between them: a large piece goes as views of it (no copy), runs of
    small ones (a streamed answer's pieces are its SSE events) are joined up to WRITE_SLICE."""
    for write in _writes(pieces):
        yield write
        await asyncio.sleep(0)


def _writes(pieces: list[bytes]) -> Iterator[bytes | memoryview]:
    """:func:`_slices` without the yielding to the loop."""
    run: list[bytes] = []
    size = 0
    for piece in pieces:
        n = len(piece)
        if size + n > WRITE_SLICE and run:
            yield b"".join(run)
            run, size = [], 0
        if n >= WRITE_SLICE:
            view = memoryview(piece)
            for at in range(0, n, WRITE_SLICE):
                yield view[at : at + WRITE_SLICE]
            continue
        run.append(piece)
        size += n
    if run:
        yield b"".join(run)


class SidecarForwarder:
    """A :class:`~exporter.samplers.tap.sampling.Handoff` that queues for the sidecar.

    ``handoff`` runs on the tap's loop and never blocks: it filters what is not graded
    (``grading_drop_reason``), refuses past ``max_items`` or ``max_bytes`` queued
    (``queue_full``), else queues. The sender posts one batch at a time (the sidecar reads
    one ingest body at a time by default) and counts, per exchange, what the sidecar did not take:
    ``sidecar_unavailable`` (no connection, a timeout, a 5xx), ``sidecar_refused`` (a 4xx other
    than 429: a wrong token, an exchange alone over ingest_max_bytes) or ``queue_full`` (its grading
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
        size = _held_bytes(exchange)
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
                    # let a batch gather: at most one post per BATCH_LINGER while samples flow
                    await asyncio.sleep(BATCH_LINGER)
                    continue
                batch = self._take()
                for reason, n in (await self._post(session, batch)).items():
                    self._stats.dropped[reason] += n

    def _take(self) -> list[CapturedExchange]:
        """What waits, oldest first, in a body of at most BATCH_BYTES (metadata lines
        included: the sidecar's ingest_max_bytes is at least that) and MAX_RECORDS exchanges;
        at least one, however large."""
        batch: list[CapturedExchange] = []
        size = 0
        pending = self._pending
        while pending and len(batch) < handover.MAX_RECORDS:
            n = handover.record_bytes(pending[0])
            if batch and size + n > handover.BATCH_BYTES:
                break
            exchange = pending.popleft()
            batch.append(exchange)
            size += n
            self.pending_bytes -= _held_bytes(exchange)
        return batch

    async def _post(
        self, session: aiohttp.ClientSession, batch: list[CapturedExchange]
    ) -> dict[str, int]:
        """Post one batch; how many of it were dropped, by reason (empty: all taken)."""
        pieces = handover.encode(batch)
        headers = {
            "Content-Type": handover.CONTENT_TYPE,
            "Content-Length": str(sum(len(p) for p in pieces)),
        }
        token = self._token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        every = len(batch)
        try:
            async with session.post(self.url, data=_slices(pieces), headers=headers) as resp:
                body = await resp.content.read(ANSWER_MAX_BYTES)
                status = resp.status
        except asyncio.CancelledError:
            raise
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
            log.debug("posting samples to the sidecar failed: %s", type(exc).__name__)
            return {"sidecar_unavailable": every}
        if status == 429:
            return {"queue_full": every}
        if status >= 500:
            return {"sidecar_unavailable": every}
        if status != 200:
            log.debug("the sidecar refused samples: HTTP %s", status)
            return {"sidecar_refused": every}
        try:
            dropped = json.loads(body).get("dropped", every)
        except (ValueError, AttributeError):
            return {"sidecar_refused": every}
        if not (isinstance(dropped, int) and 0 <= dropped <= every):
            return {"sidecar_refused": every}
        return {"queue_full": dropped} if dropped else {}
