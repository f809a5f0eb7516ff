"""The probe source: reads the in-process probe's per-rank snapshot files (no torch).

Each SGLang rank with the probe on writes ``rank-<rank>.json`` into a shared directory (an
emptyDir mounted in both containers) once a second. This source polls that directory off the
event loop and keeps, per rank, either the latest valid snapshot (up) or why the rank is down:

* ``stale``: not rewritten for ``stale_after_s`` (writer hung, killed, or its node clock went
  backwards), the default 5 s being five missed writes;
* ``writer_exited``: the writer's last snapshot says it closed (clean exit);
* ``writer_dead``: its pid is gone, checked only when the writer shares this process's PID
  namespace and host (``shareProcessNamespace: true``), since a pid means nothing elsewhere;
* ``unreadable`` / ``malformed`` / ``unsupported_version``: the file cannot be used.

A down rank exports ``dsv4_probe_up{rank} 0``, its last report timestamp (for
``time() - ts`` alerts) and ``dsv4_probe_down_reason``; its counters and gap histogram are
dropped, like a lost GPU's series: they are no longer being measured, and a restarted writer
starts from zero anyway (Prometheus treats that as a counter reset). A rank silent for
``forget_after_s`` disappears entirely. The source itself is down only when the directory
cannot be listed, or its read does not return within ``timeout_s`` (a hung mount: the
:class:`~exporter.sources.poller.ThreadPoller`'s worker thread, timeout and wedge guard).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.core import Metric
from prometheus_client.utils import floatToGoString

from exporter.metrics import catalog as C
from exporter.probe.snapshot import (
    HOOK_NAMES,
    Snapshot,
    SnapshotError,
    pid_namespace,
    rank_from_filename,
    read_snapshot,
)
from exporter.sources import reasons as source_reasons
from exporter.sources.poller import PollError, ThreadPoller


@dataclass(frozen=True)
class RankView:
    """One rank as the latest poll saw it."""

    rank: str
    up: bool
    reason: str | None
    snapshot: Snapshot | None  # the latest valid one, also kept while down for its timestamp
    seen_at: float  # written_at of that snapshot, else the file's mtime


# Snapshot files read per poll: one per rank of this pod's node (8-16 GPUs), with room to
# spare; past it the rest are ignored and counted (2,000 files made 125k series).
MAX_RANK_FILES = 64


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return True
    return True


class ProbeFileSource(ThreadPoller):
    """``ProbeFileSource(directory, stale_after_s=5.0, interval_s=1.0, forget_after_s=3600.0)``.

    ``run(stop)`` polls every ``interval_s``; ``collect()`` renders the latest poll.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        stale_after_s: float = 5.0,
        interval_s: float = 1.0,
        forget_after_s: float = 3600.0,
        *,
        timeout_s: float = 5.0,
        clock: Callable[[], float] = time.time,
        pid_alive: Callable[[int], bool] = _pid_alive,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(
            "probe",
            poll_interval=interval_s,
            timeout=timeout_s,
            reasons=source_reasons.names("probe"),
            on_change=on_change,  # the probe's index-K dtype settles a fact
        )
        self.directory = Path(directory)
        self.stale_after_s = stale_after_s
        self.interval_s = interval_s
        self.forget_after_s = forget_after_s
        self._clock = clock
        self._pid_alive = pid_alive
        self._own_ns = pid_namespace()
        self._hostname = socket.gethostname()
        self._last_good: dict[str, Snapshot] = {}
        self._ranks: tuple[RankView, ...] = ()

    @property
    def ranks(self) -> tuple[RankView, ...]:
        return self._ranks

    async def poll(self) -> None:
        """A directory read is file I/O (a slow or hung mount): always on the worker thread."""
        self._ranks = await self.in_worker(self.scan)

    def went_down(self) -> None:
        self._ranks = ()

    def scan(self) -> tuple[RankView, ...]:
        """List and read the directory (worker-thread side); PollError when it cannot be
        listed."""
        try:
            names = sorted(os.listdir(self.directory))
        except FileNotFoundError:
            raise PollError("dir_missing", str(self.directory)) from None
        except OSError as exc:
            raise PollError("dir_unreadable", f"{self.directory}: {exc}") from None
        now = self._clock()
        ranked = [name for name in names if rank_from_filename(name)]
        if len(ranked) > MAX_RANK_FILES:  # each file is a rank's series: bounded
            self.health.count_error(
                "too_many_files", f"{len(ranked)} snapshot files, read {MAX_RANK_FILES}"
            )
            ranked = ranked[:MAX_RANK_FILES]
        views = [self._view(name, now) for name in ranked]
        ranks = tuple(v for v in views if v is not None)
        present = {v.rank for v in ranks}
        self._last_good = {r: s for r, s in self._last_good.items() if r in present}
        return ranks

    def _view(self, name: str, now: float) -> RankView | None:
        rank = rank_from_filename(name)
        assert rank is not None
        path = self.directory / name
        try:
            snap = read_snapshot(path)
        except SnapshotError as exc:
            last = self._last_good.get(rank)
            seen = last.written_at if last is not None else _mtime(path, now)
            if now - seen > self.forget_after_s:
                return None
            return RankView(rank, False, exc.reason, last, seen)
        self._last_good[rank] = snap
        if now - snap.written_at > self.forget_after_s:
            self._last_good.pop(rank, None)
            return None
        return RankView(rank, *self._judge(snap, now), snap, snap.written_at)

    def _judge(self, snap: Snapshot, now: float) -> tuple[bool, str | None]:
        if snap.closed:
            return False, "writer_exited"
        same_space = (
            snap.pid_namespace is not None
            and snap.pid_namespace == self._own_ns
            and snap.hostname == self._hostname
        )
        if same_space and not self._pid_alive(snap.pid):
            return False, "writer_dead"
        if now - snap.written_at > self.stale_after_s:
            return False, "stale"
        if snap.written_at - now > self.stale_after_s:  # a future stamp can never go stale
            return False, "clock_skew"
        return True, None

    def collect(self) -> Iterable[Metric]:
        views = self._ranks
        up, ts, reason = C.PROBE_UP.family(), C.PROBE_LAST_REPORT.family(), C.PROBE_DOWN.family()
        info, hooks, errors = C.PROBE_INFO.family(), C.PROBE_HOOK.family(), C.PROBE_ERRORS.family()
        loads, done = C.HICACHE_LAYER_LOADS.family(), C.HICACHE_LAYER_LOADS_DONE.family()
        index_k, kv = C.HICACHE_INDEX_K_READS.family(), C.HICACHE_KV_READS.family()
        gap = C.HICACHE_GAP.family()
        checks, mismatches = C.HICACHE_CHECKS.family(), C.HICACHE_MISMATCHES.family()
        pool_bytes, budget = C.PROBE_POOL_BYTES.family(), C.PROBE_POOL_BUDGET.family()
        overcommit, coefficient = C.PROBE_OVERCOMMIT.family(), C.PROBE_BYTES_PER_TOKEN.family()
        index_k_info = C.PROBE_INDEX_K.family()
        for view in views:
            r = view.rank
            up.add_metric([r], 1.0 if view.up else 0.0)
            if view.snapshot is not None:
                ts.add_metric([r], view.snapshot.written_at)
            if not view.up:
                reason.add_metric([r, view.reason or "unknown"], 1.0)
                continue
            s = view.snapshot
            assert s is not None
            info.add_metric(
                [],
                {
                    "rank": r,
                    "gap_source": s.gap_source,
                    "probe_version": s.probe_version,
                    "verify": "on" if s.verify_enabled else "off",
                },
            )
            for hook in HOOK_NAMES:
                hooks.add_metric([r, hook], 1.0 if s.hooks.get(hook) else 0.0)
            errors.add_metric([r], s.errors)
            loads.add_metric([r], s.total("loads_started"))
            done.add_metric([r], s.total("loads_completed"))
            index_k.add_metric([r, "true"], s.total("index_k_gated"))
            index_k.add_metric([r, "false"], s.total("index_k_ungated"))
            kv.add_metric([r, "true"], s.total("kv_gated"))
            kv.add_metric([r, "false"], s.total("kv_ungated"))
            gap.add_metric([r], _cumulative(s), s.gap_sum)
            if s.verify_enabled:
                checks.add_metric([r], s.checks)
                mismatches.add_metric([r], s.mismatches)
            _memory(r, s, pool_bytes, budget, overcommit, coefficient, index_k_info)
        return [
            up,
            ts,
            reason,
            info,
            hooks,
            errors,
            loads,
            done,
            index_k,
            kv,
            gap,
            checks,
            mismatches,
            pool_bytes,
            budget,
            overcommit,
            coefficient,
            index_k_info,
        ]

    def measured_pools(self) -> dict[str, dict[str, int]]:
        """rank -> sub-pool -> measured bytes, for up ranks whose probe saw a pool."""
        out = {}
        for view in self._ranks:
            if view.up and view.snapshot is not None:
                measured = view.snapshot.memory.bytes_by_pool()
                if measured:
                    out[view.rank] = measured
        return out

    def measured_pools_by_rank(self) -> dict[int, dict[str, int]]:
        """:meth:`measured_pools` keyed by the integer rank (ranks named otherwise left out)."""
        return {int(r): p for r, p in self.measured_pools().items() if r.isdigit()}

    def index_k_by_rank(self) -> dict[int, str]:
        """rank -> the index-K dtype the probe read off that rank's pool (up ranks only)."""
        out = {}
        for view in self._ranks:
            if view.up and view.snapshot is not None and view.rank.isdigit():
                ik = view.snapshot.memory.index_k()
                if ik is not None:
                    out[int(view.rank)] = ik.dtype
        return out


