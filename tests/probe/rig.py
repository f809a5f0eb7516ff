"""A HiCache load-back rig over the SGLang stand-ins, shared by the CPU tests (simulated
device) and the GPU race harness (torch.cuda): a host pool, a HiCacheController that copies
layer by layer on a load stream, and a forward pass that reads each c4 layer's index-K buffer
the way the DSV4 indexer does. ``ForkPool`` is the variant whose index-K accessor lost its
``wait_layer_transfer``.
"""

from __future__ import annotations

import importlib
import sys
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FAKE_SGLANG = Path(__file__).resolve().parent / "fake_sglang"
RATIOS = (0, 4, 128, 4, 4, 128, 4, 0)  # DSV4-like mix: SWA-only, c4 and c128 layers


def import_standins() -> tuple[Any, Any]:
    """Import the stand-in modules (the probe's post-import hook, when installed, patches them)."""
    if str(FAKE_SGLANG) not in sys.path:
        sys.path.insert(0, str(FAKE_SGLANG))
    cc = importlib.import_module("sglang.srt.managers.cache_controller")
    pool = importlib.import_module("sglang.srt.mem_cache.deepseek_v4_memory_pool")
    return cc, pool


def forget_standins() -> None:
    for name in [n for n in sys.modules if n == "sglang" or n.startswith("sglang.")]:
        del sys.modules[name]
    while str(FAKE_SGLANG) in sys.path:
        sys.path.remove(str(FAKE_SGLANG))


def fork_pool_class(dsv4_module: Any) -> type:
    """A pool subclass, as a fork would write it, whose index-K accessor skips the gate."""

    class ForkPool(dsv4_module.DeepSeekV4TokenToKVPool):
        def get_index_k_with_scale_buffer(self, layer_id: int):
            compress_ratio, compress_layer_id, _ = self.layer_mapping[layer_id]
            pick = getattr(self, "_indexer_pool", None)  # 0.5.12-0.5.20: one c4 indexer pool
            pool = pick(compress_ratio) if pick is not None else self.c4_indexer_kv_pool
            return pool.get_index_k_with_scale_buffer(compress_layer_id)

    return ForkPool


def expected_value(generation: int, layer: int) -> int:
    return (generation * 16 + layer + 1) % 251


class SimOps:
    """Device operations on the simulated device: a copy takes ``copy_ms`` per layer."""

    name = "simulated"
    gate_mechanism = "simulated clock"

    def __init__(self, copy_ms: float = 1.0, read_ms: float = 0.01) -> None:
        from sglang.srt import fake_device

        self.dev = fake_device
        self.copy_ms = copy_ms
        self.read_ms = read_ms
        self.last_hold_s = 0.0

    def make_buffer(self) -> Any:
        return self.dev.Buffer(0)

    def new_stream(self) -> Any:
        return self.dev.Stream()

    def stream(self, s: Any) -> AbstractContextManager[Any]:
        return self.dev.stream(s)

    def prepare(self, generation: int, buffers: list[tuple[int, Any]]) -> None:
        return None

    def before_load(self) -> None:
        return None

    def release(self) -> None:
        return None

    def copy_layer(self, dst: Any, generation: int, layer: int) -> None:
        _, end = self.dev.launch(self.copy_ms)
        dst.write_at(end, expected_value(generation, layer))

    def read(self, buf: Any) -> Any:
        start, _ = self.dev.launch(self.read_ms)
        return buf.value_at(start)

    def stale(self, handle: Any, expected: int) -> bool:
        return int(handle) != expected

    def synchronize(self) -> None:
        self.dev.synchronize()


WATCHDOG_S = 10.0  # a gate shut this long means the host blocked on the device


