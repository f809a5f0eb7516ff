"""Plan vs allocation for one rank: the over-commit an operator needs to see, every term named."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from exporter.footprint.allocation import allocated_tensors
from exporter.footprint.device_bytes import DeviceBytes, pool_tensor_sizes, simulate
from exporter.footprint.geometry import ModelGeometry, StageSlice, stage_slice
from exporter.footprint.pools import PoolContext, pools_in
from exporter.footprint.pricing import (
    BudgetError,
    TokenCoefficient,
    c128_state_fixed_bytes,
    counts_for_full_tokens,
    fixed_bias_bytes,
    full_tokens_for_budget,
    low_ratio_padding_bytes,
    priced_index_k_dtype,
    stored_index_k_dtype,
    swa_cap_tokens,
    swa_slot_bytes,
    token_coefficient,
)
from exporter.footprint.refusals import Refused, config_refusals, size_refusals
from exporter.footprint.releases import NEWEST, ReleaseRules, RuleChoice
from exporter.footprint.settings import Configurator, DeploymentSettings


@dataclass(frozen=True)
class PoolFootprint:
    name: str
    tokens: int
    planned_bytes: int
    allocated_bytes: int

    @property
    def overcommit_bytes(self) -> int:
        return self.allocated_bytes - self.planned_bytes


@dataclass(frozen=True)
class Footprint:
    """One rank's pools under one configurator variant, for a given full-pool token count."""

    model: str
    stage: StageSlice
    settings: DeploymentSettings
    configurator: Configurator
    coefficients: dict[str, TokenCoefficient]  # "legacy" / "fixed"
    c128_state_fixed_bytes: int
    full_tokens: int
    pools: dict[str, PoolFootprint]
    rules: ReleaseRules = NEWEST
    available_bytes: int | None = None
    correct_full_tokens: int | None = None
    release: RuleChoice | None = None
    # SWA slots reserved in cap mode (0.5.21+, no --swa-full-tokens-ratio); None: ratio mode.
    swa_cap_tokens: int | None = None
    # What PyTorch's caching allocator takes for these pools' tensors (device_bytes.simulate):
    # allocated (memory_allocated) and reserved (memory_reserved, the cudaMalloc'd segments
    # NVML sees), beyond the tensors' own bytes that ``allocated_bytes`` sums.
    device: DeviceBytes | None = None

    @property
    def planned_bytes(self) -> int:
        return sum(p.planned_bytes for p in self.pools.values())

    @property
    def allocated_bytes(self) -> int:
        return sum(p.allocated_bytes for p in self.pools.values())

    @property
    def overcommit_bytes(self) -> int:
        return self.allocated_bytes - self.planned_bytes

    @property
    def device_overcommit_bytes(self) -> int | None:
        """Over-commit as the device sees it: the bytes PyTorch reserves for the pools (its
        segments, what NVML counts) minus what the configurator planned. Larger than
        :attr:`overcommit_bytes` by the allocator's rounding (0.10-0.13% on an H200)."""
        return None if self.device is None else self.device.reserved - self.planned_bytes

    @property
    def reclaimable_bytes(self) -> int:
        """Planned but never allocated (fp4 index-K priced as fp8 on NVIDIA): KV capacity the
        budget holds back for nothing. 0 when the plan is over-committed instead."""
        return max(0, -self.overcommit_bytes)

    @property
    def bytes_per_full_token(self) -> dict[str, float]:
        return {k: c.total for k, c in self.coefficients.items()}

    def to_json(self) -> dict[str, Any]:
        """The `plan --json` contract (issue 2), plus the terms that explain each number."""
        out: dict[str, Any] = {
            "model": self.model,
            "index_k_dtype": self.settings.index_k_dtype,
            "configurator": self.configurator,
            "sglang_version": self.release.version if self.release else None,
            "rules": self.rules.name,
            "rules_verified": self.release.verified if self.release else True,
            "bytes_per_full_token": {k: round(v, 4) for k, v in self.bytes_per_full_token.items()},
            "bytes_per_full_token_terms": {
                k: {p: round(b, 4) for p, b in c.terms.items()}
                for k, c in self.coefficients.items()
            },
            "c128_state_fixed_bytes": self.c128_state_fixed_bytes,
            "full_tokens": self.full_tokens,
            "pools": {
                name: {
                    "tokens": p.tokens,
                    "planned_bytes": p.planned_bytes,
                    "allocated_bytes": p.allocated_bytes,
                    "overcommit_bytes": p.overcommit_bytes,
                }
                for name, p in self.pools.items()
            },
            "planned_bytes": self.planned_bytes,
            "allocated_bytes": self.allocated_bytes,
            "overcommit_bytes": self.overcommit_bytes,
            "reclaimable_bytes": self.reclaimable_bytes,
            "correct_full_tokens": self.correct_full_tokens,
            "available_bytes": self.available_bytes,
            "stage": {
                "pp_rank": self.stage.pp_rank,
                "pp_size": self.stage.pp_size,
                "layers": [self.stage.start, self.stage.end],
                "swa_only": self.stage.main.swa_only,
                "c4": self.stage.main.c4,
                "c128": self.stage.main.c128,
                "draft_layers": self.stage.draft.total,
            },
            "settings": {
                "swa_full_tokens_ratio": self.settings.swa_full_tokens_ratio,
                "page_size": self.settings.page_size,
                "max_running_requests": self.settings.max_running_requests,
                "compress_state_dtype": self.settings.compress_state_dtype,
                "speculative": self.settings.speculative,
                "online_compress": self.settings.online_compress,
                "hisparse_ratio": self.settings.hisparse_ratio,
                "swa_ratio_explicit": self.settings.swa_ratio_explicit,
                "chunked_prefill_size": self.settings.chunked_prefill_size,
                "swa_prefix_tails": self.settings.swa_prefix_tails,
            },
            "swa_cap_tokens": self.swa_cap_tokens,
        }
        if self.device is not None:
            # Labelled as what they are: the tensors' bytes are what the pools hold; PyTorch's
            # caching allocator hands out (allocated) and cudaMallocs (reserved) more.
            out["device_bytes"] = {
                "tensors": self.device.tensors,
                "pytorch_allocated": self.device.allocated,
                "pytorch_reserved": self.device.reserved,
                "segments": self.device.segments,
                "overcommit_reserved_bytes": self.device_overcommit_bytes,
            }
        return out


