"""A fake of the nvidia-ml-py (``pynvml``) API subset the NVML source uses.

Call shapes, return shapes and errors follow the real module: functions raise
``pynvml.NVMLError`` instances built from real NVML return codes (so the source's
``except NVMLError_GpuIsLost`` paths are exercised exactly as on a GPU host), any call before
``nvmlInit`` raises UNINITIALIZED, and a lost GPU's handle raises GPU_IS_LOST.

Memory follows a simple, explainable model per GPU: CUDA context + weights + CUDA graphs +
the KV pools' bytes + activations per running request. The workload provider supplies the last
two: the simulator's ground truth for the sidecar's ``fake`` backend (``exporter.sim.gpus``),
or whatever a test passes.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace

import pynvml

from exporter.units import GIB

MIB = 1024**2

ERROR_CODES = {
    "library_not_found": pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,
    "driver_not_loaded": pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
    "gpu_lost": pynvml.NVML_ERROR_GPU_IS_LOST,
    "uninitialized": pynvml.NVML_ERROR_UNINITIALIZED,
    "version_mismatch": pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH,
    "not_supported": pynvml.NVML_ERROR_NOT_SUPPORTED,
    "unknown": pynvml.NVML_ERROR_UNKNOWN,
}

# (pool bytes allocated on this GPU, running requests) for a GPU index
Workload = Callable[[int], tuple[int, int]]


@dataclass
class FakeGpuSpec:
    memory_bytes: int = int(140 * GIB)
    weights_bytes: int = int(70 * GIB)
    context_bytes: int = 512 * MIB
    graph_bytes: int = 2 * GIB
    activation_per_request_bytes: int = 24 * MIB
    reserved_bytes: int = 330 * MIB  # what v2 memory info reports as driver-reserved
    name: str = "NVIDIA H200 (simulated)"


@dataclass
class _Faults:
    init_failures: list[int] = field(default_factory=list)  # codes for the next nvmlInit calls
    lost: set[int] = field(default_factory=set)
    lost_schedule: list[tuple[int, float, float]] = field(default_factory=list)  # gpu, from, to
    hang_seconds: float = 0.0
    hang_at: float | None = None  # seconds after start at which the next call hangs
    zero_gpus: bool = False


class FakeNvml:
    """Drop-in for the ``pynvml`` module in the NVML source (``NvmlSource(nvml=FakeNvml(...))``)."""

    NVMLError = pynvml.NVMLError
    nvmlMemory_v2 = pynvml.nvmlMemory_v2

    def __init__(
        self,
        count: int | Callable[[], int] = 8,
        spec: FakeGpuSpec | None = None,
        workload: Workload | None = None,
        faults: str = "",
        driver_version: str = "560.35.03",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._count = count
        self.spec = spec or FakeGpuSpec()
        self.workload = workload or (lambda _i: (0, 0))
        self.driver_version = driver_version
        self._clock = clock
        self._start = clock()
        self._initialized = 0
        self._lock = threading.Lock()
        self._release: threading.Event | None = None
        self.faults = _Faults()
        self.calls = 0
        if faults:
            self.apply_fault_script(faults)

    # --- fault injection ---------------------------------------------------------------------
    def apply_fault_script(self, script: str) -> None:
        """Parse 'init=driver_not_loaded:2,lost=1@10-20,hang=30@5,zero' (comma separated)."""
        for item in filter(None, (s.strip() for s in script.split(","))):
            key, _, arg = item.partition("=")
            if key == "init":
                name, _, times = arg.partition(":")
                if name not in ERROR_CODES:
                    raise ValueError(
                        f"faults: unknown init error {name!r}; one of {list(ERROR_CODES)}"
                    )
                self.fail_init(name, int(times or 1))
            elif key == "lost":
                m = re.fullmatch(r"(\d+)@([\d.]+)(?:-([\d.]+))?", arg)
                if not m:
                    raise ValueError(f"faults: lost wants GPU@FROM[-TO] seconds, got {arg!r}")
                to = float(m.group(3)) if m.group(3) else float("inf")
                self.faults.lost_schedule.append((int(m.group(1)), float(m.group(2)), to))
            elif key == "hang":
                m = re.fullmatch(r"([\d.]+)(?:@([\d.]+))?", arg)
                if not m:
                    raise ValueError(f"faults: hang wants SECONDS[@AT], got {arg!r}")
                self.hang_next(float(m.group(1)), at=float(m.group(2) or 0))
            elif key == "zero":
                self.faults.zero_gpus = True
            else:
                raise ValueError(f"faults: unknown fault {key!r} (init, lost, hang, zero)")

    def fail_init(self, error: str, times: int = 1) -> None:
        self.faults.init_failures.extend([ERROR_CODES[error]] * times)

    def lose_gpu(self, index: int) -> None:
        self.faults.lost.add(index)

    def recover_gpu(self, index: int) -> None:
        self.faults.lost.discard(index)

    def hang_next(
        self, seconds: float, at: float = 0.0, release: threading.Event | None = None
    ) -> None:
        """The next memory query at or after ``at`` s blocks for ``seconds`` (a wedged driver),
        or until ``release`` is set if that comes first (tests release it instead of sleeping)."""
        self.faults.hang_seconds = seconds
        self.faults.hang_at = at
        self._release = release

    # --- helpers -------------------------------------------------------------------------------
    def _elapsed(self) -> float:
        return self._clock() - self._start

    def _check_init(self) -> None:
        self.calls += 1
        if not self._initialized:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)

    def _is_lost(self, index: int) -> bool:
        if index in self.faults.lost:
            return True
        t = self._elapsed()
        return any(g == index and a <= t < b for g, a, b in self.faults.lost_schedule)

    def _handle(self, handle: SimpleNamespace) -> int:
        self._check_init()
        if self._is_lost(handle.index):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return handle.index

    def _maybe_hang(self) -> None:
        f = self.faults
        if f.hang_seconds and f.hang_at is not None and self._elapsed() >= f.hang_at:
            seconds, f.hang_seconds, f.hang_at = f.hang_seconds, 0.0, None
            release, self._release = self._release, None
            if release is not None:
                release.wait(seconds)
            else:
                time.sleep(seconds)

    # --- the pynvml API subset -----------------------------------------------------------------
    def nvmlInit(self) -> None:
        self.calls += 1
        with self._lock:
            if self.faults.init_failures:
                raise pynvml.NVMLError(self.faults.init_failures.pop(0))
            self._initialized += 1

    def nvmlShutdown(self) -> None:
        self._check_init()
        with self._lock:
            self._initialized -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._check_init()
        return self.driver_version

    def nvmlDeviceGetCount(self) -> int:
        self._check_init()
        if self.faults.zero_gpus:
            return 0
        return self._count() if callable(self._count) else self._count

    def nvmlDeviceGetHandleByIndex(self, index: int) -> SimpleNamespace:
        self._check_init()
        if not 0 <= index < self.nvmlDeviceGetCount():
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if self._is_lost(index):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return SimpleNamespace(index=index)

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> SimpleNamespace:
        self._check_init()
        for i in range(self.nvmlDeviceGetCount()):
            if self.nvmlDeviceGetUUID(SimpleNamespace(index=i)) == uuid:
                return SimpleNamespace(index=i)
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetUUID(self, handle: SimpleNamespace) -> str:
        i = self._handle(handle)
        return f"GPU-5140a1de-0000-4000-8000-{i:012d}"

    def nvmlDeviceGetName(self, handle: SimpleNamespace) -> str:
        self._handle(handle)
        return self.spec.name

    def nvmlDeviceGetPciInfo(self, handle: SimpleNamespace) -> SimpleNamespace:
        i = self._handle(handle)
        return SimpleNamespace(busId=f"00000000:{0x18 + i * 0x10:02X}:00.0")

    def used_bytes(self, index: int) -> int:
        pools, running = self.workload(index)
        s = self.spec
        used = (
            s.context_bytes
            + s.weights_bytes
            + s.graph_bytes
            + pools
            + running * s.activation_per_request_bytes
        )
        return min(used, s.memory_bytes - s.reserved_bytes)

    def nvmlDeviceGetMemoryInfo(self, handle: SimpleNamespace, version: int | None = None):
        i = self._handle(handle)
        self._maybe_hang()
        total, used = self.spec.memory_bytes, self.used_bytes(i)
        if version == pynvml.nvmlMemory_v2:
            reserved = self.spec.reserved_bytes
            return SimpleNamespace(
                version=version,
                total=total,
                reserved=reserved,
                used=used,
                free=total - reserved - used,
            )
        # v1 folds the reserved memory into "used"
        used_v1 = used + self.spec.reserved_bytes
        return SimpleNamespace(total=total, used=used_v1, free=total - used_v1)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: SimpleNamespace) -> list:
        i = self._handle(handle)
        return [
            SimpleNamespace(
                pid=1000 + i, usedGpuMemory=self.used_bytes(i) - self.spec.context_bytes
            )
        ]
