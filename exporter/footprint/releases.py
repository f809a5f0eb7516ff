"""One rule set per range of SGLang releases: how that release's DSV4 pool configurator prices a
full-pool token and sizes its sub-pools.

Read from each released wheel's ``sglang/srt/model_executor/pool_configurator.py``
(``DSV4PoolConfigurator``) and ``sglang/srt/mem_cache/deepseek_v4_memory_pool.py``
(``DeepSeekV4TokenToKVPool``), and proven against them by ``tests/conformance``. Every switch
says which releases it holds for; docs/footprint.md has the formulas term by term.

A version is selected by its release number (``0.5.16``, ``0.5.12.post1``, ``0.5.23+sim``,
``0.5.20rc1`` all count as their release). Older than the first release with DSV4 pools is an
error; newer than the newest known is computed with the newest rules and flagged unverified,
never silently.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from exporter.versions import release_number

C128StatePricing = Literal["per_swa_token", "fixed_bias"]
KvPricing = Literal["logical", "page_layout"]
C4StateUnit = Literal["window", "swa_page"]
PageReserve = Literal["own_page", "global_page"]


class VersionError(ValueError):
    """A version string that names no SGLang release with DSV4 pools."""


def parse_release(version: str) -> tuple[int, int, int]:
    """The (major, minor, patch) of a version string; suffixes (.post1, rc1, +sim) ignored."""
    release = release_number(version)
    if release is None:
        raise VersionError(
            f"SGLang version {version!r} is not of the form X.Y.Z (e.g. 0.5.23): "
            "pass --sglang-version with a release number"
        )
    return release


@dataclass(frozen=True)
class ReleaseRules:
    """How one range of releases prices and sizes DSV4 pools (first..last inclusive)."""

    name: str
    first: tuple[int, int, int]
    last: tuple[int, int, int]
    # 0.5.12: the configurator prices cfg.compress_ratios whole (main and MTP entries, every
    # PP stage); 0.5.13+ prices only the stage's slice [start_layer, end_layer).
    prices_stage_slice: bool
    # 0.5.12-0.5.13 price (and allocate) compress state as float32; 0.5.14+ read
    # SGLANG_DSV4_COMPRESS_STATE_DTYPE (_get_dsv4_compress_state_dtype_sizes).
    state_dtype_from_env: bool
    # 0.5.12-0.5.14: c128 state is a per-token term, sized swa // window * ring128;
    # 0.5.15+: a request-scoped fixed bias, sized (mrr + 1) * ring128.
    c128_state: C128StatePricing
    # <=0.5.20: 584 B per latent token (nope + 2*rope + 8); 0.5.21+: the page layout's bytes,
    # layout.page_bytes(p) / p (585 / 585 / 864 B for SWA / c4 / c128 at page 256).
    kv_pricing: KvPricing
    # <=0.5.20: c4 state rows per SWA *window* (swa // window * ring4);
    # 0.5.21+: per SWA *page* (swa // page_size * ring4), priced ring4 / page_size per SWA slot.
    c4_state_unit: C4StateUnit
    # Device pool pages (DeepSeekV4SingleKVPool / DeepSeekV4IndexerPool): up to 0.5.20 every
    # sub-pool takes (size + page + 1) // page of its own pages; from 0.5.21 the compressed KV
    # pools (and from 0.5.22 the index-K pool) reserve the allocator's dummy *logical* page,
    # ceil((size + page_size) / physical_page) (_num_dsv4_physical_kv_pages).
    kv_reserve: PageReserve = "own_page"
    # --enable-deepseek-v4-fp4-indexer exists from 0.5.13; 0.5.12 stores fp8 index-K always.
    has_fp4_indexer: bool = True
    # DeepSeek-V4.1 ratio-1/2 layers (0.5.21+): 0.5.21-0.5.22 price their latent at the
    # logical 584 B with no reserved pages; 0.5.23 prices the page layout's bytes and removes
    # whole pages until the reserved low-ratio pages fit (_get_low_ratio_kv_padding_bytes).
    low_ratio_paged: bool = False
    index_reserve: PageReserve = "own_page"
    # SWA cap mode (0.5.21+, ``DSV4PoolConfigurator._resolve_swa_cap_tokens``): with
    # --swa-full-tokens-ratio not given, the SWA pool is a fixed page-aligned slot count
    # (request cap + prefix-tail headroom) taken off the budget as a bias, not a ratio of full.
    swa_cap_mode: bool = False
    # 0.5.15-0.5.20 subtract the bias from the budget without a floor; 0.5.21+ clamp at 0.
    # (Either way a budget below the bias yields no tokens.)
    # 0.5.21+: finalize_with_max_running_requests sizes c128 state with the stage's own ring
    # (ring_sizes.get(128, 0)): 0 rows on a PP stage without c128 layers.
    c128_ring_per_stage: bool = False
    # 0.5.21+: get_pp_indices ignores SGLANG_PP_LAYER_PARTITION when pp_size == 1.
    pp_partition_ignored_at_pp1: bool = False
    # --max-running-requests below the attention-DP size: per worker ``mrr // attn_dp_size`` is
    # 0 up to 0.5.22 (requested_max_running_requests_per_worker, resolve_max_num_reqs: a server
    # that admits no request); 0.5.23 floors it at 1 (``max(1, mrr // attn_dp_size)``).
    requests_per_worker_floor: int = 0

    @property
    def label(self) -> str:
        return self.name

    def covers(self, release: tuple[int, int, int]) -> bool:
        return self.first <= release <= self.last


# Each rule set is its predecessor plus what that release changed.
_R12 = ReleaseRules(
    name="0.5.12",
    first=(0, 5, 12),
    last=(0, 5, 12),
    prices_stage_slice=False,
    state_dtype_from_env=False,
    c128_state="per_swa_token",
    kv_pricing="logical",
    c4_state_unit="window",
    has_fp4_indexer=False,
)
_R13 = replace(
    _R12,
    name="0.5.13",
    first=(0, 5, 13),
    last=(0, 5, 13),
    prices_stage_slice=True,
    has_fp4_indexer=True,
)
_R14 = replace(_R13, name="0.5.14", first=(0, 5, 14), last=(0, 5, 14), state_dtype_from_env=True)
_R15 = replace(
    _R14, name="0.5.15-0.5.20", first=(0, 5, 15), last=(0, 5, 20), c128_state="fixed_bias"
)
_R21 = replace(
    _R15,
    name="0.5.21",
    first=(0, 5, 21),
    last=(0, 5, 21),
    kv_pricing="page_layout",
    c4_state_unit="swa_page",
    kv_reserve="global_page",
    swa_cap_mode=True,
    pp_partition_ignored_at_pp1=True,
    c128_ring_per_stage=True,
)
_R22 = replace(_R21, name="0.5.22", first=(0, 5, 22), last=(0, 5, 22), index_reserve="global_page")
_R23 = replace(
    _R22,
    name="0.5.23",
    first=(0, 5, 23),
    last=(0, 5, 23),
    low_ratio_paged=True,
    requests_per_worker_floor=1,
)


def release_name(release: tuple[int, int, int]) -> str:
    """(0, 5, 23) -> "0.5.23"."""
    return ".".join(str(n) for n in release)


# The release table: one rule set per range of releases, oldest first. The first and newest
# releases these rules know are read off it, so adding a rule set moves them with it.
RULES: tuple[ReleaseRules, ...] = (_R12, _R13, _R14, _R15, _R21, _R22, _R23)
NEWEST: ReleaseRules = RULES[-1]
NEWEST_RELEASE = release_name(NEWEST.last)
FIRST_RELEASE = release_name(RULES[0].first)
# Every published SGLang release with DSV4 pools (PyPI, post releases included): the one list
# tests/conformance runs each release's own code for, and the releases these rules cover
# (tests/footprint/test_releases.py holds it to RULES: each published release verified, each
# rule set covering one, the newest published being NEWEST_RELEASE).
PUBLISHED_RELEASES: tuple[str, ...] = (
    "0.5.12",
    "0.5.12.post1",
    "0.5.13",
    "0.5.13.post1",
    "0.5.14",
    "0.5.15",
    "0.5.15.post1",
    "0.5.16",
    "0.5.17",
    "0.5.18",
    "0.5.19",
    "0.5.20",
    "0.5.21",
    "0.5.22",
    "0.5.23",
)


@dataclass(frozen=True)
class RuleChoice:
    """The rules used for a version, and whether that version is one they were proven on."""

    version: str
    rules: ReleaseRules
    verified: bool

    @property
    def note(self) -> str:
        if self.verified:
            return f"SGLang {self.version}: rules {self.rules.name}"
        return (
            f"SGLang {self.version} is newer than {NEWEST_RELEASE}, the newest release these "
            f"rules were checked against: computed with rules {self.rules.name}, UNVERIFIED"
        )


def rules_for_version(version: str | None) -> RuleChoice:
    """The rule set of ``version`` (None: the newest supported release)."""
    if version is None:
        return RuleChoice(NEWEST_RELEASE, NEWEST, True)
    release = parse_release(version)
    for rules in RULES:
        if rules.covers(release):
            return RuleChoice(version, rules, True)
    if release > NEWEST.last:
        return RuleChoice(version, NEWEST, False)
    raise VersionError(
        f"SGLang {version} has no DeepSeek-V4 pools: {FIRST_RELEASE} is the first release "
        "with DSV4PoolConfigurator"
    )
