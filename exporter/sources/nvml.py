"""NVML source: memory and identity of every GPU this pod's ranks run on.

NVML calls can block for seconds (or forever, on a wedged driver), so each poll runs on the
worker thread of :class:`~exporter.sources.poller.ThreadPoller`, with its timeout and wedge
guard. Lifecycle errors (library not found, driver not loaded, GPU lost, uninitialised,
version mismatch, no GPUs) fail closed: the affected per-GPU series are dropped, the source is
marked down, and NVML is re-initialised on the base's backoff schedule, recovering without a
restart. Only ``NVMLError`` is NVML's failure; anything else is a sidecar bug, left to the
supervisor.

Each per-GPU number is a row of :data:`READINGS` (field, call, fallback, metric), so a new GPU
metric is one row here plus its catalog entry (dcgm-exporter's counters CSV, in Python).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import pynvml  # nvidia-ml-py: pure Python; libnvidia-ml is loaded only at nvmlInit
from prometheus_client.core import Metric

from exporter.metrics import catalog as m
from exporter.sources import reasons as source_reasons
from exporter.sources.poller import MAX_BACKOFF_S, PollError, ThreadPoller

log = logging.getLogger(__name__)

ERROR_REASONS = source_reasons.names("nvml")


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
# What NVML answers for a call this GPU or driver does not have: the row's fallback applies.
UNSUPPORTED: tuple[type[Exception], ...] = (
    pynvml.NVMLError_NotSupported,
    pynvml.NVMLError_FunctionNotFound,
)
# No v2 memory info: unsupported, or (TypeError) an nvidia-ml-py too old for ``version``.
_V1_ONLY: tuple[type[Exception], ...] = (TypeError, *UNSUPPORTED)


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


def error_reason(exc: pynvml.NVMLError) -> str:
    """Map an NVMLError to a bounded label value (``unknown``: a code without its own)."""
    return _REASON_BY_CODE.get(exc.value, "unknown")


class GpuCalls:
    """One GPU's handle and the NVML calls rows read from it, each made at most once a poll
    (three rows read one memory-info struct)."""

    def __init__(self, nvml: Any, handle: Any) -> None:
        self.nvml = nvml  # the library; a row may call what NvmlLibrary does not list
        self.handle = handle

    @functools.cached_property
    def _memory(self) -> tuple[Any, bool]:
        v2 = pynvml.nvmlMemory_v2
        try:
            return self.nvml.nvmlDeviceGetMemoryInfo(self.handle, version=v2), True
        except _V1_ONLY:
            return self.nvml.nvmlDeviceGetMemoryInfo(self.handle), False  # v1: no reserved

    def memory(self) -> Any:
        """Memory info, v2 where the driver has it, else v1."""
        return self._memory[0]

    def memory_v2(self) -> Any:
        """Memory info v2 (``reserved``); NotSupported on a driver with v1 only."""
        mem, v2 = self._memory
        if not v2:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return mem


@dataclass(frozen=True)
class Reading:
    """One per-GPU number: ``field`` (its key in :attr:`GpuReading.values`), ``call`` (reads
    it through :class:`GpuCalls`), ``fallback`` (the value where NVML answers the call is not
    supported on this GPU or driver; None leaves the series out) and ``metric`` (the catalog
    entry it is exported as, with the GPU labels)."""

    field: str
    call: Callable[[GpuCalls], float]
    fallback: float | None
    metric: m.MetricSpec


READINGS: tuple[Reading, ...] = (
    Reading("total", lambda g: g.memory().total, None, m.GPU_MEMORY_TOTAL),
    Reading("used", lambda g: g.memory().used, None, m.GPU_MEMORY_USED),
    Reading("free", lambda g: g.memory().free, None, m.GPU_MEMORY_FREE),
    Reading("reserved", lambda g: g.memory_v2().reserved, None, m.GPU_MEMORY_RESERVED),
)


class NoGpus(RuntimeError):
    """NVML initialised but reports zero visible GPUs."""


@dataclass(frozen=True)
class GpuReading:
    rank: int
    index: int
    uuid: str
    name: str
    pci_bus_id: str
    values: Mapping[str, float]  # field -> value, for the rows NVML answered
    processes: tuple[tuple[int, int], ...] = ()

    def value(self, name: str) -> int | None:
        v = self.values.get(name)
        return None if v is None else int(v)


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


class NvmlSource(ThreadPoller):
    """Polls NVML on its worker thread; ``collect()`` renders the latest snapshot."""

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
        readings: tuple[Reading, ...] = READINGS,
    ) -> None:
        super().__init__(
            "nvml",
            poll_interval=poll_interval,
            timeout=timeout,
            reasons=ERROR_REASONS,
            on_change=on_change,
            max_backoff=MAX_BACKOFF_S,
        )
        self._nvml = nvml
        # Global rank of this node's first GPU, given how many GPUs it reads (multi-node:
        # node_rank * gpus_per_node, exporter.topology); 0 on a single node.
        self.rank_base = rank_base or (lambda _n: 0)
        self.rank_map = rank_map
        self.per_process = per_process
        self.readings = readings
        self.selectors = visible_selectors(env)
        self.snapshot: NvmlSnapshot | None = None
        self._initialized = False

    @property
    def nvml(self) -> NvmlLibrary:
        if self._nvml is None:
            self._nvml = pynvml
        return self._nvml

    # --- polling -------------------------------------------------------------------------------
    async def poll(self) -> None:
        try:
            snap = await self.in_worker(self._cycle)
        except PollError as exc:
            if exc.reason not in ("timeout", "wedged"):  # NVML answered: re-initialise it
                await self._reset_library()
            raise
        self.snapshot = snap
        if snap.failed:
            for reason in snap.failed.values():
                self.degraded(reason, "GPU query failed; re-initialising NVML")
            self._initialized = False  # re-init next cycle: a lost GPU may come back

    def went_down(self) -> None:
        self.snapshot = None  # fail closed: no per-GPU series from a failed poll

    def abandoned(self) -> None:
        self._initialized = False

    async def _reset_library(self) -> None:
        if self._initialized:
            # Shutdown of a broken library may fail too (as NVMLError, or by hanging): re-init
            # anyway, on the next cycle.
            with contextlib.suppress(PollError, pynvml.NVMLError):
                await self.in_worker(self.nvml.nvmlShutdown)
        self._initialized = False

    # --- worker-thread side --------------------------------------------------------------------
    def _cycle(self) -> NvmlSnapshot:
        """One read of every GPU; NVML's failures as PollError with their reason."""
        try:
            return self._read_all()
        except NoGpus as exc:
            raise PollError("no_gpus", str(exc)) from None
        except pynvml.NVMLError as exc:
            raise PollError(error_reason(exc), f"{type(exc).__name__}: {exc}") from None

    def _read_all(self) -> NvmlSnapshot:
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
        calls = GpuCalls(nv, h)
        values: dict[str, float] = {}
        for row in self.readings:
            try:
                values[row.field] = float(row.call(calls))
            except UNSUPPORTED:
                if row.fallback is not None:
                    values[row.field] = row.fallback
        procs: tuple[tuple[int, int], ...] = ()
        if self.per_process:
            with contextlib.suppress(pynvml.NVMLError_NotSupported):
                procs = tuple(
                    (int(p.pid), int(p.usedGpuMemory or 0))
                    for p in nv.nvmlDeviceGetComputeRunningProcesses(h)
                )
        return GpuReading(
            rank=rank,
            index=index,
            uuid=str(nv.nvmlDeviceGetUUID(h)),
            name=str(nv.nvmlDeviceGetName(h)),
            pci_bus_id=str(nv.nvmlDeviceGetPciInfo(h).busId),
            values=values,
            processes=procs,
        )

    # --- exposition ----------------------------------------------------------------------------
    def collect(self) -> Iterable[Metric]:
        snap = self.snapshot  # health: dsv4_source_*{source="nvml"}, from the sidecar
        yield m.GPU_COUNT.one(len(snap.gpus) if snap else 0)
        if not snap or not snap.gpus:
            return
        info = m.GPU_INFO.family(labels=list(m.GPU_INFO.labels))
        fams = {row.field: row.metric.family() for row in self.readings}
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
            for name, value in g.values.items():
                fams[name].add_metric(labels, value)
            if procs is not None:
                for pid, used in g.processes:
                    procs.add_metric([*labels, str(pid)], float(used))
        yield info
        yield from fams.values()
        if procs is not None:
            yield procs

    def _by_rank(self, name: str) -> dict[int, int]:
        snap = self.snapshot
        if not snap:
            return {}
        return {g.rank: v for g in snap.gpus if (v := g.value(name)) is not None}

    def free_bytes_by_rank(self) -> dict[int, int]:
        return self._by_rank("free")

    def used_bytes_by_rank(self) -> dict[int, int]:
        return self._by_rank("used")

    def total_bytes_by_rank(self) -> dict[int, int]:
        return self._by_rank("total")