def not_modelled(
    geom: ModelGeometry, settings: DeploymentSettings, rules: ReleaseRules | RuleChoice
) -> tuple[str, ...]:
    """Switches of this deployment whose footprint the model does not reproduce: where any
    is on, give no number (docs/footprint.md, "Switches that are not modelled")."""
    rule_set = rules.rules if isinstance(rules, RuleChoice) else rules
    found = list(settings.not_modelled)
    if settings.speculative and swa_cap_tokens(geom, settings, rule_set) is not None:
        found.append("swa-cap-mode")
    return tuple(found)


def _coefficients(
    geom: ModelGeometry, stage: StageSlice, settings: DeploymentSettings, rules: ReleaseRules
) -> dict[str, TokenCoefficient]:
    return {
        variant: token_coefficient(
            geom,
            stage,
            settings,
            priced_index_k_dtype(variant, stored_index_k_dtype(settings, rules)),
            rules,
        )
        for variant in ("legacy", "fixed")
    }


def footprint_for_tokens(
    geom: ModelGeometry,
    settings: DeploymentSettings,
    configurator: Configurator,
    full_tokens: int,
    stage: StageSlice | None = None,
    available_bytes: int | None = None,
    rules: ReleaseRules | RuleChoice = NEWEST,
) -> Footprint:
    """Plan and allocation for a known full-pool token count (e.g. SGLang's max_total_num_tokens).

    ``planned`` is what the chosen configurator variant budgeted for these tokens;
    ``allocated`` is what the device pool takes for them. With ``available_bytes`` (given,
    or recovered from the token count when None: the configurator spent its budget on these
    tokens to within one page), ``correct_full_tokens`` is what a dtype-true plan would give.
    """
    choice = rules if isinstance(rules, RuleChoice) else None
    rule_set = rules.rules if isinstance(rules, RuleChoice) else rules
    stage = stage or stage_slice(geom)
    coeffs = _coefficients(geom, stage, settings, rule_set)
    ctx = PoolContext(geom, stage, settings, rule_set)
    bias = c128_state_fixed_bytes(geom, stage, settings, rule_set)
    counts = counts_for_full_tokens(geom, settings, full_tokens, rule_set, stage)
    tensors = allocated_tensors(geom, stage, settings, counts, rule_set)
    alloc = {pool: per * n for pool, (per, n) in tensors.items()}
    plan_terms = coeffs[configurator].terms
    # Cap mode (0.5.21+): the SWA-sized pools are a fixed slot count, planned as a bias.
    cap = swa_cap_tokens(geom, settings, rule_set)
    cap_planned = (
        {p: cap * b for p, b in swa_slot_bytes(geom, stage, settings, rule_set).items()}
        if cap is not None
        else {}
    )
    pools = {}
    for pool in pools_in(ctx):
        name = pool.name
        planned = round(plan_terms.get(name, 0.0) * full_tokens + cap_planned.get(name, 0.0))
        # Reserved pages beyond the per-token bytes (V4.1 low-ratio pools), then the
        # request-scoped biases (c128 state from 0.5.15, V4.1 c2 state).
        if pool.reserved is not None:
            planned += pool.reserved(ctx, full_tokens)
        planned += pool.fixed(ctx)
        pools[name] = PoolFootprint(name, pool.tokens(counts), planned, alloc[name])
    budget = available_bytes
    if budget is None:
        budget = round(fixed_bias_bytes(ctx) + coeffs[configurator].total * full_tokens)
    try:
        correct: int | None = _full_tokens(
            geom, stage, settings, rule_set, budget, coeffs["fixed"].total
        )
    except BudgetError:
        correct = None
    return Footprint(
        model=geom.name,
        stage=stage,
        settings=settings,
        configurator=configurator,
        coefficients=coeffs,
        c128_state_fixed_bytes=bias,
        full_tokens=full_tokens,
        pools=pools,
        rules=rule_set,
        available_bytes=available_bytes,
        correct_full_tokens=correct,
        release=choice,
        swa_cap_tokens=cap,
        device=simulate(pool_tensor_sizes(tensors)),
    )


