"""What one slot, row or page of each DeepSeek-V4 buffer costs, and the token counts SGLang
derives from the full-pool count: the primitives the pool table (:mod:`exporter.footprint.pools`)
is written in, shared by the configurator's side (pricing) and the device pool's side
(allocation) so that each byte size is stated once.

Read from ``sglang/srt/model_executor/pool_configurator.py`` (``DSV4PoolConfigurator``) and
``sglang/srt/mem_cache/deepseek_v4_memory_pool.py`` (``DeepSeekV4TokenToKVPool``) of every release
0.5.12-0.5.23; docs/footprint.md has the formulas.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from exporter.footprint.geometry import LayerCounts, ModelGeometry, StageSlice
from exporter.footprint.releases import NEWEST, PageReserve, ReleaseRules
from exporter.footprint.settings import Configurator, DeploymentSettings, IndexKDtype

KV_QUANT_BLOCK = 64  # NoPE fp8 scale granularity
KV_SCALE_PAD = 1
INDEX_QUANT_BLOCK = 128
KV_PAGE_ALIGN = 576  # DeepSeekV4SingleKVPool pads each page's bytes to a multiple of 576
FP32_BYTES = 4
INT64_BYTES = 8
# DeepSeek-V4.1 low-ratio (1, 2) index pools: always fp4 (force_fp4=True), 64-slot pages
# (DSV41_INDEX_PAGE_SIZE; 128 only with DeepGEMM's paged sparse MQA logits on Blackwell,
# where the V4.1 KV layouts apply too: not modelled).
V41_INDEX_PAGE = 64
RING_C2 = 2  # ratio-2 pair ring without speculative decoding (get_compress_state_ring_size)


def kv_bytes_per_token(geom: ModelGeometry) -> int:
    """fp8 NoPE + bf16 RoPE + one scale byte per 64 NoPE values + 1 pad = 584 for DSV4."""
    nope = geom.qk_nope_head_dim
    return nope + 2 * geom.qk_rope_head_dim + nope // KV_QUANT_BLOCK + KV_SCALE_PAD


def kv_page_bytes(geom: ModelGeometry, page: int) -> int:
    """A KV page of ``page`` tokens at 584 B each, padded up to a multiple of 576 B."""
    return math.ceil(page * kv_bytes_per_token(geom) / KV_PAGE_ALIGN) * KV_PAGE_ALIGN


def kv_priced_bytes(geom: ModelGeometry, page: int, rules: ReleaseRules) -> float:
    """What the configurator charges per latent slot in a pool of ``page``-token pages:
    584 B up to 0.5.20, ``layout.page_bytes(page) / page`` from 0.5.21."""
    if rules.kv_pricing == "logical":
        return float(kv_bytes_per_token(geom))
    return kv_page_bytes(geom, page) / page


def priced_layers(geom: ModelGeometry, stage: StageSlice, rules: ReleaseRules) -> LayerCounts:
    """The layers the configurator prices: all of ``compress_ratios`` in 0.5.12 (MTP entries
    and other PP stages included), the stage's own slice from 0.5.13."""
    return stage.main if rules.prices_stage_slice else LayerCounts.of(geom.compress_ratios)


def state_bytes(settings: DeploymentSettings, rules: ReleaseRules) -> int:
    """Compress-state element size: float32 before 0.5.14, then SGLANG_DSV4_COMPRESS_STATE_DTYPE."""
    return settings.state_dtype_bytes if rules.state_dtype_from_env else FP32_BYTES


def stored_index_k_dtype(settings: DeploymentSettings, rules: ReleaseRules) -> IndexKDtype:
    """The dtype the index-K pool really stores: fp4 needs a release that has the fp4 indexer."""
    if settings.index_k_dtype == "fp4" and not rules.has_fp4_indexer:
        return "fp8"
    return settings.index_k_dtype


def indexer_bytes_per_token(index_head_dim: int, dtype: IndexKDtype) -> int:
    """Index-K bytes per compressed token: fp8 d + d/128*4 scales; bf16 2d; fp4 d/2 + d/32."""
    d = index_head_dim
    if dtype == "fp8":
        return d + d // INDEX_QUANT_BLOCK * 4
    if dtype == "bf16":
        return 2 * d
    if dtype == "fp4":
        return d // 2 + d // 32
    raise ValueError(f"unknown index-K dtype {dtype!r}")


def priced_index_k_dtype(configurator: Configurator, actual: IndexKDtype) -> IndexKDtype:
    """What the configurator believes the index-K dtype is: the legacy one always says fp8."""
    return "fp8" if configurator == "legacy" else actual


