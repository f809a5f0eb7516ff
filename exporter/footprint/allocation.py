"""The device pool's side: what DeepSeekV4TokenToKVPool really allocates for given token counts.

This is the truth the plan must match (``sglang/srt/mem_cache/deepseek_v4_memory_pool.py``,
the same in every release 0.5.12-0.5.23 for DeepSeek-V4; tests/conformance builds each
release's pool on the meta device and compares byte for byte): every sub-pool allocates
``(size + page + 1) // page`` pages (an extra page and a null slot); KV pages are padded to a
multiple of 576 bytes; the index-K pool stores its real dtype; compress-state rows are padded
to the compress ratio after adding the ring and a null row. Draft (MTP) layers get their own
pools sized with the same token counts.
"""

from __future__ import annotations

import math

from exporter.footprint.geometry import LayerCounts, ModelGeometry, StageSlice
from exporter.footprint.pricing import (
    FP32_BYTES,
    INT64_BYTES,
    KV_PAGE_ALIGN,
    RING_C2,
    V41_INDEX_PAGE,
    TokenCounts,
    c128_state_width_bytes,
    indexer_bytes_per_token,
    kv_page_bytes,
    state_bytes,
    stored_index_k_dtype,
)
from exporter.footprint.releases import NEWEST, PageReserve, ReleaseRules
from exporter.footprint.settings import DeploymentSettings

__all__ = [
    "KV_PAGE_ALIGN",
    "allocated_bytes",
    "allocated_tensors",
    "kv_page_bytes",
    "pages",
    "state_rows",
]


def pages(size: int, page: int, reserve: PageReserve = "own_page", logical_page: int = 0) -> int:
    """Pages a sub-pool allocates for ``size`` slots: up to 0.5.20 one extra page of its own
    and a null slot; from 0.5.21 enough physical pages to cover the allocator's reserved
    logical page (``logical_page`` slots, the model-wide page size)."""
    if reserve == "global_page":
        return -(-(size + logical_page) // page)
    return (size + page + 1) // page


def state_rows(size: int, ring: int, ratio: int, online: bool = False) -> int:
    """CompressStatePool rows: size + ring + 1 (null row), padded to the ratio unless online."""
    rows = size + ring + 1
    return rows if online else math.ceil(rows / ratio) * ratio


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
    one in all. The device's rounding of each tensor is ``device_bytes``' business."""
    page = settings.page_size
    c4_page, c128_page = page // 4, page // 128
    sdb = state_bytes(settings, rules)
    # The draft worker (MTP) exists only with speculative decoding; it has pools of its own.
    with_draft = settings.speculative and include_draft
    draft = stage.draft if with_draft else LayerCounts(0, 0, 0)
    n_all = stage.main.total + draft.total
    n_c4 = stage.main.c4 + draft.c4
    n_c128 = stage.main.c128 + draft.c128
    ib = indexer_bytes_per_token(geom.index_head_dim, stored_index_k_dtype(settings, rules))
    c4_rows = state_rows(counts.c4_state, settings.ring_c4, 4)
    c128_rows = state_rows(
        counts.c128_state, settings.ring_c128, 128, online=settings.online_compress
    ) * (1 + settings.online_mtp_banks)
    kv_res, ix_res = rules.kv_reserve, rules.index_reserve
    out = {
        "swa_kv": (pages(counts.swa, page, kv_res, page) * kv_page_bytes(geom, page), n_all),
        "c4_kv": (pages(counts.c4, c4_page, kv_res, page) * kv_page_bytes(geom, c4_page), n_c4),
        "c128_kv": (
            pages(counts.c128, c128_page, kv_res, page) * kv_page_bytes(geom, c128_page),
            n_c128,
        ),
        "c4_index_k": (pages(counts.c128 * 32, c4_page, ix_res, page) * c4_page * ib, n_c4),
        "c4_state": (c4_rows * (2 * 2 * geom.head_dim * sdb), n_c4),
        "c4_index_state": (c4_rows * (2 * 2 * geom.index_head_dim * sdb), n_c4),
        "c128_state": (c128_rows * c128_state_width_bytes(geom, settings, rules), n_c128),
    }
    out.update(_low_ratio_pools(geom, stage, settings, counts, rules))
    if settings.online_compress and settings.online_c128_mtp and rules.state_dtype_from_env:
        # online_c128_mtp_pending_seq_lens (0.5.14+), made whenever online compress runs with
        # SGLANG_EXPERIMENTAL_ONLINE_C128_MTP=1: one int64 per request (0.5.14: max_num_reqs)
        # or per c128 state slot (0.5.15+: online_c128_state_num_req_slots).
        # Every DeepSeekV4TokenToKVPool makes its own (``__init__``: ONLINE_C128 and the
        # switch), so the draft worker's pool adds a second one where it runs.
        slots = counts.requests if rules.c128_state == "per_swa_token" else counts.c128_state
        pools_here = 2 if draft.total else 1
        out["c128_mtp_pending_lens"] = (INT64_BYTES * slots, pools_here)
    return out


def _low_ratio_pools(
    geom: ModelGeometry,
    stage: StageSlice,
    settings: DeploymentSettings,
    counts: TokenCounts,
    rules: ReleaseRules,
) -> dict[str, tuple[int, int]]:
    """DeepSeek-V4.1 kv_source layers of ratio 1 / 2 (0.5.21+): a latent pool of full // r
    slots in pages of page_size // r, an always-fp4 index pool of (full + page) // r slots in
    64-slot pages, and for ratio 2 the request-scoped pending-pair state (fp32, ring 2)."""
    page = settings.page_size
    fp4 = indexer_bytes_per_token(geom.index_head_dim, "fp4")
    out: dict[str, tuple[int, int]] = {}
    for ratio, n in ((1, stage.main.c1), (2, stage.main.c2)):
        if not n:
            continue
        kv_page = page // ratio
        kv_pages = pages(counts.full // ratio, kv_page, rules.kv_reserve, page)
        out[f"c{ratio}_kv"] = (kv_pages * kv_page_bytes(geom, kv_page), n)
        index_size = (counts.full + page) // ratio
        index_pages = pages(index_size, V41_INDEX_PAGE, rules.index_reserve, V41_INDEX_PAGE)
        out[f"c{ratio}_index_k"] = (index_pages * V41_INDEX_PAGE * fp4, n)
    if stage.main.c2:
        rows = state_rows(counts.c2_state, RING_C2, 2)
        out["c2_state"] = (rows * 2 * geom.head_dim * FP32_BYTES, stage.main.c2)
    return out
