"""The one place sampled outputs meet the DSML grader.

Every way in (canary, tap, ingest) hands the pipeline a
:class:`~exporter.samplers.decode.GradingRequest`; the pipeline grades it off the response
path, in one worker thread (which, with ``worker="process"`` as the sidecar runs it, hands the
decoding and grading to one lower-priority grading process, so that no sample holds the GIL
of the loop the tap serves on), and counts the verdict by source and concurrency bucket. The
queue is bounded twice, by count (``grading_queue``) and by the bytes the waiting requests
hold (``grading_queue_bytes``): when either is full the request is dropped and counted, never
waited for. A grader exception is counted and never propagates. Degenerate and suspect
samples go to the triage store.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import queue
import re
import signal
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Literal, Protocol

from prometheus_client.core import Metric
from prometheus_client.samples import Exemplar

from exporter.dsml import DEFAULT_MAX_CHARS, REASONS, VERDICTS, Result
from exporter.metrics import catalog as m
from exporter.samplers import decode
from exporter.samplers.buckets import BUCKET_LABELS, bucket_label
from exporter.samplers.decode import GradingRequest
from exporter.samplers.length import (
    FINISH_REASONS,
    LENGTH_BUCKETS,
    LENGTH_LABELS,
    TOKEN_SOURCES,
    finish_label,
    length_label,
)
from exporter.samplers.store import SampleStore
from exporter.samplers.tap.sampling import Outcome, grading_drop_reason

log = logging.getLogger(__name__)

SOURCES = ("canary", "tap", "ingest")
DEFAULT_QUEUE_BYTES = 32 << 20  # the grading_queue_bytes setting's default

# An exemplar label leaves the process on every scrape: only identifier-shaped request ids
# (what SGLang and gateways generate) are attached, anything else is left off.
_EXEMPLAR_ID = re.compile(r"[A-Za-z0-9._:-]{1,64}")


# How much lower the grading process runs than the sidecar (os.nice): under the container's CPU
# limit the request path (the tap's loop) is scheduled first and grading takes what is left.
WORKER_NICE = 10


def _worker_init() -> None:
    """In the grading process: yield the CPU to the tap; Ctrl-C is the parent's to handle;
    exit when the parent is gone (a sidecar killed outright, SIGKILL or the OOM killer, never
    shuts its pool down, and the worker would wait on its queue forever, holding memory)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(OSError):  # not permitted: separate, only not deprioritised
        os.nice(WORKER_NICE)
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(0)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _grade_in_worker(
    request: GradingRequest, max_chars: int, dialect: str | None
) -> tuple[Result, int, str]:
    """Decode and grade one request (runs in the grading process: its GIL, not the tap's).
    Only the verdict comes back; the sample's bytes stay here."""
    request = decode.resolve(request)
    result = decode.grade(request, max_chars=max_chars, dialect=dialect)
    tokens, counted = decode.output_tokens(request, result)
    return result, tokens, counted


class TapExchange(decode.CapturedExchangeLike, Outcome, Protocol):
    """What :class:`TapHandoff` reads: the bodies and how the exchange ended."""


