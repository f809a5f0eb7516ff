"""The reporter thread: resolves pending measurements and writes this rank's snapshot file.

It starts when the process first calls a wrapped method (so the launcher and tokenizer
processes, which import SGLang but run no model, never write), writes once per interval with
write-then-rename, and writes a final ``closed`` snapshot at exit so the sidecar can mark the
rank down at once instead of waiting for staleness. Any error is logged once and swallowed.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
import time
from pathlib import Path

from exporter.probe.runtime import Probe
from exporter.probe.snapshot import RANK_RE, write_snapshot

logger = logging.getLogger("exporter.probe")

HOST_POLL_S = 0.001


def resolve_rank(configured: str | None) -> str | None:
    """DSV4_PROBE_RANK when set, else the torch.distributed rank once SGLang initialised it
    (torch is only looked up, never imported). None while unknown: nothing is written."""
    if configured:
        return configured if RANK_RE.match(configured) else None
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return str(dist.get_rank())
    except Exception:
        return None
    return None


class Reporter:
    def __init__(self, probe: Probe) -> None:
        self.probe = probe
        self.config = probe.config
        self.started_at = time.time()
        self.seq = 0
        self.rank: str | None = None
        self.last_path: Path | None = None
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        self._stop = threading.Event()
        self._closed = False
        self._write_error: str | None = None
        self._rank_warned = False
        self._lock = threading.Lock()

    def start(self) -> None:
        """Start the thread (idempotent); also the after-fork entry point of a child."""
        with self._lock:
            if self._thread is not None and self._pid == os.getpid():
                return
            self._pid = os.getpid()
            self._stop = threading.Event()
            self._closed = False
            thread = threading.Thread(target=self._run, name="dsv4-probe-reporter", daemon=True)
            self._thread = thread
        atexit.register(self.close)
        _register_mp_finalizer(self.close)
        thread.start()

    def after_fork_in_child(self) -> None:
        """A forked child inherits the parent's counts and no thread: start afresh."""
        self._thread = None
        self.seq = 0
        self.started_at = time.time()
        self.probe.reset_after_fork()
        if self.probe.engaged:
            self.start()

    def _run(self) -> None:
        prepared = False
        next_write = time.monotonic()
        while not self._stop.is_set():
            if not prepared and self.probe.timeline is not None:
                prepared = True
                self._guard(self.probe.timeline.prepare_thread)
            now = time.monotonic()
            if now >= next_write:
                self.tick()
                next_write = now + self.config.interval_s
            elif self.probe.has_polling_work:
                self._guard(self.probe.resolve)
            timeout = max(0.0, next_write - time.monotonic())
            if self.probe.has_polling_work:
                timeout = min(timeout, HOST_POLL_S)
            self.probe.wake.wait(timeout)
            self.probe.wake.clear()

    def _guard(self, fn) -> None:
        try:
            fn()
        except Exception as exc:
            self.probe.counters.errors += 1
            logger.debug("dsv4-probe: reporter error %r", exc)

    def tick(self, closed: bool = False) -> Path | None:
        """Resolve what can be resolved and write the snapshot; never raises."""
        self._guard(self.probe.resolve)
        rank = resolve_rank(self.config.rank)
        if rank is None:
            if not self._rank_warned and time.time() - self.started_at > self.config.rank_grace_s:
                self._rank_warned = True
                logger.warning(
                    "dsv4-probe: rank unknown (torch.distributed not initialised, "
                    "DSV4_PROBE_RANK unset); not writing snapshots"
                )
            return None
        self.rank = rank
        self.seq += 1
        try:
            path = write_snapshot(
                self.config.directory,
                rank,
                self.probe.counters,
                started_at=self.started_at,
                seq=self.seq,
                closed=closed,
            )
        except Exception as exc:
            detail = f"{type(exc).__name__}: {exc}"
            if detail != self._write_error:
                self._write_error = detail
                logger.warning(
                    "dsv4-probe: cannot write snapshot in %s: %s", self.config.directory, detail
                )
            return None
        self._write_error = None
        self.last_path = path
        return path

    def close(self) -> None:
        """Final snapshot marked closed (at exit); the sidecar marks the rank down at once."""
        if self._closed or self._pid != os.getpid():
            return
        self._closed = True
        self._stop.set()
        self.probe.wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=2.0)
        if self.probe.engaged:
            self.tick(closed=True)


def _register_mp_finalizer(fn) -> None:
    """multiprocessing children leave through os._exit, skipping atexit; their own
    finalizers still run, so register there too (close() is idempotent)."""
    util = sys.modules.get("multiprocessing.util")
    if util is None:
        return
    try:
        util.Finalize(None, fn, exitpriority=100)
    except Exception:
        logger.debug("dsv4-probe: no multiprocessing finalizer", exc_info=True)