def plan_for_budget(
    geom: ModelGeometry,
    settings: DeploymentSettings,
    configurator: Configurator,
    available_bytes: int,
    stage: StageSlice | None = None,
    rules: ReleaseRules | RuleChoice = NEWEST,
) -> Footprint:
    """What SGLang does at start-up: budget -> full tokens (by the chosen variant) -> pools.

    Given a :class:`RuleChoice` (a release), a deployment that release refuses raises
    :class:`~exporter.footprint.refusals.Refused` naming SGLang's check, before or after
    sizing as SGLang decides it."""
    rule_set = rules.rules if isinstance(rules, RuleChoice) else rules
    stage = stage or stage_slice(geom)
    if isinstance(rules, RuleChoice):
        for refusal in config_refusals(geom, settings, stage, rules):
            raise Refused(refusal)
    coeffs = _coefficients(geom, stage, settings, rule_set)
    full = _full_tokens(
        geom, stage, settings, rule_set, available_bytes, coeffs[configurator].total
    )
    if isinstance(rules, RuleChoice):
        counts = counts_for_full_tokens(geom, settings, full, rule_set)
        cap = swa_cap_tokens(geom, settings, rule_set) is not None
        for refusal in size_refusals(settings, geom.sliding_window, counts.swa, cap, rules):
            raise Refused(refusal)
    return footprint_for_tokens(geom, settings, configurator, full, stage, available_bytes, rules)


def _full_tokens(
    geom: ModelGeometry,
    stage: StageSlice,
    settings: DeploymentSettings,
    rules: ReleaseRules,
    available_bytes: int,
    coefficient: float,
) -> int:
    """``calculate_pool_sizes``: budget minus the fixed biases (c128 state, c2 state, the
    cap-mode SWA pool, summed in SGLang's order), over the coefficient, then (V4.1) whole
    pages off until the pools' reserved pages (the low-ratio ones) fit."""
    ctx = PoolContext(geom, stage, settings, rules)
    padding = None
    if any(pool.reserved is not None for pool in pools_in(ctx)):

        def padding(full: int) -> float:
            return low_ratio_padding_bytes(geom, stage, settings, full, rules)

    return full_tokens_for_budget(
        available_bytes, fixed_bias_bytes(ctx), coefficient, settings.page_size, padding
    )


