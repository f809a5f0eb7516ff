"""The DeepSeek-V4 sub-pools as one table: a row per sub-pool, read by pricing, allocation and
the model alike, so that a release which adds a pool is one row here.

Each :class:`Pool` row says what SGLang does with one sub-pool of ``DeepSeekV4TokenToKVPool``
(``deepseek_v4_memory_pool.py``) and how ``DSV4PoolConfigurator`` (``pool_configurator.py``)
plans for it:

* ``since`` / ``until``: the releases it exists in; ``exists``: the model, stage or switch
  it needs beyond the release (V4.1's ratio-1/2 layers, online compress with MTP);
* ``price``: bytes per full-pool token in the configurator's coefficient (before the
  speculative inflation, which is the coefficient's), None where the pool is not priced per
  token under those rules; ``swa_slot``: bytes per SWA slot where SWA cap mode (0.5.21+)
  makes the SWA-sized pools a fixed slot count;
* ``fixed``: the request-scoped bias taken off the budget before tokens are counted;
  ``reserved``: pages reserved beyond the per-token bytes, for a given full-token count;
* ``tokens``: its slot count from the configurator's counts; ``allocation``: (bytes of one
  tensor, tensors) the device pool allocates for them.

Table order is SGLang's allocation order, the order the caching allocator sees the tensors in
(:mod:`exporter.footprint.device_bytes`), and the order the coefficient's terms are summed in.
docs/footprint.md ("Pools") is generated from this table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from exporter.footprint.buffers import (
    FP32_BYTES,
    INT64_BYTES,
    RING_C2,
    V41_INDEX_PAGE,
    TokenCounts,
    c128_state_rows_planned,
    c128_state_width_bytes,
    indexer_bytes_per_token,
    kv_bytes_per_token,
    kv_page_bytes,
    kv_priced_bytes,
    pages,
    priced_layers,
    state_bytes,
    state_rows,
    swa_cap_tokens,
)
from exporter.footprint.geometry import LayerCounts, ModelGeometry, StageSlice
from exporter.footprint.releases import RULES, ReleaseRules
from exporter.footprint.settings import DeploymentSettings, IndexKDtype

Release = tuple[int, int, int]
FIRST: Release = RULES[0].first  # the first release with DSV4 pools


@dataclass(frozen=True)
class PoolContext:
    """One stage of one deployment under one release's rules: what every row is computed from.

    ``index_k_dtype`` is the dtype in play: the one the configurator believes when pricing
    (``priced_index_k_dtype``), the one the pool stores when allocating."""

    geom: ModelGeometry
    stage: StageSlice
    settings: DeploymentSettings
    rules: ReleaseRules
    index_k_dtype: IndexKDtype = "fp8"
    include_draft: bool = True

    @property
    def page(self) -> int:
        return self.settings.page_size

    @property
    def priced(self) -> LayerCounts:
        """The layers the configurator prices (all of ``compress_ratios`` in 0.5.12)."""
        return priced_layers(self.geom, self.stage, self.rules)

    @property
    def sdb(self) -> int:
        return state_bytes(self.settings, self.rules)

    @property
    def cap(self) -> int | None:
        return swa_cap_tokens(self.geom, self.settings, self.rules)

    @property
    def swa_ratio(self) -> float:
        """SWA slots per full token in the coefficient: 0 in cap mode, where the SWA-sized
        pools are a fixed bias instead (0.5.21+ ``_get_bytes_per_full_token``)."""
        return 0.0 if self.cap is not None else self.settings.swa_full_tokens_ratio

    @property
    def c4_ring_share(self) -> float:
        """c4 compress-state rows per SWA slot: ring4 per window up to 0.5.20, per page after."""
        unit = self.geom.sliding_window if self.rules.c4_state_unit == "window" else self.page
        return self.settings.ring_c4 / unit

    @property
    def allocated(self) -> LayerCounts:
        """Layers holding a tensor of each pool on this rank: the stage's own, plus the draft
        (MTP) worker's with speculative decoding (its pools sized with the same counts)."""
        draft = self.stage.draft if self.settings.speculative and self.include_draft else None
        main = self.stage.main
        if draft is None:
            return main
        return LayerCounts(
            main.swa_only + draft.swa_only,
            main.c4 + draft.c4,
            main.c128 + draft.c128,
            main.low_ratio + draft.low_ratio,
            main.c1 + draft.c1,
            main.c2 + draft.c2,
        )

    @property
    def has_draft(self) -> bool:
        return self.settings.speculative and self.include_draft and self.stage.draft.total > 0

    @property
    def c4_state_row_bytes(self) -> int:
        """(kv, score) x 2 x head_dim per c4 compress-state row."""
        return 2 * 2 * self.geom.head_dim * self.sdb

    @property
    def c4_index_state_row_bytes(self) -> int:
        return 2 * 2 * self.geom.index_head_dim * self.sdb


