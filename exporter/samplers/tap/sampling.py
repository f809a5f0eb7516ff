"""Which responses go to grading, what a captured exchange carries, and the hand-off.

Everything here runs after the response's bytes were written, or on the side of the byte
path; an exception in it is counted (``dsv4_tap_sampling_errors_total``) and swallowed.

The tap captures a :class:`CapturedExchange` (raw bodies, status, whether it completed); the
grader works on a :class:`~exporter.samplers.decode.GradingRequest`. The sidecar hands the
tap a :class:`Handoff` (a non-blocking put into the grading queue, which does its own
filtering), called straight from the loop: no second queue and no extra thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import inspect
import logging
import re
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from exporter.samplers.tap.stats import TapStats

log = logging.getLogger(__name__)

SampleCallback = Callable[["CapturedExchange"], "Awaitable[None] | None"]

# The first "id" in a response body: chat completions carry "chatcmpl-...", /generate carries
# meta_info.id. Bounded length and character set: it is an identifier, not free text.
_ID_IN_BODY = re.compile(rb'"id"\s*:\s*"([A-Za-z0-9._:\-]{1,128})"')
_ID_SCAN_BYTES = 4096
PIECE_OVERHEAD = sys.getsizeof(b"") + 8
"""Memory a kept body piece costs beyond its bytes: the bytes object's header and its slot in
the list (tuple) holding it. Charged per piece, so that bounds in bytes bound memory too: an
upstream sending 1-byte chunks makes a piece per byte, 40 times its payload uncharged."""


@dataclass(frozen=True, slots=True)
class CapturedExchange:
    """One sampled exchange, as the client saw it (bodies de-chunked, never any headers).

    ``streaming`` is true for ``text/event-stream`` responses (the body is then the raw SSE
    bytes). ``concurrency`` is the tap's in-flight count when this request arrived, itself
    included. ``complete`` is false when the response was cut short (SGLang reset, client
    left): a grader should not judge a truncated answer as corrupt.

    The response is kept as the pieces the tap forwarded (``response_pieces``, references to
    them, ``response_bytes`` long) and joined only when a consumer reads ``response_body``:
    joining a sampled 7 MB answer on the tap's loop cost other users' requests 5-66 ms
    (page-faulting a fresh 7 MB block each time), and the tap process posts the pieces
    without ever joining them (:mod:`exporter.samplers.tap.forward`).
    """

    request_body: bytes
    response_pieces: tuple[bytes, ...]
    response_bytes: int
    status: int
    content_type: str
    streaming: bool
    concurrency: int
    request_id: str | None
    method: str
    path: str
    complete: bool
    started_at: float
    duration_seconds: float

    @property
    def response_body(self) -> bytes:
        """The response in one piece: a copy (once per call) unless it came in one read."""
        pieces = self.response_pieces
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    @classmethod
    def whole(
        cls,
        request_body: bytes,
        response_body: bytes,
        *,
        status: int,
        content_type: str,
        streaming: bool,
        concurrency: int,
        request_id: str | None,
        method: str,
        path: str,
        complete: bool,
        started_at: float,
        duration_seconds: float,
    ) -> CapturedExchange:
        """An exchange whose response is one piece (tests, and bodies that arrive whole)."""
        return cls(
            request_body,
            (response_body,),
            len(response_body),
            status,
            content_type,
            streaming,
            concurrency,
            request_id,
            method,
            path,
            complete,
            started_at,
            duration_seconds,
        )


@runtime_checkable
class Handoff(Protocol):
    """A consumer that takes an exchange without blocking, on the loop, and says what became
    of it: None when taken, else the reason it was not (a ``dsv4_tap_samples_dropped_total``
    reason). The tap counts ``sampled`` only for exchanges taken."""

    def handoff(self, exchange: CapturedExchange) -> str | None: ...


class Outcome(Protocol):
    """How an exchange ended: what :func:`grading_drop_reason` reads."""

    @property
    def status(self) -> int: ...
    @property
    def complete(self) -> bool: ...


def grading_drop_reason(exchange: Outcome) -> str | None:
    """Why an exchange is not for grading (a ``dsv4_tap_samples_dropped_total`` reason), None
    when it is: only complete HTTP 200 answers are graded (a stream cut short or an error page
    is not a corrupt tool call). One rule for the in-process hand-off and the tap's own
    process, applied before either counts an exchange as sampled."""
    if exchange.status != 200:
        return "not_ok"
    if not exchange.complete:
        return "incomplete"
    return None


class Sampler:
    """Deterministic selection: keyed BLAKE2b of path and body, compared with the rate."""

    __slots__ = ("_key", "_paths", "_threshold", "rate")

    def __init__(self, rate: float, seed: int, paths: tuple[str, ...]) -> None:
        self.rate = rate
        self._threshold = int(rate * (1 << 64))
        self._key = seed.to_bytes(8, "little", signed=True)
        self._paths = tuple(p.encode() for p in paths)

    def is_candidate(self, method: bytes, path: bytes) -> bool:
        return self.rate > 0.0 and method == b"POST" and path.startswith(self._paths)

    def hasher(self, path: bytes) -> hashlib.blake2b:
        h = hashlib.blake2b(digest_size=8, key=self._key)
        h.update(path)
        h.update(b"\0")
        return h

    def chosen(self, hasher: hashlib.blake2b) -> bool:
        return int.from_bytes(hasher.digest(), "little") < self._threshold

    def decide(self, path: bytes, body: bytes) -> bool:
        """The decision for a whole request (what the tap computes incrementally)."""
        h = self.hasher(path)
        h.update(body)
        return self.chosen(h)


class CaptureBudget:
    """Bytes all in-flight captures of one tap may keep together (``capture_budget_bytes``).

    A capture reserves what it keeps and gives it back when it ends (handed off, not chosen,
    dropped or failed), so many slow or withheld candidate bodies cannot add up: past the
    budget a capture stops keeping (dropped, reason ``capture_budget``) and its request is
    forwarded as usual."""

    __slots__ = ("available", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.available = limit

    @property
    def held(self) -> int:
        return self.limit - self.available


class Capture:
    """Keeps one candidate exchange's body pieces (references, no copies) until it ends."""

    __slots__ = (
        "budget",
        "chosen",
        "hasher",
        "limit",
        "overflow",
        "request",
        "reserved",
        "response",
        "response_size",
        "size",
    )

    def __init__(self, hasher: hashlib.blake2b, limit: int, budget: CaptureBudget) -> None:
        self.hasher = hasher
        self.request: list[bytes] = []
        self.response: list[bytes] = []
        self.response_size = 0  # bytes in ``response`` (summed as kept: never re-counted)
        self.size = 0
        self.limit = limit
        self.budget = budget
        self.reserved = 0
        self.chosen: bool | None = None  # unknown until the request body is complete
        # why the pieces were let go ("too_large", "capture_budget"), or "" while kept
        self.overflow = ""

    def add_request(self, piece: bytes) -> None:
        self.hasher.update(piece)
        self._keep(self.request, piece)

    def add_response(self, piece: bytes) -> None:
        if self.chosen is not False and self._keep(self.response, piece):
            self.response_size += len(piece)

    def release(self) -> None:
        """Give the reserved bytes back to the budget (idempotent)."""
        self.budget.available += self.reserved
        self.reserved = 0

    def _keep(self, pieces: list[bytes], piece: bytes) -> bool:
        """Keep ``piece`` in ``pieces`` within the limit and the budget; whether it was kept."""
        if self.overflow:
            return False
        n = len(piece)
        self.size += n
        budget = self.budget
        if self.size > self.limit:
            self._let_go("too_large")
            return False
        cost = n + PIECE_OVERHEAD  # the budget bounds memory: a piece's header too
        if cost > budget.available:
            self._let_go("capture_budget")
            return False
        budget.available -= cost
        self.reserved += cost
        pieces.append(piece)
        return True

    def _let_go(self, reason: str) -> None:
        self.overflow = reason
        self.request.clear()
        self.response.clear()
        self.response_size = 0
        self.release()