class GradingPipeline:
    def __init__(
        self,
        store: SampleStore | None = None,
        max_pending: int = 1000,
        on_change: Callable[[], None] | None = None,
        *,
        max_pending_bytes: int = DEFAULT_QUEUE_BYTES,
        max_chars: int = DEFAULT_MAX_CHARS,
        worker: Literal["thread", "process"] = "thread",
    ) -> None:
        # ``is None``, not ``or``: an empty store has len 0 and is falsy, and the operator's
        # store (its cap, capacity, byte limit and redaction patterns) would be replaced.
        self.store = store if store is not None else SampleStore()
        self.max_pending = max_pending
        self.max_pending_bytes = max_pending_bytes
        self.max_chars = max_chars
        self._queue: queue.SimpleQueue[GradingRequest | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._on_change = on_change or (lambda: None)
        self.pending = 0
        self.pending_bytes = 0
        # The deployment's DSML dialect, asked per sample (the sidecar learns it from SGLang).
        self.dialect: Callable[[], str | None] = lambda: None
        self.samples = {(s, v, b): 0 for s in SOURCES for v in VERDICTS for b in BUCKET_LABELS}
        self.reasons = {(s, r): 0 for s in SOURCES for r in REASONS}
        # length as a dimension (issue 26): by output-length bucket, the output-length
        # histogram per concurrency bucket, finish reasons by verdict, how tokens were counted
        self.by_length = {(s, v, b): 0 for s in SOURCES for v in VERDICTS for b in LENGTH_LABELS}
        self.length_hist = {b: [0] * (len(LENGTH_BUCKETS) + 1) for b in BUCKET_LABELS}
        self.length_sum = dict.fromkeys(BUCKET_LABELS, 0)
        self.finishes = {(f, v): 0 for f in FINISH_REASONS for v in VERDICTS}
        self.token_sources = dict.fromkeys(TOKEN_SOURCES, 0)
        self.dropped = dict.fromkeys(SOURCES, 0)
        self.errors = dict.fromkeys(SOURCES, 0)
        self.exemplars: dict[tuple[str, str, str], Exemplar] = {}
        self._thread: threading.Thread | None = None
        # "process": the queue's worker thread hands each request to one grading process and
        # only counts the verdict, so decoding and grading (38-54 ms of GIL per 7 MB sample,
        # issue 31) never stall the loop the tap and the API run on. "thread" grades in the
        # worker thread itself (library default; tests patch the grader in-process).
        self.worker = worker
        self._executor: ProcessPoolExecutor | None = None

    # --- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        if self.worker == "process" and self._executor is None:
            try:
                self._executor = self._new_executor()
            except (OSError, ImportError) as exc:  # no /dev/shm for its semaphores, say
                log.warning(
                    "no grading process (%s): grading runs in a thread of this process, "
                    "where a large sample competes with the tap for the GIL",
                    exc,
                )
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name="dsml-grader", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout)
            self._thread = None
        executor, self._executor = self._executor, None
        if executor is not None:
            # wait: the process and its queues are closed before the interpreter exits (left
            # to exit handlers, multiprocessing's resource tracker prints a leaked-semaphore
            # warning as a plain line into JSON logs). stop() runs off the event loop, and a
            # grading in flight is bounded by the sample caps.
            executor.shutdown(wait=True, cancel_futures=True)

    @staticmethod
    def _new_executor() -> ProcessPoolExecutor:
        """One grading process, spawned (not forked: the sidecar has threads and a running
        loop), started on the first request."""
        return ProcessPoolExecutor(
            max_workers=1,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_worker_init,
        )

    def worker_pids(self) -> list[int]:
        """The grading process's pid once it runs (empty with ``worker="thread"``)."""
        executor = self._executor
        procs = getattr(executor, "_processes", None) or {}
        return sorted(int(pid) for pid in procs)

    def submit(self, request: GradingRequest) -> bool:
        """Queue a request for grading; never blocks. False when it was dropped (and counted)
        because the queue already holds ``max_pending`` requests or ``max_pending_bytes``."""
        size = max(0, request.size)
        with self._lock:
            full = (
                self.pending >= self.max_pending
                or self.pending_bytes + size > self.max_pending_bytes
            )
            if full:
                self.dropped[request.source] = self.dropped.get(request.source, 0) + 1
            else:
                self.pending += 1
                self.pending_bytes += size
        if full:
            self._on_change()
            return False
        self._queue.put(request)
        return True

    # --- worker --------------------------------------------------------------------------------
    def _work(self) -> None:
        while True:
            request = self._queue.get()
            if request is None:
                return
            try:
                if self._executor is not None:
                    self._grade_remote(request)
                else:
                    self.grade_now(request)
            finally:
                with self._lock:
                    self.pending -= 1
                    self.pending_bytes -= max(0, request.size)

    def _grade_remote(self, request: GradingRequest) -> None:
        """Grade in the grading process (this thread waits on a pipe, holding no GIL); count
        here. A process that died (killed for memory, say) is replaced, the request counted
        as an error."""
        executor = self._executor
        assert executor is not None
        try:
            future = executor.submit(_grade_in_worker, request, self.max_chars, self.dialect())
            result, tokens, counted = future.result()
        except Exception as exc:
            if isinstance(exc, BrokenProcessPool):
                log.warning("the grading process died (%r); starting a new one", exc)
                if self._executor is executor:
                    executor.shutdown(wait=False, cancel_futures=True)
                    self._executor = self._new_executor()
            else:
                log.error(
                    "grader raised on a %s sample (text not logged): %s",
                    request.source,
                    type(exc).__name__,
                )
            with self._lock:
                self.errors[request.source] = self.errors.get(request.source, 0) + 1
            self._on_change()
            return
        self._count(request, result, tokens, counted)
        self._on_change()

    def grade_now(self, request: GradingRequest) -> Result | None:
        """Grade and count one request in the calling thread."""
        try:
            request = decode.resolve(request)
            result = decode.grade(request, max_chars=self.max_chars, dialect=self.dialect())
            tokens, counted = decode.output_tokens(request, result)
        except Exception:
            log.exception("grader raised on a %s sample (text not logged)", request.source)
            with self._lock:
                self.errors[request.source] = self.errors.get(request.source, 0) + 1
            self._on_change()
            return None
        self._count(request, result, tokens, counted)
        self._on_change()
        return result

    def _exemplar_safe(self, rid: str | None) -> bool:
        """An id to put on /metrics: identifier-shaped and untouched by redaction."""
        return bool(rid and _EXEMPLAR_ID.fullmatch(rid) and self.store.redactor(rid) == rid)

    def _count(
        self, request: GradingRequest, result: Result, tokens: int = 0, counted: str = "estimate"
    ) -> None:
        reasons = sorted({f.reason for f in result.findings})
        conc = bucket_label(request.concurrency)
        key = (request.source, result.verdict, conc)
        lkey = (request.source, result.verdict, length_label(tokens))
        slot = next((i for i, b in enumerate(LENGTH_BUCKETS) if tokens <= b), len(LENGTH_BUCKETS))
        fkey = (finish_label(result.finish_reason), result.verdict)
        rid = request.request_id
        exemplar = result.verdict == "degenerate" and self._exemplar_safe(rid)
        with self._lock:
            self.samples[key] = self.samples.get(key, 0) + 1
            self.by_length[lkey] = self.by_length.get(lkey, 0) + 1
            self.length_hist[conc][slot] += 1
            self.length_sum[conc] += tokens
            self.finishes[fkey] = self.finishes.get(fkey, 0) + 1
            self.token_sources[counted] = self.token_sources.get(counted, 0) + 1
            for r in reasons:
                rk = (request.source, r)
                self.reasons[rk] = self.reasons.get(rk, 0) + 1
            if exemplar and rid:
                self.exemplars[key] = Exemplar({"request_id": rid}, 1.0)
        self.store.add(
            source=request.source,
            concurrency=request.concurrency,
            verdict=result.verdict,
            reasons=reasons,
            spans=[f.to_json() for f in result.findings],
            text=result.text,
            request_id=rid,
            output_tokens=tokens,
            tokens_counted=counted,
            finish_reason=result.finish_reason,
        )

    # --- exposition ----------------------------------------------------------------------------
    def collect(self) -> Iterable[Metric]:
        with self._lock:
            samples = dict(self.samples)
            reasons = dict(self.reasons)
            dropped, errors = dict(self.dropped), dict(self.errors)
            exemplars = dict(self.exemplars)
            by_length, finishes = dict(self.by_length), dict(self.finishes)
            hist = {b: list(v) for b, v in self.length_hist.items()}
            hist_sum, counted = dict(self.length_sum), dict(self.token_sources)
        fam = m.DSML_SAMPLES.family()
        for key, n in sorted(samples.items()):
            fam.add_metric(list(key), float(n), exemplar=exemplars.get(key))
        yield fam
        fam = m.DSML_REASONS.family()
        for reason_key, n in sorted(reasons.items()):
            fam.add_metric(list(reason_key), float(n))
        yield fam
        for spec, table in ((m.DSML_LENGTH_SAMPLES, by_length), (m.DSML_FINISH_REASONS, finishes)):
            fam = spec.family()
            for lkey, n in sorted(table.items()):
                fam.add_metric(list(lkey), float(n))
            yield fam
        fam = m.DSML_OUTPUT_TOKENS.family()
        for conc, counts in sorted(hist.items()):
            cumulative, buckets = 0, []
            for le, n in zip((*LENGTH_BUCKETS, "+Inf"), counts, strict=True):
                cumulative += n
                buckets.append((str(le), float(cumulative)))
            fam.add_metric([conc], buckets, float(hist_sum[conc]))
        yield fam
        fam = m.DSML_TOKENS_COUNTED.family()
        for how, n in sorted(counted.items()):
            fam.add_metric([how], float(n))
        yield fam
        for spec, values in ((m.DSML_DROPPED, dropped), (m.DSML_GRADING_ERRORS, errors)):
            fam = spec.family()
            for source, n in sorted(values.items()):
                fam.add_metric([source], float(n))
            yield fam
        yield m.DSML_STORED.one(len(self.store))


class TapHandoff:
    """The tap's non-blocking hand-off to the grading queue, called on the proxy's loop.

    Only complete HTTP 200 answers are graded (a stream cut short or an error page is not a
    corrupt tool call); they are filtered here, before the tap counts anything, so
    ``dsv4_tap_sampled_total`` counts exactly the exchanges queued for grading. Returns None
    when the exchange was queued, else the ``dsv4_tap_samples_dropped_total`` reason."""

    def __init__(self, pipeline: GradingPipeline) -> None:
        self.pipeline = pipeline

    def handoff(self, exchange: TapExchange) -> str | None:
        reason = grading_drop_reason(exchange)
        if reason is not None:
            return reason
        return None if self.pipeline.submit(decode.from_exchange(exchange)) else "queue_full"
