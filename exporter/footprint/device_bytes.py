"""The bytes a pool's tensors take on the device, as PyTorch's CUDA caching allocator hands them
out: more than the tensors' own bytes.

SGLang allocates every KV tensor with ``torch.zeros``/``torch.empty`` on the default caching
allocator. That allocator (``c10/cuda/CUDACachingAllocator.cpp``: ``round_size``,
``get_allocation_size``, ``should_split``; its size constants now live in
``c10/core/AllocatorConfig.h``; ``expandable_segments`` off, the default) rounds each
request up to 512 bytes, serves requests of at most 1 MiB from 2 MiB segments, requests
under 10 MiB from 20 MiB segments, and gives a larger request a segment of its own rounded
up to 2 MiB. A block is split only when the rest is worth keeping (at least 512 bytes in the
small pool, more than 1 MiB in the large one); otherwise the request keeps the whole block, and
``torch.cuda.memory_allocated`` counts it whole. ``cudaMalloc`` is called once per segment:
``memory_reserved`` is the sum of segments. NVML's used memory grows by more still (the
driver's own share; 0.43-0.46% over the tensors on an H200, measured by hand): not modelled.

The simulation below replays those rules over the tensors in allocation order, with the
allocator's best fit (the smallest free block that fits), on a fresh allocator: the KV pool is
allocated once at start-up, after the weights, and frees nothing while it is built. Not yet
measured against ``memory_allocated``/``memory_reserved`` on a GPU: ``make gpu-check`` does that
(docs/gpu-validation.md). By hand on an H200, allocation grew 0.10-0.13% over the tensors; the
model gives 0.10-0.12% for the same launches.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from exporter.units import MIB

MIN_BLOCK = 512  # kMinBlockSize: every request is rounded up to this
SMALL_SIZE = 1 * MIB  # kSmallSize: largest request served from the small pool
SMALL_BUFFER = 2 * MIB  # kSmallBuffer: segment size of the small pool
MIN_LARGE_ALLOC = 10 * MIB  # kMinLargeAlloc: from here a request gets a segment of its own
LARGE_BUFFER = 20 * MIB  # kLargeBuffer: segment for requests between 1 and 10 MiB
ROUND_LARGE = 2 * MIB  # kRoundLarge: a large request's own segment is rounded to this


def round_request(nbytes: int) -> int:
    """The block size a request of ``nbytes`` asks for (``round_size``)."""
    return max(MIN_BLOCK, -(-nbytes // MIN_BLOCK) * MIN_BLOCK)


def segment_size(request: int) -> int:
    """The ``cudaMalloc`` size of a new segment for a rounded request (``get_allocation_size``)."""
    if request <= SMALL_SIZE:
        return SMALL_BUFFER
    if request < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return -(-request // ROUND_LARGE) * ROUND_LARGE


@dataclass(frozen=True)
class DeviceBytes:
    """What the allocator holds for a set of tensors."""

    tensors: int  # the tensors' own bytes (what the footprint model prices)
    allocated: int  # torch.cuda.memory_allocated: blocks handed out, rounding included
    reserved: int  # torch.cuda.memory_reserved: segments, i.e. cudaMalloc'd bytes
    segments: int  # cudaMalloc calls

    @property
    def overhead(self) -> int:
        """Reserved bytes beyond the tensors' own."""
        return self.reserved - self.tensors


def simulate(sizes: Iterable[int]) -> DeviceBytes:
    """Replay the caching allocator over tensor sizes (bytes, allocation order; zero-byte
    tensors allocate nothing)."""
    free: dict[bool, list[int]] = {True: [], False: []}  # small pool?, sorted free block sizes
    tensors = allocated = reserved = segments = 0
    for nbytes in sizes:
        if nbytes <= 0:
            continue
        tensors += nbytes
        request = round_request(nbytes)
        small = request <= SMALL_SIZE
        pool = free[small]
        at = bisect.bisect_left(pool, request)
        if at < len(pool):
            block = pool.pop(at)
        else:
            block = segment_size(request)
            reserved += block
            segments += 1
        rest = block - request
        if rest >= MIN_BLOCK if small else rest > SMALL_SIZE:
            bisect.insort(pool, rest)
            allocated += request
        else:
            allocated += block
    return DeviceBytes(tensors, allocated, reserved, segments)


def pool_tensor_sizes(tensors: Mapping[str, tuple[int, int]]) -> list[int]:
    """Tensor sizes from ``{pool: (bytes per tensor, tensors)}`` (``allocation.allocated_tensors``),
    each sub-pool's per-layer tensors together, in the model's pool order. The order matters
    only for tensors under 10 MiB, which share segments; a KV pool's are far larger."""
    out: list[int] = []
    for per_tensor, count in tensors.values():
        out.extend([per_tensor] * count)
    return out
