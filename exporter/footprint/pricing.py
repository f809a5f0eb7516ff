"""The pool configurator's side: bytes per full-pool token, fixed biases, and budget -> tokens.

This reproduces SGLang's DSV4 pool configurator term by term (dsv4-memory.md §2-3), in two
variants: ``legacy`` prices the c4 index-K cache as fp8 whatever the device pool stores (the
bug), ``fixed`` prices it by its real dtype. Every term is kept by name so that an operator
can see which pool a number comes from.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from exporter.footprint.geometry import ModelGeometry, StageSlice
from exporter.footprint.settings import Configurator, DeploymentSettings, IndexKDtype

PER_TOKEN_POOLS = ("swa_kv", "c4_kv", "c128_kv", "c4_index_k", "c4_state", "c4_index_state")
POOLS = (*PER_TOKEN_POOLS, "c128_state")

KV_QUANT_BLOCK = 64  # NoPE fp8 scale granularity
KV_SCALE_PAD = 1
INDEX_QUANT_BLOCK = 128


class BudgetError(ValueError):
    """The budget cannot hold even the fixed biases and one page of tokens."""


def kv_bytes_per_token(geom: ModelGeometry) -> int:
    """fp8 NoPE + bf16 RoPE + one scale byte per 64 NoPE values + 1 pad = 584 for DSV4."""
    nope = geom.qk_nope_head_dim
    return nope + 2 * geom.qk_rope_head_dim + nope // KV_QUANT_BLOCK + KV_SCALE_PAD


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
) -> TokenCoefficient:
    """The configurator's per-full-token coefficient for one stage, term by term."""
    kv = kv_bytes_per_token(geom)
    r = settings.swa_full_tokens_ratio
    sdb = settings.state_dtype_bytes
    L, L4, L128 = stage.main.total, stage.main.c4, stage.main.c128
    ring_share = settings.ring_c4 / geom.sliding_window
    hisparse = settings.hisparse_ratio or 1.0
    terms = {
        "swa_kv": r * kv * L,
        "c4_kv": kv / 4 * L4 / hisparse,
        "c128_kv": kv / 128 * L128,
        "c4_index_k": indexer_bytes_per_token(geom.index_head_dim, index_k_dtype) / 4 * L4,
        "c4_state": r * ring_share * (2 * 2 * geom.head_dim * sdb) * L4,
        "c4_index_state": r * ring_share * (2 * 2 * geom.index_head_dim * sdb) * L4,
    }
    factor = (L + 1) / L if settings.speculative and L else 1.0
    return TokenCoefficient({k: v * factor for k, v in terms.items()}, factor)


def c128_state_rows_planned(settings: DeploymentSettings) -> int:
    """Rows of the request-scoped c128 state: ceil128((mrr+1)*ring + ring + 1)."""
    ring = settings.ring_c128
    return math.ceil(((settings.max_running_requests + 1) * ring + ring + 1) / 128) * 128


def c128_state_width_bytes(geom: ModelGeometry, settings: DeploymentSettings) -> int:
    """kv+score (2 x head_dim) per row, or (max, sum, kv) = 3 x head_dim with online compress."""
    width = 3 * geom.head_dim if settings.online_compress else 2 * geom.head_dim
    return width * settings.state_dtype_bytes


def c128_state_fixed_bytes(
    geom: ModelGeometry, stage: StageSlice, settings: DeploymentSettings
) -> int:
    """The c128 compress state is not per token: a fixed bias taken off the budget first."""
    return (
        c128_state_rows_planned(settings) * c128_state_width_bytes(geom, settings) * stage.main.c128
    )


@dataclass(frozen=True)
class TokenCounts:
    """Token (slot) counts of every pool, as the configurator derives them."""

    full: int
    swa: int
    c4: int
    c128: int
    c4_state: int
    c128_state: int

    def for_pool(self, pool: str) -> int:
        return {
            "swa_kv": self.swa,
            "c4_kv": self.c4,
            "c128_kv": self.c128,
            "c4_index_k": self.c128 * 32,
            "c4_state": self.c4_state,
            "c4_index_state": self.c4_state,
            "c128_state": self.c128_state,
        }[pool]


def align_down(n: int, page: int) -> int:
    return n // page * page


def counts_for_full_tokens(
    geom: ModelGeometry, settings: DeploymentSettings, full_tokens: int
) -> TokenCounts:
    """Derive every sub-pool's size from the full-pool token count, as the configurator does."""
    page = settings.page_size
    swa = align_down(int(full_tokens * settings.swa_full_tokens_ratio), page)
    return TokenCounts(
        full=full_tokens,
        swa=swa,
        c4=full_tokens // 4,
        c128=full_tokens // 128,
        c4_state=swa // geom.sliding_window * settings.ring_c4,
        c128_state=(settings.max_running_requests + 1) * settings.ring_c128,
    )


def full_tokens_for_budget(
    available_bytes: int, fixed_bytes: int, coefficient: float, page: int
) -> int:
    """floor((available - fixed biases) / bytes_per_full_token), aligned down to the page."""
    usable = available_bytes - fixed_bytes
    if usable <= 0:
        raise BudgetError(
            f"available bytes {available_bytes} do not cover the fixed c128 state "
            f"({fixed_bytes} bytes): raise mem_fraction_static or lower max_running_requests"
        )
    return align_down(int(usable // coefficient), page)


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
