"""Overhead of the in-process probe per wrapped SGLang call (CPU side, no torch).

Each case calls the same method on an unwrapped class and on a copy wrapped by the probe, in
alternating rounds, and reports the median per-call time of each and the difference. The
classes mirror the call shapes the probe wraps (a DSV4-like pool whose index-K accessor waits
on a LayerDoneCounter). The ungated case uses the host-bound gap clock; with CUDA events the
ungated path adds one event record per read (measured by `make gpu-check`, tests/gpu/check.py).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path

from exporter.probe.config import ProbeConfig
from exporter.probe.runtime import Probe
from exporter.probe.targets import COUNTER_METHODS, EVENT_METHODS, POOL_METHODS, patch_methods

LAYERS = 8


class Event:  # answers query() only: the probe falls back to its host-bound clock
    def record(self) -> None:
        return None

    def query(self) -> bool:
        return True


def make_classes() -> tuple[type, type, type]:
    class LayerLoadingEvent:
        def __init__(self) -> None:
            self.load_events = [Event() for _ in range(LAYERS)]

        def complete(self, layer_index: int) -> None:
            self.load_events[layer_index].record()

    class LayerDoneCounter:
        def __init__(self) -> None:
            self.events = [LayerLoadingEvent() for _ in range(3)]
            self.producer_index = -1
            self.consumer_index = -1

        def update_producer(self) -> int:
            self.producer_index = (self.producer_index + 1) % 3
            return self.producer_index

        def set_consumer(self, index: int) -> None:
            self.consumer_index = index

        def wait_until(self, threshold: int) -> None:
            if self.consumer_index < 0:
                return
            self.events[self.consumer_index].load_events[threshold].query()

        def reset(self) -> None:
            self.consumer_index = -1

    class Pool:
        start_layer = 0

        def __init__(self) -> None:
            self.layer_transfer_counter = None
            self.layer_mapping = [(4, i, None) for i in range(LAYERS)]
            self.buffers = [object() for _ in range(LAYERS)]

        def wait_layer_transfer(self, layer_id: int) -> None:
            if self.layer_transfer_counter is not None:
                self.layer_transfer_counter.wait_until(layer_id - self.start_layer)

        def get_index_k_with_scale_buffer(self, layer_id: int):
            self.wait_layer_transfer(layer_id)
            _, compress_layer_id, _ = self.layer_mapping[layer_id]
            return self.buffers[compress_layer_id]

        def get_extra_key_buffer(self, layer_id: int):
            return self.buffers[layer_id]  # no gate: a read the probe sees as ungated

    return LayerLoadingEvent, LayerDoneCounter, Pool


def build(wrapped: bool, state: str):
    """A pool (and counter) in one of the states the probe distinguishes."""
    loading_cls, counter_cls, pool_cls = make_classes()
    probe = Probe(ProbeConfig(directory=Path("/nonexistent"), gap_mode="host"))
    if wrapped:
        patch_methods(probe, counter_cls, COUNTER_METHODS)
        patch_methods(probe, loading_cls, EVENT_METHODS)
        patch_methods(probe, pool_cls, POOL_METHODS)
        probe.engaged = True
    pool = pool_cls()
    counter = counter_cls()
    if state != "hicache_off":
        pool.layer_transfer_counter = counter
    if state in ("bound", "bound_ungated"):
        slot = counter.update_producer()
        for layer in range(LAYERS):
            counter.events[slot].complete(layer)
        counter.set_consumer(slot)
    return probe, pool, counter


def per_call_ns(fn: Callable[[], None], calls: int) -> float:
    start = time.perf_counter_ns()
    fn()
    return (time.perf_counter_ns() - start) / calls


def measure(state: str, method: str, calls: int, rounds: int) -> tuple[float, float]:
    times: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(rounds):
        for wrapped in (False, True):
            probe, pool, counter = build(wrapped, state)
            if method == "wait_until":
                call = counter.wait_until
            elif method == "get_extra_key_buffer":
                call = pool.get_extra_key_buffer
            else:
                call = pool.get_index_k_with_scale_buffer
            layers = [i % LAYERS for i in range(calls)]

            def loop(call=call, layers=layers, probe=probe) -> None:
                for i, layer in enumerate(layers):
                    call(layer)
                    if i % 1024 == 1023:
                        probe.pending_gaps.clear()  # the reporter drains these in real runs

            times[wrapped].append(per_call_ns(loop, calls))
    return statistics.median(times[False]), statistics.median(times[True])


CASES = [
    ("index-K read, HiCache off (no counter)", "hicache_off", "get_index_k_with_scale_buffer"),
    ("index-K read, no load bound (decode)", "idle", "get_index_k_with_scale_buffer"),
    ("index-K read, load bound, gated", "bound", "get_index_k_with_scale_buffer"),
    ("ungated KV read, load bound (host gap mark)", "bound", "get_extra_key_buffer"),
    ("wait_until, load bound", "bound", "wait_until"),
]


def run(quick: bool) -> str:
    calls = 20_000 if quick else 200_000
    rounds = 3 if quick else 7
    lines = [
        "## Probe overhead per wrapped call",
        "",
        f"Median of {rounds} alternating rounds of {calls:,} calls each, same process; "
        "CPU only (stand-in classes, no torch). Overhead = wrapped - unwrapped.",
        "",
        "| case | unwrapped ns/call | wrapped ns/call | overhead µs/call |",
        "|---|---|---|---|",
    ]
    for label, state, method in CASES:
        base, wrapped = measure(state, method, calls, rounds)
        lines.append(f"| {label} | {base:.0f} | {wrapped:.0f} | {(wrapped - base) / 1000:.2f} |")
    lines += [
        "",
        "With CUDA events the ungated index-K path also records one timing event per read and "
        "the load path one per layer; `make gpu-check` measures those on a GPU "
        "(docs/gpu-validation.md).",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(run(quick=True))