def _always(ctx: PoolContext) -> bool:
    return True


def _unpriced(ctx: PoolContext) -> float | None:
    return None


def _no_fixed(ctx: PoolContext) -> int:
    return 0


@dataclass(frozen=True)
class Pool:
    """One sub-pool: where it exists, what the configurator plans for it, what it allocates."""

    name: str
    summary: str
    sized: str  # its slot count, in words (docs)
    tokens: Callable[[TokenCounts], int]
    allocation: Callable[[PoolContext, TokenCounts], tuple[int, int]]
    since: Release = FIRST
    until: Release | None = None
    exists: Callable[[PoolContext], bool] = _always
    needs: str = ""  # what ``exists`` asks for, in words (docs)
    price: Callable[[PoolContext], float | None] = _unpriced
    swa_slot: Callable[[PoolContext], float] | None = None
    fixed: Callable[[PoolContext], int] = _no_fixed
    reserved: Callable[[PoolContext, int], int] | None = None

    @property
    def planned_as(self) -> tuple[str, ...]:
        """How the configurator plans for it, from which of its rules the row has."""
        out = []
        if self.price is not _unpriced:
            out.append("per full token")
        if self.swa_slot is not None:
            out.append("per SWA slot in cap mode")
        if self.fixed is not _no_fixed:
            out.append("fixed bias")
        if self.reserved is not None:
            out.append("reserved pages")
        return tuple(out) or ("not planned",)

    def in_release(self, rules: ReleaseRules) -> bool:
        return self.since <= rules.first and (self.until is None or rules.last <= self.until)

    def present(self, ctx: PoolContext) -> bool:
        return self.in_release(ctx.rules) and self.exists(ctx)


# --- SWA, c4 and c128 (every release) ------------------------------------------------------


def _swa_kv_price(c: PoolContext) -> float:
    return c.swa_ratio * kv_priced_bytes(c.geom, c.page, c.rules) * c.priced.total


def _swa_kv_slot(c: PoolContext) -> float:
    return kv_priced_bytes(c.geom, c.page, c.rules) * c.priced.total


def _swa_kv_alloc(c: PoolContext, n: TokenCounts) -> tuple[int, int]:
    p = pages(n.swa, c.page, c.rules.kv_reserve, c.page)
    return p * kv_page_bytes(c.geom, c.page), c.allocated.total


