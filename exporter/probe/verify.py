"""Optional sampled verification of index-K reads (DSV4_PROBE_VERIFY, off by default).

For a sampled read during a load, a probe-owned side stream first waits for everything the
reading stream has enqueued, checksums the layer's index-K buffer (what the read is about to
see), then waits for the layer's load to land and checksums it again (the host copy as
delivered). Different sums mean the reader's position in its stream saw data the load was still
overwriting. The reading stream is never made to wait: results are unchanged. The two sums are
copied into pinned host memory on the side stream, so the reporter thread only queries an event
and reads host memory, never issuing GPU work of its own.

torch only: this runs inside SGLang, where torch is already imported.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from exporter.probe.snapshot import ProbeCounters

MAX_PENDING = 1024


class Verifier:
    def __init__(self, torch_module: Any, rate: float, rng: Callable[[], float] | None = None):
        self._torch = torch_module
        self._cuda = torch_module.cuda
        self.rate = rate
        self._rng = rng or random.random
        self._side: dict[int, Any] = {}
        self.pending: deque[tuple[Any, Any]] = deque()
        # Made now, at the first load's start, not inside a forward pass: page-locked memory for
        # every pending check, and the current device's side stream with a small block of the
        # caching allocator cached on it (cudaMalloc, too, can synchronise the device).
        self._host = torch_module.zeros((MAX_PENDING, 2), dtype=torch_module.int64, pin_memory=True)
        self._free = list(range(MAX_PENDING))
        if self._cuda.is_available() and self._cuda.is_initialized():
            device = self._cuda.current_device()
            side = self._side.setdefault(device, self._cuda.Stream(device=device))
            with self._cuda.stream(side):
                warm = torch_module.empty(4096, dtype=torch_module.uint8, device="cuda")
            del warm

    def maybe_check(self, buf: Any, done_marks: Sequence[Any]) -> bool:
        """Enqueue one check when sampled; returns whether it did."""
        torch, cuda = self._torch, self._cuda
        if not done_marks or self._rng() >= self.rate or len(self.pending) >= MAX_PENDING:
            return False
        if not isinstance(buf, torch.Tensor) or not buf.is_cuda:
            return False
        if not self._free:
            return False
        row = self._free.pop()
        device = buf.device
        side = self._side.get(device.index)
        if side is None:
            side = self._side.setdefault(device.index, cuda.Stream(device=device))
        side.wait_stream(cuda.current_stream(device))
        with cuda.stream(side):
            flat = buf.reshape(-1).view(torch.uint8)
            before = flat.sum(dtype=torch.int64)
            for mark in done_marks:
                side.wait_event(mark)
            after = flat.sum(dtype=torch.int64)
            host = self._host[row]
            host.copy_(torch.stack((before, after)), non_blocking=True)
            finished = cuda.Event()
            finished.record(side)
        self.pending.append((finished, row))
        return True

    def resolve(self, counters: ProbeCounters) -> None:
        """On the reporter thread: count the checks whose side-stream work has finished."""
        for _ in range(len(self.pending)):
            finished, row = self.pending.popleft()
            if not finished.query():
                self.pending.append((finished, row))
                continue
            before, after = (int(v) for v in self._host[row].tolist())
            self._free.append(row)
            counters.count_check(before != after)