def _head_of(pieces: tuple[bytes, ...]) -> bytes:
    """The first ``_ID_SCAN_BYTES`` of the joined pieces, joining no more than that."""
    head: list[bytes] = []
    size = 0
    for piece in pieces:
        if size >= _ID_SCAN_BYTES:
            break
        head.append(piece[: _ID_SCAN_BYTES - size])
        size += len(head[-1])
    return b"".join(head)


def find_request_id(header_value: bytes | None, body_head: bytes) -> str | None:
    """Request id from an ``X-Request-Id`` header, else the first ``"id"`` in the body."""
    if header_value:
        return header_value[:128].decode("latin-1")
    m = _ID_IN_BODY.search(body_head[:_ID_SCAN_BYTES])
    return m.group(1).decode("ascii") if m else None


class SampleSink:
    """Between the byte path and the consumer.

    With a :class:`Handoff` (the sidecar's grading queue), ``offer`` calls it directly and
    counts what it answers. Otherwise a bounded queue: ``offer`` never blocks; when the queue
    is full the sample is dropped and counted. With a callback, one dispatcher task feeds
    it: coroutine functions are awaited on the loop (a slow one only fills the queue), plain
    functions run on one worker thread (so a blocking one cannot stall the loop). A callback
    that raises is counted and the next sample is served.
    Without a callback the consumer reads ``queue`` itself.
    """

    def __init__(
        self, maxsize: int, stats: TapStats, on_sample: SampleCallback | Handoff | None
    ) -> None:
        self.queue: asyncio.Queue[CapturedExchange] = asyncio.Queue(maxsize)
        self._stats = stats
        self._handoff = on_sample if isinstance(on_sample, Handoff) else None
        self._on_sample = None if isinstance(on_sample, Handoff) else on_sample
        self._task: asyncio.Task[None] | None = None
        self._executor: ThreadPoolExecutor | None = None

    def offer(self, sample: CapturedExchange) -> None:
        if self._handoff is not None:
            reason = self._handoff.handoff(sample)
            if reason is None:
                self._stats.sampled += 1
            else:
                self._stats.dropped[reason] += 1
            return
        try:
            self.queue.put_nowait(sample)
        except asyncio.QueueFull:
            self._stats.dropped["queue_full"] += 1
        else:
            self._stats.sampled += 1

    def start(self) -> None:
        if self._on_sample is not None and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._dispatch())

    async def stop(self) -> None:
        await cancel(self._task)
        self._task = None
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    async def _dispatch(self) -> None:
        callback = self._on_sample
        assert callback is not None
        is_async = inspect.iscoroutinefunction(callback) or inspect.iscoroutinefunction(
            getattr(callback, "__call__", None)  # noqa: B004 - async callable objects
        )
        loop = asyncio.get_running_loop()
        while True:
            sample = await self.queue.get()
            try:
                if is_async:
                    await callback(sample)  # type: ignore[misc]
                else:
                    if self._executor is None:
                        self._executor = ThreadPoolExecutor(1, thread_name_prefix="tap-sample")
                    result = await loop.run_in_executor(self._executor, callback, sample)
                    if inspect.isawaitable(result):
                        await result
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the consumer's bug must never reach the tap
                self._stats.errors["consumer"] += 1
                log.debug("sample consumer raised %s", type(exc).__name__)


