"""Start-up memory, measured inside SGLang: what the configurator decided, what the pool holds.

Two records, both written into the snapshot's ``memory`` section:

* the pool configurator's sizing call (``DSV4PoolConfigurator.calculate_pool_sizes`` /
  ``calculate_pool_sizes_from_max_tokens``): its arguments (the byte budget, the page size),
  the coefficient it held (``bytes_per_full_token``), what its fixed-bytes helpers returned
  during the call, and the integer fields of the config it returned;
* every ``DeepSeekV4TokenToKVPool`` once its constructor returned: the bytes of every tensor it
  reaches (each storage counted once, so aliases and views are not double counted), grouped by
  sub-pool from the attribute that holds them, and the index-K layout read off its buffers.

No formula of SGLang is restated here: the numbers are arguments, return values and tensor
sizes, so they hold for any release or fork. The only interpretation is naming: which attribute
holds which sub-pool (names from public SGLang sources, 0.5.12 ... 0.5.23), with ``other`` for
anything unknown, and the index-K dtype read from the measured bytes per slot. torch is never
imported; tensors are recognised by their methods.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

MAX_DEPTH = 6
MAX_OBJECTS = 20000
# Attribute (first path component) -> sub-pool. 0.5.12-0.5.20 keep one attribute per pool;
# 0.5.21+ key kv_pools / index_pools by compress ratio (the old names kept as aliases).
NAMED = {
    "swa_kv_pool": "swa_kv",
    "c4_kv_pool": "c4_kv",
    "c128_kv_pool": "c128_kv",
    "c4_indexer_kv_pool": "c4_index_k",
    "unified_kv_pool": "unified_kv",
    "request_window": "swa_kv",
}
BY_RATIO = {"kv_pools": "kv", "index_pools": "index_k"}
PER_LAYER = {"compress_state_pools": "state", "indexer_compress_state_pools": "index_state"}
_KEY = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(?:\[(-?\d+)\])?")
_FIXED = re.compile(r"fixed.*bytes|bytes.*fixed")


def is_tensor(obj: Any) -> bool:
    return callable(getattr(obj, "numel", None)) and callable(getattr(obj, "element_size", None))


def tensor_storage(t: Any) -> tuple[Any, int]:
    """(a key unique to the tensor's storage, the storage's bytes). Views of one buffer share
    the key, so an allocation is counted once; fallback: the tensor itself."""
    try:
        storage = t.untyped_storage()
        return ("storage", storage._cdata), int(storage.nbytes())
    except Exception:
        return ("tensor", id(t)), int(t.numel()) * int(t.element_size())


def walk_tensors(root: Any) -> Iterator[tuple[str, Any]]:
    """(attribute path, tensor) for every tensor reachable from ``root`` through attributes,
    lists, tuples and dicts of SGLang-owned objects (bounded depth and object count)."""
    seen: set[int] = set()
    stack: list[tuple[Any, str, int]] = [(root, "", 0)]
    while stack and len(seen) < MAX_OBJECTS:
        obj, path, depth = stack.pop()
        if id(obj) in seen or depth > MAX_DEPTH:
            continue
        seen.add(id(obj))
        if is_tensor(obj):
            yield path, obj
            continue
        children: list[tuple[Any, str]] = []
        if isinstance(obj, (list, tuple)):
            children = [(item, f"{path}[{i}]") for i, item in enumerate(obj)]
        elif isinstance(obj, dict):
            children = [(item, f"{path}[{k!r}]") for k, item in obj.items()]
        elif obj is root or type(obj).__module__.startswith("sglang"):
            attrs = getattr(obj, "__dict__", None)
            if isinstance(attrs, dict):
                children = [(v, f"{path}.{k}" if path else k) for k, v in attrs.items()]
        stack.extend((child, where, depth + 1) for child, where in reversed(children))


def _layer_ratio(pool: Any, holder: Any, index: int) -> int | None:
    ratio = getattr(holder, "ratio", None)
    if isinstance(ratio, int):
        return ratio
    ratios = getattr(pool, "compression_ratios", None)
    if isinstance(ratios, (list, tuple)) and 0 <= index < len(ratios):
        value = ratios[index]
        return value if isinstance(value, int) else None
    return None


def sub_pool(pool: Any, path: str) -> str:
    """The sub-pool a tensor at ``path`` belongs to, named as the footprint model names it."""
    m = _KEY.match(path)
    if m is None:
        return "other"
    attr, index = m.group(1), m.group(2)
    if attr in NAMED:
        return NAMED[attr]
    if attr in BY_RATIO and index is not None:
        return f"c{int(index)}_{BY_RATIO[attr]}"
    if attr in PER_LAYER and index is not None:
        holders = getattr(pool, attr, None)
        i = int(index)
        holder = holders[i] if isinstance(holders, (list, tuple)) and i < len(holders) else None
        ratio = _layer_ratio(pool, holder, i)
        return f"c{ratio}_{PER_LAYER[attr]}" if ratio else "other"
    return "other"


def index_k_layout(pool: Any) -> dict[str, Any] | None:
    """The c4 index-K cache as allocated: bytes per slot = a layer buffer's row bytes over the
    index pool's page size; dtype read off that against the index head dim (bf16 stores two
    bytes per element, fp8 one plus block scales, fp4 half plus scales)."""
    index_pools = getattr(pool, "index_pools", None)
    ipool = getattr(pool, "c4_indexer_kv_pool", None)
    if ipool is None and isinstance(index_pools, dict):
        ipool = index_pools.get(4)
    if ipool is None:
        return None
    page = getattr(ipool, "page_size", None)
    head_dim = getattr(ipool, "index_head_dim", None)
    fused = getattr(ipool, "index_k_with_scale_buffer", None)
    if isinstance(fused, (list, tuple)) and fused and is_tensor(fused[0]):
        layout, row_bytes = "fused", _row_bytes(fused[0])
    else:
        payload = getattr(ipool, "index_k_payload_buffer", None)
        scale = getattr(ipool, "index_k_scale_buffer", None)
        if not (isinstance(payload, (list, tuple)) and payload and isinstance(scale, list)):
            return None
        layout = "split"
        payload_row = _row_bytes(payload[0])
        scale_row = _row_bytes(scale[0]) if scale else 0
        row_bytes = None if payload_row is None or scale_row is None else payload_row + scale_row
    if not isinstance(page, int) or page <= 0 or row_bytes is None:
        return None
    per_slot = row_bytes / page
    return {
        "dtype": _dtype_of(per_slot, head_dim),
        "layout": layout,
        "bytes_per_slot": per_slot,
        "page_size": page,
        "head_dim": head_dim if isinstance(head_dim, int) else None,
    }


def _row_bytes(t: Any) -> int | None:
    """Bytes of one page (first dimension) of a per-layer buffer."""
    try:
        pages = int(t.shape[0])
        return int(t.numel()) * int(t.element_size()) // pages if pages else None
    except Exception:
        return None


def _dtype_of(per_slot: float, head_dim: Any) -> str:
    if not isinstance(head_dim, int) or head_dim <= 0:
        return "unknown"
    per_element = per_slot / head_dim
    if per_element >= 2:
        return "bf16"
    if per_element >= 1:
        return "fp8"
    if per_element >= 0.5:
        return "fp4"
    return "unknown"


def measure_pool(pool: Any) -> dict[str, Any]:
    """The ``memory.pools[]`` entry for one pool instance (see ``snapshot``)."""
    counted: set[Any] = set()
    by_pool: dict[str, int] = {}
    tensors = 0
    for path, t in walk_tensors(pool):
        key, nbytes = tensor_storage(t)
        if key in counted:
            continue
        counted.add(key)
        tensors += 1
        name = sub_pool(pool, path)
        by_pool[name] = by_pool.get(name, 0) + nbytes
    start, end = getattr(pool, "start_layer", None), getattr(pool, "end_layer", None)
    return {
        "class": type(pool).__name__,
        "draft": bool(getattr(pool, "is_draft_worker", False)),
        "layers": [start, end] if isinstance(start, int) and isinstance(end, int) else None,
        "tensors": tensors,
        "bytes": by_pool,
        "index_k": index_k_layout(pool),
    }


def fixed_bytes_methods(cls: type) -> list[str]:
    """The configurator's helpers whose names say they return fixed (per-request) bytes."""
    return sorted(n for n in dir(cls) if _FIXED.search(n) and callable(getattr(cls, n, None)))


def configurator_record(
    configurator: Any,
    method: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    result: Any,
    fixed: dict[str, int],
) -> dict[str, Any]:
    """The ``memory.configurator`` entry from one sizing call's arguments and result."""

    def arg(i: int, *names: str) -> Any:
        if len(args) > i:
            return args[i]
        return next((kwargs[n] for n in names if n in kwargs), None)

    budget = arg(0, "available_bytes") if method == "calculate_pool_sizes" else None
    page = arg(1, "page_size")
    coefficient = getattr(configurator, "bytes_per_full_token", None)
    sizes = {
        k: v
        for k, v in (getattr(result, "__dict__", None) or {}).items()
        if isinstance(v, int) and not isinstance(v, bool) and v >= 0
    }
    return {
        "class": type(configurator).__name__,
        "method": method,
        "available_bytes": _int_or_none(budget),
        "page_size": _int_or_none(page),
        "bytes_per_full_token": float(coefficient)
        if isinstance(coefficient, (int, float)) and not isinstance(coefficient, bool)
        else None,
        "fixed_bytes": {k: v for k, v in fixed.items() if v >= 0},
        "sizes": sizes,
    }


def _int_or_none(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        return None
    return int(value) if value >= 0 else None
