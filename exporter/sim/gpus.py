"""The ``fake`` GPU backend: the simulated SGLang's GPUs, as NVML would show them.

Entry point ``fake`` of group ``dsv4_sidecar.gpu_backends`` (``exporter.sources.gpu_backends``)
in the development installs (setup.py), registered in-process by ``python -m
exporter.sim.sidecar`` elsewhere, so the sidecar loads it by name and never imports the
simulator. The GPUs are the simulator's: count, memory model and, per GPU, what the pools
really allocate come from ``GET /_sim/gpus?node_rank=K`` on the simulated SGLang at
``sglang_url`` (``SimDeployment.node_gpus``), at most once per NVML poll. Nothing comes from
the sidecar's own footprint model, so in the demo and the tests NVML is the deployment's
ground truth and reconciling it with SGLang's figures is a real check, not the model compared
with itself.

Until the simulator has answered once, the node reports zero GPUs (the NVML source says
``no_gpus``); after that an unreachable simulator leaves the last answer in place, as GPUs do
not vanish when the server on them stops answering HTTP. NVML-level faults
(the backend's own ``DSV4_FAKE_GPU_FAULTS``, :class:`~exporter.sim.settings.FakeGpuSettings`)
are injected by :class:`~exporter.sim.fake_nvml.FakeNvml`.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from exporter.sim.fake_nvml import FakeGpuSpec, FakeNvml
from exporter.sim.settings import FakeGpuSettings
from exporter.sources.gpu_backends import GpuBackend

if TYPE_CHECKING:
    from exporter.config import SidecarSettings

MAX_BODY_BYTES = 1 << 20  # a node of 64 GPUs answers in a few KiB


@dataclass(frozen=True)
class NodeGpus:
    """One answer of ``/_sim/gpus``: the GPU model and (pool bytes, running) per local GPU."""

    spec: FakeGpuSpec
    workload: tuple[tuple[int, int], ...]

    @classmethod
    def parse(cls, body: dict[str, Any]) -> NodeGpus:
        spec = FakeGpuSpec(**body["spec"])
        gpus = body["gpus"]
        return cls(spec, tuple((int(g["pools_bytes"]), int(g["running"])) for g in gpus))


class SimulatorGpus:
    """Reads a node's GPUs from the simulator, at most once per ``max_age`` seconds."""

    def __init__(
        self,
        sglang_url: str,
        node_rank: int = 0,
        timeout: float = 0.5,
        max_age: float = 0.2,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = f"{sglang_url.rstrip('/')}/_sim/gpus?node_rank={node_rank}"
        self.timeout = timeout
        self.max_age = max_age
        self._clock = clock
        self._lock = threading.Lock()
        self._fetched_at: float | None = None
        self.last: NodeGpus | None = None
        self.failures = 0

    def current(self) -> NodeGpus | None:
        """The latest answer (refreshed when older than ``max_age``); None before the first."""
        with self._lock:
            now = self._clock()
            if self._fetched_at is None or now - self._fetched_at >= self.max_age:
                self._fetched_at = now
                try:
                    with urllib.request.urlopen(self.url, timeout=self.timeout) as resp:
                        body = resp.read(MAX_BODY_BYTES + 1)
                    if len(body) > MAX_BODY_BYTES:
                        raise ValueError("answer over 1 MiB")
                    self.last = NodeGpus.parse(json.loads(body))
                except (OSError, urllib.error.URLError, ValueError, KeyError, TypeError):
                    self.failures += 1  # keep the last answer: the GPUs are still there
            return self.last


class SimulatedNvml(FakeNvml):
    """:class:`FakeNvml` whose GPUs follow the simulator's answer at each poll."""

    def __init__(self, gpus: SimulatorGpus, faults: str = "") -> None:
        self.gpus = gpus
        super().__init__(count=self._node_count, workload=self._node_workload, faults=faults)

    def _node_count(self) -> int:
        node = self.gpus.current()
        if node is None:
            return 0
        self.spec = node.spec
        return len(node.workload)

    def _node_workload(self, index: int) -> tuple[int, int]:
        node = self.gpus.last
        if node is None or not 0 <= index < len(node.workload):
            return 0, 0
        return node.workload[index]


class FakeBackend:
    """The ``fake`` entry point (see ``exporter.sources.gpu_backends.GpuBackend``). Its own
    settings (:class:`~exporter.sim.settings.FakeGpuSettings`, DSV4_FAKE_GPU_*) are read here,
    from the environment, not from the sidecar's: the sidecar only names the backend."""

    def settings(self) -> FakeGpuSettings:
        """The backend's settings; ``ConfigError`` naming the variable and the fix."""
        from exporter.config_loader import load_settings

        return load_settings(None, None, FakeGpuSettings)

    def check_settings(self) -> None:
        """Called by the sidecar's start-up validation (``gpu_backend: fake``)."""
        self.settings()

    def create(self, settings: SidecarSettings) -> SimulatedNvml:
        gpus = SimulatorGpus(
            settings.server_url,
            settings.node_rank,
            timeout=min(0.5, settings.nvml_timeout / 2),
            max_age=min(0.5, settings.nvml_poll_interval / 2),
        )
        return SimulatedNvml(gpus, faults=self.settings().faults)


backend: GpuBackend = FakeBackend()  # mypy checks the plugin against the protocol here