def swa_cap_tokens(
    geom: ModelGeometry, settings: DeploymentSettings, rules: ReleaseRules = NEWEST
) -> int | None:
    """SWA slots SGLang reserves in cap mode, None where the pool is sized by the ratio.

    0.5.21-0.5.23 ``DSV4PoolConfigurator._resolve_swa_cap_tokens`` with
    ``compute_swa_request_cap`` (pool_configurator.py): cap mode is on when the operator gave
    no --swa-full-tokens-ratio and --chunked-prefill-size is positive (max-running-requests
    is always known here). Per request, the window plus one eviction interval of draft tokens
    (1 without speculative decoding) plus a page of padding plus one decode page; times
    max-running-requests per DP worker, plus two prefill chunks in flight (one with
    --disable-overlap-schedule) plus a page; plus the radix headroom, prefix_tails x
    (window + page) with prefix_tails = --swa-prefix-tails or 4 x mrr (0 with
    --disable-radix-cache); page-aligned up. With speculative decoding the draft count and
    the spec decode allocation change the per-request term: reported not modelled.
    """
    if not rules.swa_cap_mode or settings.swa_ratio_explicit:
        return None
    if settings.chunked_prefill_size <= 0:
        return None
    page = settings.page_size
    window = geom.sliding_window
    mrr = settings.max_running_requests
    eviction_interval = max(1, settings.swa_eviction_interval)
    draft_tokens = 1
    per_request = window + eviction_interval * draft_tokens + page + page
    chunks_in_flight = 1 if settings.disable_overlap_schedule else 2
    cap = per_request * max(1, mrr) + chunks_in_flight * settings.chunked_prefill_size + page
    if settings.swa_prefix_tails is not None:
        tails = settings.swa_prefix_tails
    elif settings.disable_radix_cache:
        tails = 0
    else:
        tails = 4 * mrr
    headroom = tails * (window + page)
    return -(-(cap + headroom) // page) * page


def c128_state_rows_planned(settings: DeploymentSettings) -> int:
    """Rows of the request-scoped c128 state: ceil128((mrr+1)*ring + ring + 1); with online
    compress one row per request slot plus ring + 1, unpadded, times ``1 + draft tokens`` with
    MTP (``_get_c128_state_fixed_bytes``: ``state_rows *= 1 + online_c128_mtp_max_draft_tokens``,
    0.5.15+)."""
    ring = settings.ring_c128
    slots = settings.max_running_requests + 1
    if settings.online_compress:
        return (slots + ring + 1) * (1 + settings.online_mtp_banks)
    return math.ceil((slots * ring + ring + 1) / 128) * 128


def c128_state_width_bytes(
    geom: ModelGeometry, settings: DeploymentSettings, rules: ReleaseRules = NEWEST
) -> int:
    """kv+score (2 x head_dim) per row, or (max, sum, kv) = 3 x head_dim with online compress."""
    width = 3 * geom.head_dim if settings.online_compress else 2 * geom.head_dim
    return width * state_bytes(settings, rules)


@dataclass(frozen=True)
class TokenCounts:
    """Token (slot) counts of every pool, as the configurator derives them."""

    full: int
    swa: int
    c4: int
    c128: int
    c4_state: int
    c128_state: int
    c2_state: int = 0
    requests: int = 0  # requests per DP worker the pools were finalized for


def align_down(n: int, page: int) -> int:
    return n // page * page


def counts_for_full_tokens(
    geom: ModelGeometry,
    settings: DeploymentSettings,
    full_tokens: int,
    rules: ReleaseRules = NEWEST,
    stage: StageSlice | None = None,
) -> TokenCounts:
    """Derive every sub-pool's size from the full-pool token count (``_compute_dsv4_sizes``,
    then ``finalize_with_max_running_requests`` for the request-scoped c128 state; from
    0.5.21 that is 0 on a ``stage`` without c128 layers)."""
    page = settings.page_size
    cap = swa_cap_tokens(geom, settings, rules)
    swa = (
        align_down(int(full_tokens * settings.swa_full_tokens_ratio), page) if cap is None else cap
    )
    unit = geom.sliding_window if rules.c4_state_unit == "window" else page
    hisparse = settings.hisparse_ratio or 1
    mrr = resolved_max_running_requests(settings, full_tokens)
    if rules.c128_state == "per_swa_token":
        c128_state = swa // geom.sliding_window * settings.ring_c128
    elif rules.c128_ring_per_stage and stage is not None and not stage.main.c128:
        c128_state = 0
    else:
        c128_state = (mrr + 1) * settings.ring_c128
    return TokenCounts(
        full=full_tokens,
        swa=swa,
        c4=int(full_tokens // (4 * hisparse)),
        c128=full_tokens // 128,
        c4_state=swa // unit * settings.ring_c4,
        c128_state=c128_state,
        c2_state=(mrr + 1) * RING_C2,
        requests=mrr,
    )


def resolved_max_running_requests(settings: DeploymentSettings, full_tokens: int) -> int:
    """Requests per DP worker the pools are finalized for (``resolve_max_num_reqs``,
    KVCacheConfigurator 0.5.16+ / ModelRunner 0.5.15): the requested count per worker, at most
    half the token capacity. (0.5.12-0.5.14 bound it by a context-length estimate instead; no
    pool of theirs is sized by it.) The configurator's c128 bias uses the requested count."""
    return min(settings.max_running_requests, full_tokens // 2)


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
