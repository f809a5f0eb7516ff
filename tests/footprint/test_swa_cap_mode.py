"""SWA cap mode (SGLang 0.5.21+, no --swa-full-tokens-ratio): the SWA pool is a fixed slot
count taken off the budget as a bias. Hand arithmetic here; tests/conformance proves the same
numbers against the released configurator and pool."""

from __future__ import annotations

import pytest

from exporter.footprint import PRESETS, DeploymentSettings, plan_for_budget, rules_for_version
from exporter.footprint.geometry import stage_slice
from exporter.footprint.pricing import (
    counts_for_full_tokens,
    swa_cap_fixed_bytes,
    swa_cap_tokens,
    swa_slot_bytes,
    token_coefficient,
)

FLASH = PRESETS["deepseek-v4-flash"]
R23 = rules_for_version("0.5.23").rules
R20 = rules_for_version("0.5.20").rules
CAP = DeploymentSettings(swa_ratio_explicit=False, max_running_requests=256)


def _by_hand(
    window: int, page: int, mrr: int, chunk: int, evict: int, tails: int, chunks: int
) -> int:
    cap = (window + evict + page + page) * mrr + chunks * chunk + page
    return -(-(cap + tails * (window + page)) // page) * page


def test_cap_tokens_follow_compute_swa_request_cap():
    w = FLASH.sliding_window
    assert swa_cap_tokens(FLASH, CAP, R23) == _by_hand(w, 256, 256, 8192, 128, 4 * 256, 2)
    no_radix = DeploymentSettings(swa_ratio_explicit=False, disable_radix_cache=True)
    assert swa_cap_tokens(FLASH, no_radix, R23) == _by_hand(w, 256, 256, 8192, 128, 0, 2)
    knobs = DeploymentSettings(
        swa_ratio_explicit=False,
        max_running_requests=10,
        chunked_prefill_size=16384,
        swa_prefix_tails=7,
        swa_eviction_interval=64,
        disable_overlap_schedule=True,
    )
    assert swa_cap_tokens(FLASH, knobs, R23) == _by_hand(w, 256, 10, 16384, 64, 7, 1)


@pytest.mark.parametrize(
    "settings,rules",
    [
        (DeploymentSettings(), R23),  # the operator gave a ratio
        (CAP, R20),  # no cap mode before 0.5.21
        (DeploymentSettings(swa_ratio_explicit=False, chunked_prefill_size=0), R23),
    ],
)
def test_ratio_mode_where_cap_mode_is_off(settings, rules):
    assert swa_cap_tokens(FLASH, settings, rules) is None
    assert swa_cap_fixed_bytes(FLASH, stage_slice(FLASH), settings, rules) == 0.0


def test_cap_mode_moves_swa_out_of_the_coefficient_into_the_bias():
    stage = stage_slice(FLASH)
    ratio = token_coefficient(FLASH, stage, DeploymentSettings(), "fp8", R23)
    cap = token_coefficient(FLASH, stage, CAP, "fp8", R23)
    for pool in ("swa_kv", "c4_state", "c4_index_state"):
        assert ratio.terms[pool] > 0 and cap.terms[pool] == 0
    slot = swa_slot_bytes(FLASH, stage, CAP, R23)
    tokens = swa_cap_tokens(FLASH, CAP, R23)
    assert tokens is not None
    assert swa_cap_fixed_bytes(FLASH, stage, CAP, R23) == pytest.approx(tokens * sum(slot.values()))
    fp = plan_for_budget(FLASH, CAP, "legacy", 50 << 30, stage, R23)
    counts = counts_for_full_tokens(FLASH, CAP, fp.full_tokens, R23)
    assert counts.swa == tokens == fp.swa_cap_tokens
    assert counts.c4_state == tokens // 256 * CAP.ring_c4
    # The SWA pool's plan is the cap's slots at the per-slot price, whatever the full count.
    assert fp.pools["swa_kv"].planned_bytes == round(tokens * slot["swa_kv"])
    assert fp.to_json()["swa_cap_tokens"] == tokens


def test_cap_larger_than_the_budget_is_a_clear_error():
    huge = DeploymentSettings(swa_ratio_explicit=False, max_running_requests=4096)
    with pytest.raises(ValueError, match="swa-prefix-tails"):
        plan_for_budget(FLASH, huge, "legacy", 4 << 30, stage_slice(FLASH), R23)