async def cancel(task: asyncio.Task[None] | None) -> None:
    """Cancel a consumer task and wait until it has ended (None: nothing to do)."""
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def until_signalled() -> None:
    """Return on SIGTERM or SIGINT: how a tap process (standalone or `dsv4-sidecar tap`)
    knows to stop, drain and exit."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    await stop.wait()


def build_sample(
    capture: Capture,
    *,
    status: int,
    content_type: bytes,
    request_id_header: bytes | None,
    concurrency: int,
    method: bytes,
    path: bytes,
    complete: bool,
    started_at: float,
    started_perf: float,
) -> CapturedExchange:
    """The captured pieces as a :class:`CapturedExchange` (after the response was sent): the
    request joined (it is small: SGLang's prompt), the response's pieces kept as they are."""
    pieces = tuple(capture.response)
    ctype = content_type.decode("latin-1").strip()
    return CapturedExchange(
        request_body=b"".join(capture.request),
        response_pieces=pieces,
        response_bytes=capture.response_size,
        status=status,
        content_type=ctype,
        streaming=ctype.lower().startswith("text/event-stream"),
        concurrency=concurrency,
        request_id=find_request_id(request_id_header, _head_of(pieces)),
        method=method.decode("latin-1"),
        path=path.decode("latin-1"),
        complete=complete,
        started_at=started_at,
        duration_seconds=time.perf_counter() - started_perf,
    )
