"""The device pool's side: what DeepSeekV4TokenToKVPool really allocates for given token counts.

This is the truth the plan must match (dsv4-memory.md §4): every sub-pool allocates
``(size + page + 1) // page`` pages (an extra page and a null slot); KV pages are padded to a
multiple of 576 bytes; the index-K pool stores its real dtype; compress-state rows are padded
to the compress ratio after adding the ring and a null row. Draft (MTP) layers get their own
pools sized with the same token counts.
"""

from __future__ import annotations

import math

from exporter.footprint.geometry import LayerCounts, ModelGeometry, StageSlice
from exporter.footprint.pricing import (
    TokenCounts,
    c128_state_width_bytes,
    indexer_bytes_per_token,
    kv_bytes_per_token,
)
from exporter.footprint.settings import DeploymentSettings

KV_PAGE_ALIGN = 576


def pages(size: int, page: int) -> int:
    """Pages a sub-pool allocates for ``size`` slots: one extra page and a null slot."""
    return (size + page + 1) // page


def kv_page_bytes(geom: ModelGeometry, page: int) -> int:
    """A KV page of ``page`` tokens at 584 B each, padded up to a multiple of 576 B."""
    return math.ceil(page * kv_bytes_per_token(geom) / KV_PAGE_ALIGN) * KV_PAGE_ALIGN


def state_rows(size: int, ring: int, ratio: int, online: bool = False) -> int:
    """CompressStatePool rows: size + ring + 1 (null row), padded to the ratio unless online."""
    rows = size + ring + 1
    return rows if online else math.ceil(rows / ratio) * ratio


def allocated_bytes(
    geom: ModelGeometry,
    stage: StageSlice,
    settings: DeploymentSettings,
    counts: TokenCounts,
) -> dict[str, int]:
    """Bytes per pool the device really allocates on one rank for these token counts."""
    page = settings.page_size
    c4_page, c128_page = page // 4, page // 128
    sdb = settings.state_dtype_bytes
    # The draft worker (MTP) exists only with speculative decoding; it has pools of its own.
    draft = stage.draft if settings.speculative else LayerCounts(0, 0, 0)
    n_all = stage.main.total + draft.total
    n_c4 = stage.main.c4 + draft.c4
    n_c128 = stage.main.c128 + draft.c128
    c4_device = int(counts.c4 // settings.hisparse_ratio) if settings.hisparse_ratio else counts.c4
    ib = indexer_bytes_per_token(geom.index_head_dim, settings.index_k_dtype)
    c4_rows = state_rows(counts.c4_state, settings.ring_c4, 4)
    c128_rows = state_rows(
        counts.c128_state, settings.ring_c128, 128, online=settings.online_compress
    )
    return {
        "swa_kv": pages(counts.swa, page) * kv_page_bytes(geom, page) * n_all,
        "c4_kv": pages(c4_device, c4_page) * kv_page_bytes(geom, c4_page) * n_c4,
        "c128_kv": pages(counts.c128, c128_page) * kv_page_bytes(geom, c128_page) * n_c128,
        "c4_index_k": pages(counts.c128 * 32, c4_page) * c4_page * ib * n_c4,
        "c4_state": c4_rows * (2 * 2 * geom.head_dim * sdb) * n_c4,
        "c4_index_state": c4_rows * (2 * 2 * geom.index_head_dim * sdb) * n_c4,
        "c128_state": c128_rows * c128_state_width_bytes(geom, settings) * n_c128,
    }