@dataclass(frozen=True)
class PipelinePlan:
    """Every PP stage of one deployment as SGLang sizes it at start-up: each stage's own
    capacity from the budget (``own_full_tokens``), the user cap and the MIN across stages
    (``full_tokens``), and each stage's pools re-sized to it (``stages``, by PP rank)."""

    stages: tuple[Footprint, ...]
    own_full_tokens: tuple[int, ...]
    full_tokens: int
    max_total_tokens: int | None = None

    @property
    def limiting_stages(self) -> tuple[int, ...]:
        """The PP ranks whose own capacity set the synced count (none when the user cap did)."""
        return tuple(r for r, own in enumerate(self.own_full_tokens) if own == self.full_tokens)


def plan_pipeline(
    geom: ModelGeometry,
    settings: DeploymentSettings,
    configurator: Configurator,
    available_bytes: int,
    rules: RuleChoice,
    pp_size: int = 1,
    partition: tuple[int, ...] | None = None,
    max_total_tokens: int | None = None,
) -> PipelinePlan:
    """What SGLang does at start-up on every PP stage, in its order: each stage's configurator
    sizes its own layers from the budget (``calculate_pool_sizes``; a refusal or a budget
    with no page of tokens on any stage stops the server), then ``_apply_token_constraints``
    caps the count at ``--max-total-tokens`` and all-reduces it with MIN across the PP ranks,
    and a stage whose count changed is re-sized from it (``calculate_pool_sizes_from_max_tokens``:
    aligned down to the page, the fixed pools not re-subtracted, the SWA floor checked again).
    The same in every release 0.5.12-0.5.23 (``model_runner_kv_cache_mixin.py`` up to 0.5.15,
    ``KVCacheConfigurator.config_from_budget`` from 0.5.16). Before issue 33 ``plan`` sized a
    rank alone: 0.5.21 V4-Flash PP 4 rank 0 at 37.7 GiB said 27,410,176 tokens where SGLang
    has 20,465,920."""
    rule_set = rules.rules
    stages = [stage_slice(geom, pp_size, r, partition=partition) for r in range(pp_size)]
    for stage in stages:
        for refusal in config_refusals(geom, settings, stage, rules):
            raise Refused(refusal)
    own = [plan_for_budget(geom, settings, configurator, available_bytes, s, rules) for s in stages]
    capacity = min(fp.full_tokens for fp in own)
    if max_total_tokens is not None:
        capacity = min(capacity, max_total_tokens)
    synced = capacity // settings.page_size * settings.page_size
    if synced <= 0:
        raise BudgetError(
            f"--max-total-tokens {max_total_tokens} leaves no page of "
            f"{settings.page_size} tokens (SGLang: no KV cache to serve from)"
        )
    cap = swa_cap_tokens(geom, settings, rule_set) is not None
    out = []
    for stage, fp in zip(stages, own, strict=True):
        if fp.full_tokens == synced:
            out.append(fp)
            continue
        counts = counts_for_full_tokens(geom, settings, synced, rule_set)
        for refusal in size_refusals(settings, geom.sliding_window, counts.swa, cap, rules):
            raise Refused(refusal)
        out.append(
            footprint_for_tokens(
                geom, settings, configurator, synced, stage, available_bytes, rules
            )
        )
    # What a dtype-true plan would give is synced the same way: the MIN of the stages' own
    # correctly-priced capacities (and the cap), never one stage's alone.
    correct = [fp.correct_full_tokens for fp in own]
    synced_correct = None
    if all(c is not None for c in correct):
        low = min(c for c in correct if c is not None)
        if max_total_tokens is not None:
            low = min(low, max_total_tokens)
        synced_correct = low // settings.page_size * settings.page_size
    out = [replace(fp, correct_full_tokens=synced_correct) for fp in out]
    return PipelinePlan(
        stages=tuple(out),
        own_full_tokens=tuple(fp.full_tokens for fp in own),
        full_tokens=synced,
        max_total_tokens=max_total_tokens,
    )
