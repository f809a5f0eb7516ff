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
            return self._indexer_pool(compress_ratio).get_index_k_with_scale_buffer(
                compress_layer_id
            )

    return ForkPool


def expected_value(generation: int, layer: int) -> int:
    return (generation * 16 + layer + 1) % 251


class SimOps:
    """Device operations on the simulated device: a copy takes ``copy_ms`` per layer."""

    name = "simulated"

    def __init__(self, copy_ms: float = 1.0, read_ms: float = 0.01) -> None:
        from sglang.srt import fake_device

        self.dev = fake_device
        self.copy_ms = copy_ms
        self.read_ms = read_ms

    def make_buffer(self) -> Any:
        return self.dev.Buffer(0)

    def new_stream(self) -> Any:
        return self.dev.Stream()

    def stream(self, s: Any) -> AbstractContextManager[Any]:
        return self.dev.stream(s)

    def before_load(self) -> None:
        return None

    def copy_layer(self, dst: Any, generation: int, layer: int) -> None:
        _, end = self.dev.launch(self.copy_ms)
        dst.write_at(end, expected_value(generation, layer))

    def read(self, buf: Any) -> Any:
        start, _ = self.dev.launch(self.read_ms)
        return buf.value_at(start)

    def value(self, handle: Any) -> int:
        return int(handle)

    def synchronize(self) -> None:
        self.dev.synchronize()


class TorchOps:
    """The same on a CUDA GPU: pinned host buffers, async copies on the load stream (after a
    GPU-side sleep so the race window is wide and deterministic), reads as small clones."""

    name = "cuda"

    def __init__(self, torch: Any, nbytes: int = 8 << 20, delay_cycles: int = 40_000_000):
        self.torch = torch
        self.nbytes = nbytes
        self.delay_cycles = delay_cycles
        self._host: dict[tuple[int, int], Any] = {}

    def make_buffer(self) -> Any:
        return self.torch.zeros(self.nbytes, dtype=self.torch.uint8, device="cuda")

    def new_stream(self) -> Any:
        return self.torch.cuda.Stream()

    def stream(self, s: Any) -> AbstractContextManager[Any]:
        return self.torch.cuda.stream(s)

    def before_load(self) -> None:
        if self.delay_cycles:  # the load stream starts late: every ungated read races it
            self.torch.cuda._sleep(self.delay_cycles)

    def copy_layer(self, dst: Any, generation: int, layer: int) -> None:
        key = (generation, layer)
        src = self._host.get(key)
        if src is None:
            src = self.torch.full(
                (self.nbytes,), expected_value(generation, layer), dtype=self.torch.uint8
            ).pin_memory()
            self._host[key] = src
        dst.copy_(src, non_blocking=True)

    def read(self, buf: Any) -> Any:
        return buf[:4096].clone()

    def value(self, handle: Any) -> int:
        return int(handle[0].item())

    def synchronize(self) -> None:
        self.torch.cuda.synchronize()


class HostPool:
    """load_to_device_per_layer with SGLang's call shape; writes index-K and compressed KV."""

    def __init__(self, ops: Any) -> None:
        self.ops = ops
        self.generation = 0

    def load_to_device_per_layer(
        self, device_pool, host_indices, device_indices, layer_id, io_backend
    ):
        if layer_id == 0:
            self.ops.before_load()
        ratio, compress_layer_id, kv_pool = device_pool.layer_mapping[layer_id]
        if ratio == 4:
            dst = device_pool.index_pools[4].index_k_with_scale_buffer[compress_layer_id]
            self.ops.copy_layer(dst, self.generation, layer_id)
        if kv_pool is not None:
            self.ops.copy_layer(kv_pool.kv_buffer[compress_layer_id], self.generation, layer_id)


@dataclass
class ForwardResult:
    index_k_reads: int
    stale_reads: list[int]


class Rig:
    def __init__(self, cc: Any, pool_cls: type, ops: Any, ratios: tuple[int, ...] = RATIOS):
        self.ops = ops
        self.pool = pool_cls(ratios, ops.make_buffer)
        self.host = HostPool(ops)
        self.controller = cc.HiCacheController(self.pool, self.host)
        self.counter = self.controller.layer_done_counter
        self.forward_stream = ops.new_stream()

    def forward(self, producer: int) -> ForwardResult:
        """One prefill forward bound to ``producer`` (-1: no load), as the model runner does:
        set_consumer, then per layer the c4 index-K read (indexer) and the KV reads."""
        handles = []
        with self.ops.stream(self.forward_stream):
            self.counter.set_consumer(producer)
            for layer, ratio in enumerate(self.pool.compression_ratios):
                if ratio == 4:  # the indexer picks top-k from index-K before attention runs
                    buf = self.pool.get_index_k_with_scale_buffer(layer)
                    handles.append((layer, self.ops.read(buf)))
                self.pool.get_swa_key_buffer_radix(layer)
                if ratio:
                    self.pool.get_extra_key_buffer(layer)
        self.ops.synchronize()
        generation = self.host.generation
        stale = [
            layer
            for layer, handle in handles
            if self.ops.value(handle) != expected_value(generation, layer)
        ]
        return ForwardResult(len(handles), stale)

    def load_and_forward(self) -> ForwardResult:
        self.host.generation += 1
        self.controller.load(None, None)
        producer = self.controller.start_loading()
        return self.forward(producer)

    @property
    def c4_layers(self) -> int:
        return sum(1 for r in self.pool.compression_ratios if r == 4)