def _c4_kv_price(c: PoolContext) -> float:
    hisparse = c.settings.hisparse_ratio or 1.0
    return kv_priced_bytes(c.geom, c.page // 4, c.rules) / 4 * c.priced.c4 / hisparse


def _c4_kv_alloc(c: PoolContext, n: TokenCounts) -> tuple[int, int]:
    p = pages(n.c4, c.page // 4, c.rules.kv_reserve, c.page)
    return p * kv_page_bytes(c.geom, c.page // 4), c.allocated.c4


def _c128_kv_price(c: PoolContext) -> float:
    return kv_priced_bytes(c.geom, c.page // 128, c.rules) / 128 * c.priced.c128


def _c128_kv_alloc(c: PoolContext, n: TokenCounts) -> tuple[int, int]:
    p = pages(n.c128, c.page // 128, c.rules.kv_reserve, c.page)
    return p * kv_page_bytes(c.geom, c.page // 128), c.allocated.c128


def _c4_index_k_price(c: PoolContext) -> float:
    return indexer_bytes_per_token(c.geom.index_head_dim, c.index_k_dtype) / 4 * c.priced.c4


def _c4_index_k_alloc(c: PoolContext, n: TokenCounts) -> tuple[int, int]:
    ib = indexer_bytes_per_token(c.geom.index_head_dim, c.index_k_dtype)
    p = pages(n.c128 * 32, c.page // 4, c.rules.index_reserve, c.page)
    return p * (c.page // 4) * ib, c.allocated.c4


def _c4_state_price(c: PoolContext) -> float:
    return c.swa_ratio * c.c4_ring_share * c.c4_state_row_bytes * c.priced.c4


def _c4_state_slot(c: PoolContext) -> float:
    return c.settings.ring_c4 / c.page * c.c4_state_row_bytes * c.priced.c4


def _c4_state_alloc(c: PoolContext, n: TokenCounts) -> tuple[int, int]:
    rows = state_rows(n.c4_state, c.settings.ring_c4, 4)
    return rows * c.c4_state_row_bytes, c.allocated.c4


def _c4_index_state_price(c: PoolContext) -> float:
    return c.swa_ratio * c.c4_ring_share * c.c4_index_state_row_bytes * c.priced.c4


def _c4_index_state_slot(c: PoolContext) -> float:
    return c.settings.ring_c4 / c.page * c.c4_index_state_row_bytes * c.priced.c4


def _c4_index_state_alloc(c: PoolContext, n: TokenCounts) -> tuple[int, int]:
    rows = state_rows(n.c4_state, c.settings.ring_c4, 4)
    return rows * c.c4_index_state_row_bytes, c.allocated.c4


def _c128_state_price(c: PoolContext) -> float | None:
    """0.5.12-0.5.14 price c128 state per SWA token (times 1 + draft tokens with online
    compress and MTP, 0.5.14: one bank per draft); from 0.5.15 it is a fixed bias instead."""
    if c.rules.c128_state != "per_swa_token":
        return None
    s = c.settings
    ring128_share = s.ring_c128 / c.geom.sliding_window * (1 + s.online_mtp_banks)
    width = c128_state_width_bytes(c.geom, s, c.rules)
    return c.swa_ratio * ring128_share * width * c.priced.c128


def _c128_state_fixed(c: PoolContext) -> int:
    """0.5.15+ ``_get_c128_state_fixed_bytes``: request-scoped rows x width x c128 layers."""
    if c.rules.c128_state != "fixed_bias":
        return 0
    width = c128_state_width_bytes(c.geom, c.settings, c.rules)
    return c128_state_rows_planned(c.settings) * width * c.stage.main.c128


def _c128_state_alloc(c: PoolContext, n: TokenCounts) -> tuple[int, int]:
    s = c.settings
    rows = state_rows(n.c128_state, s.ring_c128, 128, online=s.online_compress)
    rows *= 1 + s.online_mtp_banks
    return rows * c128_state_width_bytes(c.geom, s, c.rules), c.allocated.c128


# --- DeepSeek-V4.1 ratio-1 / ratio-2 kv_source layers (0.5.21+) -----------------------------


def _low_kv_price(ratio: int) -> Callable[[PoolContext], float | None]:
    """Their latent per compressed token: the logical 584 B (0.5.21-0.5.22) or the page
    layout's bytes (0.5.23, ``_compressed_bytes_per_full_token``)."""

    def price(c: PoolContext) -> float | None:
        if not c.rules.low_ratio_paged:
            low_kv = float(kv_bytes_per_token(c.geom))
        else:
            low_kv = kv_priced_bytes(c.geom, c.page // ratio, c.rules)
        return low_kv / ratio * _low_layers(c.priced, ratio)

    return price


def _low_index_price(ratio: int) -> Callable[[PoolContext], float | None]:
    """An always-fp4 index-K slot per compressed token (force_fp4=True)."""

    def price(c: PoolContext) -> float | None:
        low_index = indexer_bytes_per_token(c.geom.index_head_dim, "fp4")
        return low_index / ratio * _low_layers(c.priced, ratio)

    return price


def _low_kv_reserved(ratio: int) -> Callable[[PoolContext, int], int]:
    """0.5.23 ``_get_low_ratio_kv_padding_bytes``: a full logical page of compressed latent."""

    def reserved(c: PoolContext, full: int) -> int:
        if not c.rules.low_ratio_paged:
            return 0
        main = c.page * kv_priced_bytes(c.geom, c.page // ratio, c.rules)
        return round(main * _low_layers(c.stage.main, ratio))

    return reserved


def _low_index_reserved(ratio: int) -> Callable[[PoolContext, int], int]:
    """The index pool's own 64-slot pages beyond the compressed tokens (0.5.23)."""

    def reserved(c: PoolContext, full: int) -> int:
        if not c.rules.low_ratio_paged:
            return 0
        low_index = indexer_bytes_per_token(c.geom.index_head_dim, "fp4")
        slots = -(-((full + c.page) // ratio + V41_INDEX_PAGE) // V41_INDEX_PAGE) * V41_INDEX_PAGE
        return (slots - full // ratio) * low_index * _low_layers(c.stage.main, ratio)

    return reserved


def _low_kv_alloc(ratio: int) -> Callable[[PoolContext, TokenCounts], tuple[int, int]]:
    """``kv_pools[ratio]``: full // ratio slots in pages of page_size // ratio."""

    def allocation(c: PoolContext, n: TokenCounts) -> tuple[int, int]:
        kv_page = c.page // ratio
        p = pages(n.full // ratio, kv_page, c.rules.kv_reserve, c.page)
        return p * kv_page_bytes(c.geom, kv_page), _low_layers(c.stage.main, ratio)

    return allocation


def _low_index_alloc(ratio: int) -> Callable[[PoolContext, TokenCounts], tuple[int, int]]:
    """``index_pools[ratio]``: (full + page) // ratio fp4 slots in 64-slot pages."""

    def allocation(c: PoolContext, n: TokenCounts) -> tuple[int, int]:
        fp4 = indexer_bytes_per_token(c.geom.index_head_dim, "fp4")
        size = (n.full + c.page) // ratio
        p = pages(size, V41_INDEX_PAGE, c.rules.index_reserve, V41_INDEX_PAGE)
        return p * V41_INDEX_PAGE * fp4, _low_layers(c.stage.main, ratio)

    return allocation


def _low_layers(layers: LayerCounts, ratio: int) -> int:
    return layers.c1 if ratio == 1 else layers.c2


def _has_low(ratio: int) -> Callable[[PoolContext], bool]:
    def exists(c: PoolContext) -> bool:
        return _low_layers(c.stage.main, ratio) > 0

    return exists


def _c2_state_fixed(c: PoolContext) -> int:
    """``_get_c2_state_fixed_bytes``: per ratio-2 kv_source layer, ceil2((mrr+1)*ring2 + ring2
    + 1) rows of fp32 (kv, score), 2 x head_dim wide."""
    rows = (c.settings.max_running_requests + 1) * RING_C2 + RING_C2 + 1
    rows = -(-rows // 2) * 2
    return rows * 2 * c.geom.head_dim * FP32_BYTES * c.stage.main.c2


def _c2_state_alloc(c: PoolContext, n: TokenCounts) -> tuple[int, int]:
    rows = state_rows(n.c2_state, RING_C2, 2)
    return rows * 2 * c.geom.head_dim * FP32_BYTES, c.stage.main.c2


def _low_ratio_pools(ratio: int) -> tuple[Pool, Pool]:
    """The latent and index pools of V4.1's ratio-``ratio`` kv_source layers (0.5.21+)."""
    full = "full" if ratio == 1 else f"full // {ratio}"
    alloc = "full + p" if ratio == 1 else f"(full + p) // {ratio}"
    needs = f"V4.1 ratio-{ratio} kv_source layers on the stage"
    return (
        Pool(
            f"c{ratio}_kv",
            f"V4.1 ratio-{ratio} latent",
            sized=f"`{full}`",
            tokens=lambda n: n.full // ratio,
            allocation=_low_kv_alloc(ratio),
            since=(0, 5, 21),
            exists=_has_low(ratio),
            needs=needs,
            price=_low_kv_price(ratio),
            reserved=_low_kv_reserved(ratio),
        ),
        Pool(
            f"c{ratio}_index_k",
            f"V4.1 ratio-{ratio} indexer keys, always fp4",
            sized=f"`{full}` (allocated `{alloc}`)",
            tokens=lambda n: n.full // ratio,
            allocation=_low_index_alloc(ratio),
            since=(0, 5, 21),
            exists=_has_low(ratio),
            needs=needs,
            price=_low_index_price(ratio),
            reserved=_low_index_reserved(ratio),
        ),
    )


# --- online compress with MTP (0.5.14+) ----------------------------------------------------


def _has_pending_lens(c: PoolContext) -> bool:
    """Made whenever online compress runs with SGLANG_EXPERIMENTAL_ONLINE_C128_MTP=1."""
    return c.settings.online_compress and c.settings.online_c128_mtp


def _pending_lens_alloc(c: PoolContext, n: TokenCounts) -> tuple[int, int]:
    """One int64 per request (0.5.14: max_num_reqs) or per c128 state slot (0.5.15+:
    online_c128_state_num_req_slots). Every DeepSeekV4TokenToKVPool makes its own
    (``__init__``), so the draft worker's pool adds a second one where it runs."""
    slots = n.requests if c.rules.c128_state == "per_swa_token" else n.c128_state
    return INT64_BYTES * slots, 2 if c.has_draft else 1


POOL_TABLE: tuple[Pool, ...] = (
    Pool(
        "swa_kv",
        "sliding-window latent, every layer",
        sized="`swa`: `int(full * r)` page-aligned, or the cap",
        tokens=lambda n: n.swa,
        allocation=_swa_kv_alloc,
        price=_swa_kv_price,
        swa_slot=_swa_kv_slot,
    ),
    Pool(
        "c4_kv",
        "ratio-4 compressed latent",
        sized="`full // 4`",
        tokens=lambda n: n.c4,
        allocation=_c4_kv_alloc,
        price=_c4_kv_price,
    ),
    Pool(
        "c128_kv",
        "ratio-128 compressed latent",
        sized="`full // 128`",
        tokens=lambda n: n.c128,
        allocation=_c128_kv_alloc,
        price=_c128_kv_price,
    ),
    Pool(
        "c4_index_k",
        "ratio-4 indexer keys (fp8, fp4 or the forks' bf16)",
        sized="`c128 * 32`",
        tokens=lambda n: n.c128 * 32,
        allocation=_c4_index_k_alloc,
        price=_c4_index_k_price,
    ),
    Pool(
        "c4_state",
        "ratio-4 compress state, ring4 rows per SWA window/page",
        sized="`swa // window * ring4` (to 0.5.20), `swa // p * ring4`",
        tokens=lambda n: n.c4_state,
        allocation=_c4_state_alloc,
        price=_c4_state_price,
        swa_slot=_c4_state_slot,
    ),
    Pool(
        "c4_index_state",
        "ratio-4 indexer compress state",
        sized="as c4_state",
        tokens=lambda n: n.c4_state,
        allocation=_c4_index_state_alloc,
        price=_c4_index_state_price,
        swa_slot=_c4_index_state_slot,
    ),
    Pool(
        "c128_state",
        "ratio-128 compress state: per SWA token to 0.5.14, request-scoped bias from 0.5.15",
        sized="`swa // window * ring128` (to 0.5.14), `(mrr + 1) * ring128`",
        tokens=lambda n: n.c128_state,
        allocation=_c128_state_alloc,
        price=_c128_state_price,
        fixed=_c128_state_fixed,
    ),
    *_low_ratio_pools(1),
    *_low_ratio_pools(2),
    Pool(
        "c2_state",
        "V4.1 ratio-2 pending-pair state, request-scoped bias",
        sized="`(mrr + 1) * 2`",
        tokens=lambda n: n.c2_state,
        allocation=_c2_state_alloc,
        since=(0, 5, 21),
        exists=_has_low(2),
        needs="V4.1 ratio-2 kv_source layers on the stage",
        fixed=_c2_state_fixed,
    ),
    Pool(
        "c128_mtp_pending_lens",
        "online compress with MTP: pending sequence lengths, one int64 per slot",
        sized="requests (0.5.14), c128 state slots (0.5.15+)",
        tokens=lambda n: n.c128_state,
        allocation=_pending_lens_alloc,
        since=(0, 5, 14),
        exists=_has_pending_lens,
        needs="online compress with `SGLANG_EXPERIMENTAL_ONLINE_C128_MTP=1`",
    ),
)
POOLS_BY_NAME: dict[str, Pool] = {p.name: p for p in POOL_TABLE}
# The pools of every release and stage (a row of its own in every plan, even with 0 tensors).
BASE_POOLS: tuple[str, ...] = tuple(
    p.name for p in POOL_TABLE if p.since == FIRST and p.until is None and p.exists is _always
)


def pools_in(ctx: PoolContext) -> tuple[Pool, ...]:
    """The rows this release, model, stage and switches have, in table order."""
    return tuple(p for p in POOL_TABLE if p.present(ctx))
