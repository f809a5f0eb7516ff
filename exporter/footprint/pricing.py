"""The pool configurator's side: bytes per full-pool token, fixed biases, and budget -> tokens.

This reproduces SGLang's DSV4 pool configurator (``DSV4PoolConfigurator`` in
``sglang/srt/model_executor/pool_configurator.py``) term by term, under the rules of the
release it is given (:mod:`exporter.footprint.releases`; docs/footprint.md). On top of the
release, two pricings of the c4 index-K cache: ``legacy`` prices it as fp8 whatever the device
pool stores (every upstream release on NVIDIA, and the bf16 forks' bug), ``fixed`` prices it
by its real dtype (the forks' fix). Every term is kept by name so that an operator can see
which pool a number comes from; what each pool costs is its row of the pool table
(:mod:`exporter.footprint.pools`), which this module sums as the configurator does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from exporter.footprint.buffers import (
    FP32_BYTES,
    INT64_BYTES,
    KV_PAGE_ALIGN,
    RING_C2,
    V41_INDEX_PAGE,
    TokenCounts,
    align_down,
    c128_state_rows_planned,
    c128_state_width_bytes,
    counts_for_full_tokens,
    indexer_bytes_per_token,
    kv_bytes_per_token,
    kv_page_bytes,
    kv_priced_bytes,
    priced_index_k_dtype,
    priced_layers,
    resolved_max_running_requests,
    state_bytes,
    stored_index_k_dtype,
    swa_cap_tokens,
)
from exporter.footprint.geometry import ModelGeometry, StageSlice
from exporter.footprint.pools import POOLS_BY_NAME, PoolContext, pools_in
from exporter.footprint.releases import NEWEST, ReleaseRules
from exporter.footprint.settings import DeploymentSettings, IndexKDtype

# The byte sizes and token counts are stated once, in buffers.py; importers of this module
# (the model, tests/conformance) keep reaching them here.
__all__ = [
    "FP32_BYTES",
    "INT64_BYTES",
    "KV_PAGE_ALIGN",
    "RING_C2",
    "V41_INDEX_PAGE",
    "BudgetError",
    "TokenCoefficient",
    "TokenCounts",
    "align_down",
    "available_bytes_from_gpu",
    "c128_state_fixed_bytes",
    "c128_state_rows_planned",
    "c128_state_width_bytes",
    "counts_for_full_tokens",
    "fixed_bias_bytes",
    "full_tokens_for_budget",
    "indexer_bytes_per_token",
    "kv_bytes_per_token",
    "kv_page_bytes",
    "kv_priced_bytes",
    "low_ratio_padding_bytes",
    "priced_index_k_dtype",
    "priced_layers",
    "resolved_max_running_requests",
    "speculative_factor",
    "state_bytes",
    "stored_index_k_dtype",
    "swa_cap_fixed_bytes",
    "swa_cap_tokens",
    "swa_slot_bytes",
    "token_coefficient",
]


class BudgetError(ValueError):
    """The budget cannot hold even the fixed biases and one page of tokens."""


@dataclass(frozen=True)
class TokenCoefficient:
    """Bytes one full-pool token costs, per pool, for one pricing of the index-K cache."""

    terms: dict[str, float]  # pool -> bytes per full token, speculative inflation included
    speculative_factor: float

    @property
    def total(self) -> float:
        return sum(self.terms.values())


def speculative_factor(ctx: PoolContext) -> float:
    """With speculative decoding every per-token term is inflated by (L + 1) / L, L the priced
    layers: the draft (MTP) layer's share of the pools."""
    total = ctx.priced.total
    return (total + 1) / total if ctx.settings.speculative and total else 1.0


def token_coefficient(
    geom: ModelGeometry,
    stage: StageSlice,
    settings: DeploymentSettings,
    index_k_dtype: IndexKDtype,
    rules: ReleaseRules = NEWEST,
) -> TokenCoefficient:
    """The configurator's per-full-token coefficient for one stage, term by term: every pool
    row with a per-token price under these rules (cap mode moves the SWA-sized pools out of
    it and into a fixed bias, :func:`swa_cap_fixed_bytes`)."""
    ctx = PoolContext(geom, stage, settings, rules, index_k_dtype)
    factor = speculative_factor(ctx)
    terms = {}
    for pool in pools_in(ctx):
        price = pool.price(ctx)
        if price is not None:
            terms[pool.name] = price * factor
    return TokenCoefficient(terms, factor)


def swa_slot_bytes(
    geom: ModelGeometry,
    stage: StageSlice,
    settings: DeploymentSettings,
    rules: ReleaseRules = NEWEST,
) -> dict[str, float]:
    """What one SWA slot costs per pool (``_get_bytes_per_swa_token``, 0.5.21+): the SWA
    latent on every layer plus the c4 (and c4 indexer) compress state, ring4 / page_size rows
    per slot; speculative inflation included."""
    ctx = PoolContext(geom, stage, settings, rules)
    factor = speculative_factor(ctx)
    return {p.name: p.swa_slot(ctx) * factor for p in pools_in(ctx) if p.swa_slot is not None}


def swa_cap_fixed_bytes(
    geom: ModelGeometry,
    stage: StageSlice,
    settings: DeploymentSettings,
    rules: ReleaseRules = NEWEST,
) -> float:
    """The cap-mode SWA pool as a fixed bias (``_get_swa_fixed_bytes``):
    swa_cap_tokens x bytes per SWA slot, summed in SGLang's order; 0 in ratio mode."""
    ctx = PoolContext(geom, stage, settings, rules)
    cap = ctx.cap
    if cap is None:
        return 0.0
    # The slot prices are whole multiples of a power-of-two fraction: their sum is exact.
    per_slot = sum(p.swa_slot(ctx) for p in pools_in(ctx) if p.swa_slot is not None)
    return cap * (per_slot * speculative_factor(ctx))


def c128_state_fixed_bytes(
    geom: ModelGeometry,
    stage: StageSlice,
    settings: DeploymentSettings,
    rules: ReleaseRules = NEWEST,
) -> int:
    """From 0.5.15 the c128 compress state is not per token but a request-scoped fixed bias,
    taken off the budget first (``_get_c128_state_fixed_bytes``); 0 before."""
    return POOLS_BY_NAME["c128_state"].fixed(PoolContext(geom, stage, settings, rules))


def fixed_bias_bytes(ctx: PoolContext) -> float:
    """``calculate_pool_sizes``' fixed biases, summed in SGLang's order: the request-scoped
    pools' (c128 state, c2 state) in table order, then the cap-mode SWA pool."""
    bias: float = sum(p.fixed(ctx) for p in pools_in(ctx))
    return bias + swa_cap_fixed_bytes(ctx.geom, ctx.stage, ctx.settings, ctx.rules)


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
    ctx = PoolContext(geom, stage, settings, rules)
    return float(sum(p.reserved(ctx, full) for p in pools_in(ctx) if p.reserved is not None))


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
