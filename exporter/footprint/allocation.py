"""The device pool's side: what DeepSeekV4TokenToKVPool really allocates for given token counts.

This is the truth the plan must match (``sglang/srt/mem_cache/deepseek_v4_memory_pool.py``,
the same in every release 0.5.12-0.5.23 for DeepSeek-V4; tests/conformance builds each
release's pool on the meta device and compares byte for byte): every sub-pool allocates
``(size + page + 1) // page`` pages (an extra page and a null slot); KV pages are padded to a
multiple of 576 bytes; the index-K pool stores its real dtype; compress-state rows are padded
to the compress ratio after adding the ring and a null row. Draft (MTP) layers get their own
pools sized with the same token counts. Each sub-pool's own rule is its row's ``allocation``
in the pool table (:mod:`exporter.footprint.pools`).
"""

from __future__ import annotations

from exporter.footprint.buffers import (
    KV_PAGE_ALIGN,
    TokenCounts,
    kv_page_bytes,
    pages,
    state_rows,
    stored_index_k_dtype,
)
from exporter.footprint.geometry import ModelGeometry, StageSlice
from exporter.footprint.pools import PoolContext, pools_in
from exporter.footprint.releases import NEWEST, ReleaseRules
from exporter.footprint.settings import DeploymentSettings

__all__ = [
    "KV_PAGE_ALIGN",
    "allocated_bytes",
    "allocated_tensors",
    "kv_page_bytes",
    "pages",
    "state_rows",
]


def allocated_bytes(
    geom: ModelGeometry,
    stage: StageSlice,
    settings: DeploymentSettings,
    counts: TokenCounts,
    rules: ReleaseRules = NEWEST,
    include_draft: bool = True,
) -> dict[str, int]:
    """Bytes per pool the device really allocates on one rank for these token counts.

    ``include_draft=False`` gives the target worker's pool alone (what one
    ``DeepSeekV4TokenToKVPool`` holds); the draft worker's layers are added on top with
    speculative decoding, sized with the same token counts.
    """
    tensors = allocated_tensors(geom, stage, settings, counts, rules, include_draft)
    return {pool: per * n for pool, (per, n) in tensors.items()}


def allocated_tensors(
    geom: ModelGeometry,
    stage: StageSlice,
    settings: DeploymentSettings,
    counts: TokenCounts,
    rules: ReleaseRules = NEWEST,
    include_draft: bool = True,
) -> dict[str, tuple[int, int]]:
    """Per pool, (bytes of one tensor, tensors): each sub-pool holds one tensor per layer it
    serves (a KV buffer, an index-K buffer, a compress-state buffer), the MTP pending lengths
    one per pool object. The device's rounding of each tensor is ``device_bytes``' business."""
    stored = stored_index_k_dtype(settings, rules)
    ctx = PoolContext(geom, stage, settings, rules, stored, include_draft)
    return {pool.name: pool.allocation(ctx, counts) for pool in pools_in(ctx)}