class TorchOps:
    """The same on a CUDA GPU, with the load held by a device-side gate (tests/gpu/cuda_gate).

    Every host buffer of a load is pinned in ``prepare()``, before the load starts, so the load
    path enqueues copies only. The load stream's first operation is the gate: its copies run
    after the host opens it in ``release()``, which the rig calls once the forward pass has
    enqueued all its reads and the rig has held for ``hold_s``. Every ungated read therefore
    runs before its layer's copy, on any CPU; a gated read waits for the layer's event. A read
    is a clone of the whole buffer, and its ground truth is every byte of that clone."""

    name = "cuda"

    def __init__(self, torch: Any, gate: Any, nbytes: int = 4 << 20, hold_s: float = 0.05):
        self.torch = torch
        self.gate = gate
        self.nbytes = nbytes
        self.hold_s = hold_s
        self.gate_mechanism = gate.mechanism if gate is not None else "none"
        self._host: dict[tuple[int, int, int], Any] = {}
        self._reads: dict[int, list[Any]] = {}  # read destinations by size, made before a load
        self._gated = False
        self.last_hold_s = 0.0
        self.watchdog_opened = 0
        self._timer: Any = None
        # While the gate is shut nothing may synchronise the device: cudaMalloc and page-locked
        # allocations are implicit synchronisation points. Warm the caching allocator's small
        # pool so the probe's few small device tensors (checksums) come from a cached segment.
        warm = [torch.empty(512, dtype=torch.uint8, device="cuda") for _ in range(64)]
        del warm

    def make_buffer(self) -> Any:
        return self.torch.zeros(self.nbytes, dtype=self.torch.uint8, device="cuda")

    def new_stream(self) -> Any:
        return self.torch.cuda.Stream()

    def stream(self, s: Any) -> AbstractContextManager[Any]:
        return self.torch.cuda.stream(s)

    def prepare(self, generation: int, buffers: list[tuple[int, Any]]) -> None:
        """Pin the host side of every copy of the coming load (value per layer, per size)."""
        self._host = {
            k: v for k, v in self._host.items() if k[0] == generation
        }  # the previous load's buffers are done (the rig synchronised)
        for layer, dst in buffers:
            key = (generation, layer, dst.numel() * dst.element_size())
            if key not in self._host:
                src = self.torch.full(
                    (key[2],), expected_value(generation, layer), dtype=self.torch.uint8
                )
                self._host[key] = src.pin_memory()
        self._reads = {}
        for _layer, dst in buffers:
            size = dst.numel() * dst.element_size()
            self._reads.setdefault(size, []).append(
                self.torch.empty(size, dtype=self.torch.uint8, device="cuda")
            )
        if self.gate is not None:
            self.gate.close()

    def before_load(self) -> None:
        if self.gate is not None:  # on the load stream, before its first copy
            import threading

            self.gate.hold(self.torch.cuda.current_stream())
            self._gated = True
            # a host blocked on the device while the gate is shut would wait for ever: the
            # watchdog opens it and the run fails on ``watchdog_opened`` instead of hanging
            self._timer = threading.Timer(WATCHDOG_S, self._watchdog)
            self._timer.daemon = True
            self._timer.start()

    def _watchdog(self) -> None:
        if self._gated:
            self.watchdog_opened += 1
            self.gate.open()

    def copy_layer(self, dst: Any, generation: int, layer: int) -> None:
        src = self._host[(generation, layer, dst.numel() * dst.element_size())]
        dst.view(-1).view(self.torch.uint8).copy_(src, non_blocking=True)

    def release(self) -> None:
        """Open the gate after holding it ``hold_s`` past the last read's enqueue."""
        if self._gated:
            import time

            start = time.perf_counter()
            time.sleep(self.hold_s)  # the hold the rig creates, not a wait for a condition
            self.gate.open()
            self.last_hold_s = time.perf_counter() - start
            self._gated = False
            if self._timer is not None:
                self._timer.cancel()

    def read(self, buf: Any) -> Any:
        src = buf.view(-1).view(self.torch.uint8)
        pool = self._reads.get(src.numel())
        out = pool.pop() if pool else self.torch.empty_like(src)  # made in prepare()
        out.copy_(src, non_blocking=True)
        return out

    def stale(self, handle: Any, expected: int) -> bool:
        return not bool((handle == expected).all().item())

    def synchronize(self) -> None:
        self.torch.cuda.synchronize()


class HostPool:
    """load_to_device_per_layer with SGLang's call shape; writes index-K and compressed KV."""

    def __init__(self, ops: Any) -> None:
        self.ops = ops
        self.generation = 0

    @staticmethod
    def targets(device_pool: Any) -> list[tuple[int, Any]]:
        """Every (local layer, device buffer) a load writes: c4 index-K and compressed KV,
        read off the pool's own layer mapping (stand-in or a release's)."""
        out = []
        start = getattr(device_pool, "start_layer", 0) or 0
        for layer, item in enumerate(device_pool.layer_mapping):
            if item is None:  # a release's mapping lists every layer; other stages are None
                continue
            ratio, compress_layer_id, kv_pool = item[0], item[1], item[2]
            if ratio == 4:  # 0.5.12-0.5.20: c4_indexer_kv_pool; 0.5.21+: index_pools[4] too
                index_pool = getattr(device_pool, "c4_indexer_kv_pool", None)
                if index_pool is None:
                    index_pool = device_pool.index_pools[4]
                out.append((layer - start, index_pool.index_k_with_scale_buffer[compress_layer_id]))
            if kv_pool is not None and ratio:
                out.append((layer - start, kv_pool.kv_buffer[compress_layer_id]))
        return out

    def load_to_device_per_layer(
        self, device_pool, host_indices, device_indices, layer_id, io_backend
    ):
        if layer_id == 0:
            self.ops.before_load()
        for layer, dst in self.targets(device_pool):
            if layer == layer_id:
                self.ops.copy_layer(dst, self.generation, layer)