def _memory(
    r: str,
    s: Snapshot,
    pool_bytes: C.Family,
    budget: C.Family,
    overcommit: C.Family,
    coefficient: C.Family,
    index_k_info: C.Family,
) -> None:
    """The start-up memory section of an up rank (absent from version-1 snapshots)."""
    mem = s.memory
    for name, n in sorted(mem.bytes_by_pool().items()):
        pool_bytes.add_metric([r, name], float(n))
    conf = mem.configurator
    if conf is not None and conf.available_bytes is not None:
        budget.add_metric([r], float(conf.available_bytes))
    if conf is not None and conf.bytes_per_full_token is not None:
        coefficient.add_metric([r], conf.bytes_per_full_token)
    over = mem.overcommit_bytes
    if over is not None:
        overcommit.add_metric([r], float(over))
    ik = mem.index_k()
    if ik is not None:
        index_k_info.add_metric(
            [],
            {
                "rank": r,
                "dtype": ik.dtype,
                "layout": ik.layout,
                "bytes_per_slot": floatToGoString(ik.bytes_per_slot),
            },
        )


def _cumulative(s: Snapshot) -> list[tuple[str, float]]:
    out: list[tuple[str, float]] = []
    running = 0.0
    for bound, count in zip((*s.gap_bounds, float("inf")), s.gap_counts, strict=True):
        running += count
        out.append((floatToGoString(bound), running))
    return out


def _mtime(path: Path, default: float) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return default
