"""NVML source: memory and identity of every GPU this pod's ranks run on.

NVML calls can block for seconds (or forever, on a wedged driver), so each poll runs in a
worker thread with a timeout; a wedged poll is abandoned and no new one starts until that
thread returns, so threads cannot pile up. Lifecycle errors (library not found, driver not
loaded, GPU lost, uninitialised, version mismatch, no GPUs) fail closed: the affected
per-GPU series are dropped, the source is marked down, and NVML is re-initialised on a
backoff schedule, recovering without a restart.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import pynvml  # nvidia-ml-py: pure Python; libnvidia-ml is loaded only at nvmlInit
from prometheus_client.core import Metric

from exporter.metrics import catalog as m
from exporter.sources.base import SourceHealth
from exporter.sources.poller import poll_forever

log = logging.getLogger(__name__)

ERROR_REASONS = (
    "library_not_found",
    "driver_not_loaded",
    "gpu_lost",
    "uninitialized",
    "version_mismatch",
    "no_gpus",
    "timeout",
    "wedged",
    "not_found",
    "unknown",
)
MAX_BACKOFF_S = 60.0


_REASON_BY_CODE = {
    pynvml.NVML_ERROR_LIBRARY_NOT_FOUND: "library_not_found",
    pynvml.NVML_ERROR_DRIVER_NOT_LOADED: "driver_not_loaded",
    pynvml.NVML_ERROR_GPU_IS_LOST: "gpu_lost",
    pynvml.NVML_ERROR_UNINITIALIZED: "uninitialized",
    pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH: "version_mismatch",
    pynvml.NVML_ERROR_NOT_FOUND: "not_found",
    pynvml.NVML_ERROR_GPU_NOT_FOUND: "not_found",
    pynvml.NVML_ERROR_TIMEOUT: "timeout",
}
_LIBRARY_WIDE = ("uninitialized", "driver_not_loaded", "version_mismatch", "library_not_found")


class NvmlLibrary(Protocol):
    """The part of the pynvml API this source calls: the ``pynvml`` module itself, or a GPU
    backend plugin's stand-in (``exporter.sources.gpu_backends``). Handles and the structs
    NVML returns are ctypes objects, untyped here as they are in nvidia-ml-py."""

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlSystemGetDriverVersion(self) -> str: ...
    def nvmlDeviceGetCount(self) -> int: ...
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...
    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> Any: ...
    def nvmlDeviceGetUUID(self, handle: Any) -> str: ...
    def nvmlDeviceGetName(self, handle: Any) -> str: ...
    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any: ...
    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: int | None = None) -> Any: ...
    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]: ...


def error_reason(exc: BaseException) -> str:
    """Map an NVMLError to a bounded label value."""
    if isinstance(exc, pynvml.NVMLError):
        return _REASON_BY_CODE.get(exc.value, "unknown")
    return "unknown"


class NoGpus(RuntimeError):
    """NVML initialised but reports zero visible GPUs."""


@dataclass(frozen=True)
class GpuReading:
    rank: int
    index: int
    uuid: str
    name: str
    pci_bus_id: str
    total: int
    used: int
    free: int
    reserved: int | None
    processes: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class NvmlSnapshot:
    driver_version: str
    gpus: tuple[GpuReading, ...]
    timestamp: float
    failed: dict[int, str] = field(default_factory=dict)  # rank -> reason, for partial polls


def visible_selectors(env: dict[str, str] | None = None) -> list[str] | None:
    """GPU selectors the ranks use, in rank order: CUDA_VISIBLE_DEVICES, else a concrete
    NVIDIA_VISIBLE_DEVICES list; None means every GPU NVML sees, in index order."""
    env = dict(os.environ) if env is None else env
    for var in ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"):
        value = env.get(var, "").strip()
        if not value or value.lower() in ("all", "void", "none", "nofeature"):
            continue
        return [s.strip() for s in value.split(",") if s.strip()]
    return None


class NvmlSource:
    """Polls NVML in a worker thread; ``collect()`` renders the latest snapshot."""

    def __init__(
        self,
        nvml: NvmlLibrary | None = None,
        poll_interval: float = 2.0,
        timeout: float = 1.5,
        rank_map: list[int] | None = None,
        per_process: bool = False,
        env: dict[str, str] | None = None,
        on_change: Callable[[], None] | None = None,
        rank_base: Callable[[int], int] | None = None,
    ) -> None:
        self._nvml = nvml
        # Global rank of this node's first GPU, given how many GPUs it reads (multi-node:
        # node_rank * gpus_per_node, exporter.topology); 0 on a single node.
        self.rank_base = rank_base or (lambda _n: 0)
        self.poll_interval = poll_interval
        self.timeout = timeout
        self.rank_map = rank_map
        self.per_process = per_process
        self.selectors = visible_selectors(env)
        self.health = SourceHealth("nvml")
        self.health.errors = dict.fromkeys(ERROR_REASONS, 0)
        self.snapshot: NvmlSnapshot | None = None
        self._on_change = on_change or (lambda: None)
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="nvml")
        self._inflight: concurrent.futures.Future | None = None
        self._initialized = False
        self._failures_in_row = 0

    @property
    def nvml(self) -> NvmlLibrary:
        if self._nvml is None:
            self._nvml = pynvml
        return self._nvml

    # --- polling -------------------------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        try:
            await poll_forever(stop, self.poll_once, self.poll_interval)
        finally:
            self.close()

    async def poll_once(self) -> float:
        """One poll; returns the delay until the next (backoff after failures)."""
        t0 = time.perf_counter()
        if self._inflight is not None and not self._inflight.done():
            self._fail("wedged", "a previous NVML call has not returned", t0)
            return self._backoff()
        fut = self._executor.submit(self._cycle)
        self._inflight = fut
        try:
            snap = await asyncio.wait_for(asyncio.wrap_future(fut), timeout=self.timeout)
        except asyncio.TimeoutError:
            # Abandon the wedged thread: a fresh executor takes the next poll once it returns.
            self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="nvml")
            self._initialized = False
            self._fail("timeout", f"NVML poll exceeded {self.timeout}s", t0)
            return self._backoff()
        except NoGpus as exc:
            self._reset_library()
            self._fail("no_gpus", str(exc), t0)
            return self._backoff()
        except Exception as exc:  # NVMLError or anything unexpected from the library
            reason = error_reason(exc)
            self._reset_library()
            self._fail(reason, f"{type(exc).__name__}: {exc}", t0)
            return self._backoff()
        duration = time.perf_counter() - t0
        self.snapshot = snap
        if snap.failed:
            for reason in snap.failed.values():
                self.health.failure(reason, "GPU query failed; re-initialising NVML", duration)
            self._failures_in_row += 1
            self._initialized = False  # re-init next cycle: a lost GPU may come back
        else:
            self.health.success(duration)
            self._failures_in_row = 0
        self._on_change()
        return self.poll_interval

    def _backoff(self) -> float:
        self._failures_in_row += 1
        return min(self.poll_interval * 2 ** (self._failures_in_row - 1), MAX_BACKOFF_S)

    def _fail(self, reason: str, detail: str, t0: float) -> None:
        if self.health.up or self.health.cycles == 0:
            log.warning("NVML source down: %s: %s", reason, detail)
        self.snapshot = None  # fail closed: no per-GPU series from a failed poll
        self.health.failure(reason, detail, time.perf_counter() - t0)
        self._on_change()

    def _reset_library(self) -> None:
        if self._initialized:
            # Shutdown of a broken library may fail too; re-init anyway.
            with contextlib.suppress(Exception):
                self._executor.submit(self.nvml.nvmlShutdown).result(timeout=self.timeout)
        self._initialized = False

    # --- worker-thread side --------------------------------------------------------------------
    def _cycle(self) -> NvmlSnapshot:
        nv = self.nvml
        if not self._initialized:
            nv.nvmlInit()
            self._initialized = True
        driver = nv.nvmlSystemGetDriverVersion()
        count = nv.nvmlDeviceGetCount()
        if count == 0:
            raise NoGpus("NVML reports zero GPUs")
        gpus: list[GpuReading] = []
        failed: dict[int, str] = {}
        selectors = self._rank_selectors(count)
        base = self.rank_base(len(selectors))
        for position, selector in enumerate(selectors):
            rank = base + position
            try:
                gpus.append(self._read(rank, selector, position))
            except pynvml.NVMLError as exc:
                reason = error_reason(exc)
                if reason in _LIBRARY_WIDE:
                    raise  # the whole library is gone, not one GPU
                failed[rank] = reason
        return NvmlSnapshot(driver, tuple(gpus), time.time(), failed)

    def _rank_selectors(self, count: int) -> list[str | int]:
        if self.rank_map:
            return list(self.rank_map)
        if self.selectors:
            return [int(s) if s.isdigit() else s for s in self.selectors]
        return list(range(count))

    def _read(self, rank: int, selector: str | int, position: int) -> GpuReading:
        nv = self.nvml
        if isinstance(selector, int):
            h = nv.nvmlDeviceGetHandleByIndex(selector)
            index = selector
        else:
            h = nv.nvmlDeviceGetHandleByUUID(selector)
            index = position
        try:
            mem = nv.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
            reserved = int(mem.reserved)
        except (TypeError, pynvml.NVMLError_FunctionNotFound, pynvml.NVMLError_NotSupported):
            mem = nv.nvmlDeviceGetMemoryInfo(h)  # older driver: v1 only, no reserved field
            reserved = None
        procs: tuple[tuple[int, int], ...] = ()
        if self.per_process:
            try:
                procs = tuple(
                    (int(p.pid), int(p.usedGpuMemory or 0))
                    for p in nv.nvmlDeviceGetComputeRunningProcesses(h)
                )
            except pynvml.NVMLError_NotSupported:
                procs = ()
        return GpuReading(
            rank=rank,
            index=index,
            uuid=str(nv.nvmlDeviceGetUUID(h)),
            name=str(nv.nvmlDeviceGetName(h)),
            pci_bus_id=str(nv.nvmlDeviceGetPciInfo(h).busId),
            total=int(mem.total),
            used=int(mem.used),
            free=int(mem.free),
            reserved=reserved,
            processes=procs,
        )

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    # --- exposition ----------------------------------------------------------------------------
    def collect(self) -> Iterable[Metric]:
        snap = self.snapshot  # health: dsv4_source_*{source="nvml"}, from the sidecar
        yield m.GPU_COUNT.one(len(snap.gpus) if snap else 0)
        if not snap or not snap.gpus:
            return
        info = m.GPU_INFO.family(labels=list(m.GPU_INFO.labels))
        fams = {
            "total": m.GPU_MEMORY_TOTAL.family(),
            "used": m.GPU_MEMORY_USED.family(),
            "free": m.GPU_MEMORY_FREE.family(),
            "reserved": m.GPU_MEMORY_RESERVED.family(),
        }
        procs = m.GPU_PROCESS_MEMORY.family() if self.per_process else None
        for g in snap.gpus:
            labels = [str(g.rank), str(g.index), g.uuid]
            info.add_metric(
                [],
                {
                    "rank": str(g.rank),
                    "gpu": str(g.index),
                    "uuid": g.uuid,
                    "name": g.name,
                    "pci_bus_id": g.pci_bus_id,
                    "driver_version": snap.driver_version,
                },
            )
            fams["total"].add_metric(labels, float(g.total))
            fams["used"].add_metric(labels, float(g.used))
            fams["free"].add_metric(labels, float(g.free))
            if g.reserved is not None:
                fams["reserved"].add_metric(labels, float(g.reserved))
            if procs is not None:
                for pid, used in g.processes:
                    procs.add_metric([*labels, str(pid)], float(used))
        yield info
        yield from fams.values()
        if procs is not None:
            yield procs

    def free_bytes_by_rank(self) -> dict[int, int]:
        snap = self.snapshot
        return {g.rank: g.free for g in snap.gpus} if snap else {}

    def used_bytes_by_rank(self) -> dict[int, int]:
        snap = self.snapshot
        return {g.rank: g.used for g in snap.gpus} if snap else {}

    def total_bytes_by_rank(self) -> dict[int, int]:
        snap = self.snapshot
        return {g.rank: g.total for g in snap.gpus} if snap else {}