class LoadController:
    """HiCacheController's load half with its call shape, over a given LayerDoneCounter class
    (the stand-in's or a release's own): ``update_producer()``, the producer's start event,
    the load stream waiting on it, then per layer the host-to-device copy and
    ``complete(layer)``. (The releases' own ``start_loading`` goes through their host pool and,
    from 0.5.23, an L2 transfer engine; the order of calls the probe hooks is this one.)"""

    def __init__(self, counter_cls: type, device_module: Any, pool: Any, host: HostPool):
        self.pool = pool
        self.host = host
        self.device_module = device_module
        self.layer_num = sum(1 for item in pool.layer_mapping if item is not None)
        self.layer_done_counter = counter_cls(self.layer_num)
        self.load_stream = device_module.Stream()
        self.queue: list[Any] = []
        pool.register_layer_transfer_counter(self.layer_done_counter)

    def load(self, host_indices: Any, device_indices: Any) -> Any:
        self.queue.append((host_indices, device_indices))
        return device_indices

    def start_loading(self) -> int:
        if not self.queue:
            return -1
        producer_id = self.layer_done_counter.update_producer()
        host_indices, device_indices = self.queue.pop(0)
        producer_event = self.layer_done_counter.events[producer_id]
        producer_event.start_event.record()
        with self.device_module.stream(self.load_stream):
            self.load_stream.wait_event(producer_event.start_event)
            for i in range(self.layer_num):
                self.host.load_to_device_per_layer(
                    self.pool, host_indices, device_indices, i, "direct"
                )
                producer_event.complete(i)
        return producer_id


@dataclass
class ForwardResult:
    index_k_reads: int
    stale_reads: list[int]


class Rig:
    """A pool, its load controller and a forward stream. ``Rig(cc, pool_cls, ops)`` builds the
    stand-in pool and controller; ``Rig.over(pool, counter_cls, device_module, ops)`` drives a
    pool already built (a released SGLang's own, on CUDA) with that release's counter."""

    def __init__(
        self,
        cc: Any,
        pool_cls: type | None,
        ops: Any,
        ratios: tuple[int, ...] = RATIOS,
        pool: Any = None,
        controller: Any = None,
    ):
        self.ops = ops
        self.pool = pool if pool is not None else pool_cls(ratios, ops.make_buffer)
        self.host = HostPool(ops)
        if controller is None:
            controller = cc.HiCacheController(self.pool, self.host)
        self.controller = controller
        self.counter = self.controller.layer_done_counter
        self.forward_stream = ops.new_stream()
        self.holds: list[float] = []

    @classmethod
    def over(cls, pool: Any, counter_cls: type, device_module: Any, ops: Any) -> Rig:
        host = HostPool(ops)
        controller = LoadController(counter_cls, device_module, pool, host)
        rig = cls(None, None, ops, pool=pool, controller=controller)
        rig.host = host
        return rig

    def layers(self) -> list[tuple[int, int]]:
        """(global layer id, compress ratio) of this pool's layers."""
        ratios = self.pool.compression_ratios
        return [
            (i, ratios[i]) for i, item in enumerate(self.pool.layer_mapping) if item is not None
        ]

    def forward(self, producer: int) -> ForwardResult:
        """One prefill forward bound to ``producer`` (-1: no load), as the model runner does:
        set_consumer, then per layer the c4 index-K read (indexer) and the KV reads. The load
        is released only once every read is enqueued (TorchOps' gate)."""
        handles = []
        start = getattr(self.pool, "start_layer", 0) or 0
        swa_read = getattr(self.pool, "get_swa_key_buffer_radix", None)
        swa_read = swa_read or self.pool.get_swa_key_buffer  # older releases: no radix variant
        with self.ops.stream(self.forward_stream):
            self.counter.set_consumer(producer)
            for layer, ratio in self.layers():
                if ratio == 4:  # the indexer picks top-k from index-K before attention runs
                    buf = self.pool.get_index_k_with_scale_buffer(layer)
                    handles.append((layer - start, self.ops.read(buf)))
                swa_read(layer)
                if ratio:
                    self.pool.get_extra_key_buffer(layer)
        self.ops.release()
        self.holds.append(self.ops.last_hold_s)
        self.ops.synchronize()
        generation = self.host.generation
        stale = [
            layer
            for layer, handle in handles
            if self.ops.stale(handle, expected_value(generation, layer))
        ]
        return ForwardResult(len(handles), stale)

    def load_and_forward(self) -> ForwardResult:
        self.host.generation += 1
        self.ops.prepare(self.host.generation, HostPool.targets(self.pool))
        self.controller.load(None, None)
        producer = self.controller.start_loading()
        return self.forward(producer)

    @property
    def c4_layers(self) -> int:
        return sum(1 for _, r in self.layers() if r == 4)
