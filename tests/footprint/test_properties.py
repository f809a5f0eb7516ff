"""Properties that must hold for any deployment (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.footprint import (
    PRESETS,
    DeploymentSettings,
    plan_for_budget,
    pp_partition,
    stage_slice,
)
from exporter.footprint.pricing import token_coefficient
from exporter.units import GIB

models = st.sampled_from(sorted(PRESETS))
budgets = st.integers(min_value=40 * GIB, max_value=120 * GIB)  # covers the c128 bias
deployments = st.builds(
    DeploymentSettings,
    swa_full_tokens_ratio=st.sampled_from([0.05, 0.1, 0.2, 0.5]),
    max_running_requests=st.integers(1, 512),
    compress_state_dtype=st.sampled_from(["float32", "bfloat16"]),
    speculative=st.booleans(),
    online_compress=st.booleans(),
)


def _with(s: DeploymentSettings, **kw) -> DeploymentSettings:
    d = {f: getattr(s, f) for f in s.__dataclass_fields__}
    d.update(kw)
    return DeploymentSettings(**d)


@given(models, deployments)
def test_fixed_ge_legacy_for_bf16_equal_for_fp8(model, s):
    g = PRESETS[model]
    stage = stage_slice(g)
    legacy = token_coefficient(g, stage, _with(s, index_k_dtype="bf16"), "fp8").total
    fixed_bf16 = token_coefficient(g, stage, _with(s, index_k_dtype="bf16"), "bf16").total
    fixed_fp8 = token_coefficient(g, stage, _with(s, index_k_dtype="fp8"), "fp8").total
    assert fixed_bf16 > legacy
    assert fixed_fp8 == legacy


@given(models, deployments)
def test_dtype_order(model, s):
    g = PRESETS[model]
    stage = stage_slice(g)
    fp4, fp8, bf16 = (token_coefficient(g, stage, s, d).total for d in ("fp4", "fp8", "bf16"))
    assert fp4 < fp8 < bf16


@given(models, deployments, budgets, budgets)
def test_tokens_monotone_in_budget(model, s, b1, b2):
    lo, hi = sorted((b1, b2))
    g = PRESETS[model]
    for cfg in ("legacy", "fixed"):
        assert (
            plan_for_budget(g, s, cfg, lo).full_tokens <= plan_for_budget(g, s, cfg, hi).full_tokens
        )


@given(models, deployments, budgets, st.sampled_from(["fp8", "bf16", "fp4"]))
def test_allocation_ge_plan_when_priced_correctly(model, s, budget, dtype):
    """Priced by its real dtype, every per-token pool allocates at least its plan (padding,
    extra page, null slot), up to the page alignment of the SWA and state pools; the fixed
    c128 state is exact. Speculation over-prices by design, so it is excluded here."""
    s = _with(s, index_k_dtype=dtype, speculative=False)
    fp = plan_for_budget(PRESETS[model], s, "fixed", budget)
    for name in ("c4_kv", "c128_kv", "c4_index_k"):
        p = fp.pools[name]
        assert p.allocated_bytes >= p.planned_bytes, name
    assert fp.pools["c128_state"].overcommit_bytes <= 0
    assert fp.overcommit_bytes > 0


@settings(max_examples=60)
@given(models, st.integers(1, 8), deployments)
def test_pp_slices_sum_to_whole(model, pp, s):
    g = PRESETS[model]
    assert sum(pp_partition(g.num_hidden_layers, pp)) == g.num_hidden_layers
    whole = token_coefficient(g, stage_slice(g), _with(s, speculative=False), "fp8")
    parts = [
        token_coefficient(g, stage_slice(g, pp, r), _with(s, speculative=False), "fp8")
        for r in range(pp)
    ]
    for pool, v in whole.terms.items():
        assert abs(sum(p.terms[pool] for p in parts) - v) < 1e-6 * max(1.0, v)
    slices = [stage_slice(g, pp, r) for r in range(pp)]
    assert [sl.start for sl in slices[1:]] == [sl.end for sl in slices[:-1]]
    assert sum(sl.main.total for sl in slices) == g.num_hidden_layers
