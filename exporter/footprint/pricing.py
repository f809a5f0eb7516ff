"""The pool configurator's side: bytes per full-pool token, fixed biases, and budget -> tokens.

This reproduces SGLang's DSV4 pool configurator (``DSV4PoolConfigurator`` in
``sglang/srt/model_executor/pool_configurator.py``) term by term, under the rules of the
release it is given (:mod:`exporter.footprint.releases`; docs/footprint.md). On top of the
release, two pricings of the c4 index-K cache: ``legacy`` prices it as fp8 whatever the device
pool stores (every upstream release on NVIDIA, and the bf16 forks' bug), ``fixed`` prices it
by its real dtype (the forks' fix). Every term is kept by name so that an operator can see
which pool a number comes from.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from exporter.footprint.geometry import LayerCounts, ModelGeometry, StageSlice
from exporter.footprint.releases import NEWEST, ReleaseRules
from exporter.footprint.settings import Configurator, DeploymentSettings, IndexKDtype

PER_TOKEN_POOLS = ("swa_kv", "c4_kv", "c128_kv", "c4_index_k", "c4_state", "c4_index_state")
POOLS = (*PER_TOKEN_POOLS, "c128_state")

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
LOW_RATIOS = (1, 2)
RING_C2 = 2  # ratio-2 pair ring without speculative decoding (get_compress_state_ring_size)


class BudgetError(ValueError):
    """The budget cannot hold even the fixed biases and one page of tokens."""


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


@dataclass(frozen=True)
class TokenCoefficient:
    """Bytes one full-pool token costs, per pool, for one pricing of the index-K cache."""

    terms: dict[str, float]  # pool -> bytes per full token, speculative inflation included
    speculative_factor: float

    @property
    def total(self) -> float:
        return sum(self.terms.values())


def token_coefficient(
    geom: ModelGeometry,
    stage: StageSlice,
    settings: DeploymentSettings,
    index_k_dtype: IndexKDtype,
    rules: ReleaseRules = NEWEST,
) -> TokenCoefficient:
    """The configurator's per-full-token coefficient for one stage, term by term."""
    page = settings.page_size
    # Cap mode moves the SWA pool and the c4 state that follows it out of the coefficient
    # and into a fixed bias (swa_cap_fixed_bytes): 0.5.21+ ``_get_bytes_per_full_token``.
    r = 0.0 if swa_cap_tokens(geom, settings, rules) is not None else settings.swa_full_tokens_ratio
    sdb = state_bytes(settings, rules)
    layers = priced_layers(geom, stage, rules)
    L, L4, L128 = layers.total, layers.c4, layers.c128
    unit = geom.sliding_window if rules.c4_state_unit == "window" else page
    ring_share = settings.ring_c4 / unit
    hisparse = settings.hisparse_ratio or 1.0
    terms = {
        "swa_kv": r * kv_priced_bytes(geom, page, rules) * L,
        "c4_kv": kv_priced_bytes(geom, page // 4, rules) / 4 * L4 / hisparse,
        "c128_kv": kv_priced_bytes(geom, page // 128, rules) / 128 * L128,
        "c4_index_k": indexer_bytes_per_token(geom.index_head_dim, index_k_dtype) / 4 * L4,
        "c4_state": r * ring_share * (2 * 2 * geom.head_dim * sdb) * L4,
        "c4_index_state": r * ring_share * (2 * 2 * geom.index_head_dim * sdb) * L4,
    }
    # V4.1 kv_source layers of ratio 1 / 2 (0.5.21+, ``_compressed_bytes_per_full_token``):
    # their latent plus an always-fp4 index-K slot per compressed token.
    low_index = indexer_bytes_per_token(geom.index_head_dim, "fp4")
    for ratio, n in ((1, layers.c1), (2, layers.c2)):
        if n:
            low_kv = (
                kv_priced_bytes(geom, page // ratio, rules)
                if rules.low_ratio_paged
                else float(kv_bytes_per_token(geom))
            )
            terms[f"c{ratio}_kv"] = low_kv / ratio * n
            terms[f"c{ratio}_index_k"] = low_index / ratio * n
    if rules.c128_state == "per_swa_token":
        # 0.5.14 with online compress and MTP: times (1 + draft tokens), one bank per draft.
        ring128_share = settings.ring_c128 / geom.sliding_window * (1 + settings.online_mtp_banks)
        width = c128_state_width_bytes(geom, settings, rules)
        terms["c128_state"] = r * ring128_share * width * L128
    factor = (L + 1) / L if settings.speculative and L else 1.0
    return TokenCoefficient({k: v * factor for k, v in terms.items()}, factor)


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


def swa_slot_bytes(
    geom: ModelGeometry,
    stage: StageSlice,
    settings: DeploymentSettings,
    rules: ReleaseRules = NEWEST,
) -> dict[str, float]:
    """What one SWA slot costs per pool (``_get_bytes_per_swa_token``, 0.5.21+): the SWA
    latent on every layer plus the c4 (and c4 indexer) compress state, ring4 / page_size rows
    per slot; speculative inflation included."""
    page = settings.page_size
    sdb = state_bytes(settings, rules)
    layers = priced_layers(geom, stage, rules)
    ring_share = settings.ring_c4 / page
    factor = (layers.total + 1) / layers.total if settings.speculative and layers.total else 1.0
    return {
        "swa_kv": kv_priced_bytes(geom, page, rules) * layers.total * factor,
        "c4_state": ring_share * (2 * 2 * geom.head_dim * sdb) * layers.c4 * factor,
        "c4_index_state": ring_share * (2 * 2 * geom.index_head_dim * sdb) * layers.c4 * factor,
    }


def swa_cap_fixed_bytes(
    geom: ModelGeometry,
    stage: StageSlice,
    settings: DeploymentSettings,
    rules: ReleaseRules = NEWEST,
) -> float:
    """The cap-mode SWA pool as a fixed bias (``_get_swa_fixed_bytes``):
    swa_cap_tokens x bytes per SWA slot, summed in SGLang's order; 0 in ratio mode."""
    cap = swa_cap_tokens(geom, settings, rules)
    if cap is None:
        return 0.0
    page = settings.page_size
    sdb = state_bytes(settings, rules)
    layers = priced_layers(geom, stage, rules)
    per_slot = kv_priced_bytes(geom, page, rules) * layers.total + (
        settings.ring_c4
        / page
        * (2 * 2 * geom.head_dim * sdb + 2 * 2 * geom.index_head_dim * sdb)
        * layers.c4
    )
    if settings.speculative and layers.total:
        per_slot *= (layers.total + 1) / layers.total
    return cap * per_slot


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


def c128_state_fixed_bytes(
    geom: ModelGeometry,
    stage: StageSlice,
    settings: DeploymentSettings,
    rules: ReleaseRules = NEWEST,
) -> int:
    """From 0.5.15 the c128 compress state is not per token but a request-scoped fixed bias,
    taken off the budget first (``_get_c128_state_fixed_bytes``); 0 before."""
    if rules.c128_state != "fixed_bias":
        return 0
    width = c128_state_width_bytes(geom, settings, rules)
    return c128_state_rows_planned(settings) * width * stage.main.c128


def c2_state_fixed_bytes(
    geom: ModelGeometry, stage: StageSlice, settings: DeploymentSettings
) -> int:
    """V4.1 ratio-2 pending-pair state (``_get_c2_state_fixed_bytes``): per ratio-2 kv_source
    layer, ceil2((mrr+1)*ring2 + ring2 + 1) rows of fp32 (kv, score), 2 x head_dim wide."""
    if not stage.main.c2:
        return 0
    ring = RING_C2
    rows = (settings.max_running_requests + 1) * ring + ring + 1
    rows = -(-rows // 2) * 2
    return rows * 2 * geom.head_dim * FP32_BYTES * stage.main.c2


def low_ratio_padding_bytes(
    geom: ModelGeometry,
    stage: StageSlice,
    settings: DeploymentSettings,
    full: int,
    rules: ReleaseRules,
) -> float:
    """Reserved ratio-1/2 pages beyond the per-token bytes (``_get_low_ratio_kv_padding_bytes``):
    a full logical page of compressed latent, and the index pool's own page on top of the
    compressed logical page."""
    if not rules.low_ratio_paged:
        return 0.0
    page = settings.page_size
    low_index = indexer_bytes_per_token(geom.index_head_dim, "fp4")
    total = 0.0
    for ratio, n in ((1, stage.main.c1), (2, stage.main.c2)):
        if not n:
            continue
        main = page * kv_priced_bytes(geom, page // ratio, rules)
        index_size = (full + page) // ratio
        slots = -(-(index_size + V41_INDEX_PAGE) // V41_INDEX_PAGE) * V41_INDEX_PAGE
        total += (main + (slots - full // ratio) * low_index) * n
    return total


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

    def for_pool(self, pool: str) -> int:
        return {
            "swa_kv": self.swa,
            "c4_kv": self.c4,
            "c128_kv": self.c128,
            "c4_index_k": self.c128 * 32,
            "c4_state": self.c4_state,
            "c4_index_state": self.c4_state,
            "c128_state": self.c128_state,
            "c128_mtp_pending_lens": self.c128_state,
            "c1_kv": self.full,
            "c1_index_k": self.full,
            "c2_kv": self.full // 2,
            "c2_index_k": self.full // 2,
            "c2_state": self.c2_state,
        }[pool]


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


def full_tokens_for_budget(
    available_bytes: int,
    fixed_bytes: float,
    coefficient: float,
    page: int,
    padding: Callable[[int], float] | None = None,
) -> int:
    """int((available - fixed biases) / bytes_per_full_token), aligned down to the page; then,
    with V4.1 low-ratio layers, whole pages removed until their reserved pages fit too."""
    usable = max(available_bytes - fixed_bytes, 0)
    full = align_down(int(usable / coefficient), page) if usable > 0 else 0
    if padding is not None:
        while full > 0 and full * coefficient + padding(full) > usable:
            full -= page
    if full <= 0:
        raise BudgetError(
            f"available bytes {available_bytes} leave no page of tokens after the fixed biases "
            f"(c128/c2 state and a cap-mode SWA pool, {fixed_bytes:.0f} bytes) at "
            f"{coefficient:.2f} B per token: raise mem_fraction_static or lower "
            "max_running_requests (in SWA cap mode also --swa-prefix-tails)"
        )
    return full


def available_bytes_from_gpu(
    gpu_memory_bytes: int, weights_bytes: int, mem_fraction_static: float
) -> int:
    """SGLang's budget: free memory after weights minus the (1 - mem_fraction_static) reserve.

    Free-after-weights is approximated as total - weights (CUDA context and NCCL buffers make
    the real figure a little smaller; pass --available-bytes when you know it).
    """
    if not 0.0 < mem_fraction_static < 1.0:
        raise BudgetError(f"mem_fraction_static must be in (0, 1), got {mem_fraction_static}")
    reserve = gpu_memory_bytes * (1.0 - mem_fraction_static)
    return int(gpu_memory_bytes - weights_bytes - reserve)
