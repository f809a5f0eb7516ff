"""Each configurator term and each allocation term, with the arithmetic written out by hand."""

from __future__ import annotations

import pytest

from exporter.footprint import (
    PRESETS,
    DeploymentSettings,
    footprint_for_tokens,
    indexer_bytes_per_token,
    kv_bytes_per_token,
    plan_for_budget,
    rules_for_version,
    stage_slice,
    token_coefficient,
)
from exporter.footprint.allocation import allocated_bytes, kv_page_bytes, pages, state_rows
from exporter.footprint.pricing import (
    c128_state_fixed_bytes,
    counts_for_full_tokens,
)
from exporter.units import GIB

# The hand arithmetic below is the formula of SGLang 0.5.15-0.5.20; other releases' rules are
# checked against the released code itself in tests/conformance.
R20 = rules_for_version("0.5.20").rules
FLASH = PRESETS["deepseek-v4-flash"]
PRO = PRESETS["deepseek-v4-pro"]


def test_flash_layer_mix():
    s = stage_slice(FLASH)
    # [0,0] + [4,128]*20 + [4] as main layers; the trailing 0 is the MTP entry.
    assert (s.main.swa_only, s.main.c4, s.main.c128) == (2, 21, 20)
    assert (s.draft.swa_only, s.draft.c4, s.draft.c128) == (1, 0, 0)


def test_pro_layer_mix():
    s = stage_slice(PRO)
    # [128,128] + [4,128]*29 + [4]: 29+1 c4, 2+29 c128.
    assert (s.main.swa_only, s.main.c4, s.main.c128) == (0, 30, 31)


def test_kv_bytes_per_token():
    # nope 448 fp8 + rope 64 bf16 (128 B) + 448/64 = 7 scale bytes + 1 pad
    assert kv_bytes_per_token(FLASH) == 448 + 128 + 7 + 1 == 584


@pytest.mark.parametrize(
    ("dtype", "expected"),
    [("fp8", 128 + 128 // 128 * 4), ("bf16", 2 * 128), ("fp4", 128 // 2 + 128 // 32)],
)
def test_indexer_bytes(dtype, expected):
    assert indexer_bytes_per_token(128, dtype) == expected
    assert {"fp8": 132, "bf16": 256, "fp4": 68}[dtype] == expected


def test_indexer_bytes_general_in_d():
    # d = 256: fp8 256 + 2*4 = 264; bf16 512; fp4 128 + 8 = 136
    assert [indexer_bytes_per_token(256, d) for d in ("fp8", "bf16", "fp4")] == [264, 512, 136]


def test_coefficient_terms_flash_fp8():
    c = token_coefficient(FLASH, stage_slice(FLASH), DeploymentSettings(), "fp8", rules=R20)
    t = c.terms
    assert t["swa_kv"] == pytest.approx(0.1 * 584 * 43)  # 2511.2
    assert t["c4_kv"] == pytest.approx(584 / 4 * 21)  # 3066
    assert t["c128_kv"] == pytest.approx(584 / 128 * 20)  # 91.25
    assert t["c4_index_k"] == pytest.approx(132 / 4 * 21)  # 693
    # 0.1 * (ring 8 / window 128) * (2*2*512*4 bytes) * 21
    assert t["c4_state"] == pytest.approx(0.1 * 8 / 128 * 8192 * 21)  # 1075.2
    assert t["c4_index_state"] == pytest.approx(0.1 * 8 / 128 * 2048 * 21)  # 268.8
    assert c.total == pytest.approx(7705.45)


@pytest.mark.parametrize(
    ("dtype", "total"), [("fp8", 7705.45), ("bf16", 8356.45), ("fp4", 7369.45)]
)
def test_sanity_anchor_bytes_per_full_token(dtype, total):
    fp = plan_for_budget(
        FLASH, DeploymentSettings(index_k_dtype=dtype), "fixed", 50 * GIB, rules=R20
    )
    assert fp.bytes_per_full_token["fixed"] == pytest.approx(total)
    # The legacy formula prints the fp8 value for every dtype.
    assert fp.bytes_per_full_token["legacy"] == pytest.approx(7705.45)


def test_bf16_legacy_misses_651_bytes_per_token():
    fp = plan_for_budget(
        FLASH, DeploymentSettings(index_k_dtype="bf16"), "legacy", 50 * GIB, rules=R20
    )
    assert fp.bytes_per_full_token["fixed"] - fp.bytes_per_full_token["legacy"] == pytest.approx(
        (256 - 132) / 4 * 21
    )


def test_c128_state_fixed_bias():
    # rows = ceil128((256+1)*128 + 128 + 1) = ceil128(33025) = 33152; width 2*512*4 B; 20 layers
    assert c128_state_fixed_bytes(FLASH, stage_slice(FLASH), DeploymentSettings(), rules=R20) == (
        33152 * 4096 * 20
    )


def test_c128_state_online_compress_and_bf16_state():
    s = DeploymentSettings(online_compress=True, compress_state_dtype="bfloat16")
    # ring 1: rows = slots + ring + 1 = 257 + 1 + 1, unpadded (_get_c128_state_fixed_bytes,
    # online branch); width 3*512*2 B
    assert c128_state_fixed_bytes(FLASH, stage_slice(FLASH), s, rules=R20) == 259 * 3072 * 20


def test_speculative_inflation_and_rings():
    s = DeploymentSettings(speculative=True)
    assert (s.ring_c4, s.ring_c128) == (16, 256)
    base = token_coefficient(FLASH, stage_slice(FLASH), DeploymentSettings(), "fp8", rules=R20)
    spec = token_coefficient(FLASH, stage_slice(FLASH), s, "fp8", rules=R20)
    assert spec.speculative_factor == pytest.approx(44 / 43)
    # state terms double (ring 16), then everything is inflated by (L+1)/L
    assert spec.terms["c4_state"] == pytest.approx(base.terms["c4_state"] * 2 * 44 / 43)
    assert spec.terms["c4_kv"] == pytest.approx(base.terms["c4_kv"] * 44 / 43)


def test_hisparse_shrinks_c4_kv():
    t = token_coefficient(
        FLASH, stage_slice(FLASH), DeploymentSettings(hisparse_ratio=4), "fp8", rules=R20
    )
    assert t.terms["c4_kv"] == pytest.approx(584 / 4 * 21 / 4)


def test_worked_magnitude_50gib_flash_bf16_legacy():
    """Worked magnitude (docs/footprint.md): 6,614,784 tokens, 4.0 GiB unpriced; fixed 6,099,456."""
    fp = plan_for_budget(
        FLASH, DeploymentSettings(index_k_dtype="bf16"), "legacy", 50 * GIB, rules=R20
    )
    bias = 33152 * 4096 * 20
    assert fp.full_tokens == (50 * GIB - bias) // 7705.45 // 256 * 256 == 6_614_784
    assert fp.correct_full_tokens == 6_099_456
    ik = fp.pools["c4_index_k"]
    # allocated: pages (c128*32 + 64 + 1)//64, 64 slots * 256 B, 21 layers
    c128 = 6_614_784 // 128
    assert ik.allocated_bytes == (c128 * 32 + 65) // 64 * 64 * 256 * 21
    assert ik.planned_bytes == (693 * 6_614_784)
    assert ik.overcommit_bytes / GIB == pytest.approx(4.01, abs=0.01)


def test_token_counts_from_full():
    c = counts_for_full_tokens(FLASH, DeploymentSettings(), 6_614_784, rules=R20)
    assert c.swa == int(6_614_784 * 0.1) // 256 * 256 == 661_248
    assert (c.c4, c.c128) == (6_614_784 // 4, 6_614_784 // 128)
    assert c.c4_state == 661_248 // 128 * 8
    assert c.c128_state == 257 * 128


def test_allocation_terms_by_hand():
    s = DeploymentSettings(index_k_dtype="fp8")
    full = 1_048_576
    c = counts_for_full_tokens(FLASH, s, full, rules=R20)
    a = allocated_bytes(FLASH, stage_slice(FLASH), s, c, rules=R20)
    # KV pages padded to 576 B: 256*584 -> 260*576; 64*584 -> 65*576; 2*584 -> 3*576
    assert kv_page_bytes(FLASH, 256) == 149_760
    assert kv_page_bytes(FLASH, 64) == 37_440
    assert kv_page_bytes(FLASH, 2) == 1_728
    assert a["swa_kv"] == (c.swa + 257) // 256 * 149_760 * 43
    assert a["c4_kv"] == (c.c4 + 65) // 64 * 37_440 * 21
    assert a["c128_kv"] == (c.c128 + 3) // 2 * 1_728 * 20
    assert a["c4_index_k"] == (c.c128 * 32 + 65) // 64 * 64 * 132 * 21
    rows4 = -(-(c.c4_state + 8 + 1) // 4) * 4
    assert a["c4_state"] == rows4 * 4 * 512 * 4 * 21
    assert a["c4_index_state"] == rows4 * 4 * 128 * 4 * 21
    assert a["c128_state"] == 33_152 * 2 * 512 * 4 * 20


def test_draft_layers_allocated_only_with_speculation():
    full = 1_048_576
    st = stage_slice(FLASH)
    plain = allocated_bytes(
        FLASH,
        st,
        DeploymentSettings(),
        counts_for_full_tokens(FLASH, DeploymentSettings(), full),
        rules=R20,
    )
    spec_s = DeploymentSettings(speculative=True)
    spec = allocated_bytes(
        FLASH, st, spec_s, counts_for_full_tokens(FLASH, spec_s, full), rules=R20
    )
    swa_pages = (int(full * 0.1) // 256 * 256 + 257) // 256
    assert plain["swa_kv"] == swa_pages * 149_760 * 43
    assert spec["swa_kv"] == swa_pages * 149_760 * 44  # the MTP layer is SWA-only


def test_helpers():
    assert pages(0, 256) == 1
    assert pages(255, 256) == 2  # 255 + 257 = 512
    assert state_rows(10, 8, 4) == 20  # 19 -> 20
    assert state_rows(10, 1, 128, online=True) == 12


def test_fixed_leaves_only_page_padding():
    """A fixed configurator's over-commit is the page-padding remainder, well under 0.5 GiB."""
    fp = plan_for_budget(
        FLASH, DeploymentSettings(index_k_dtype="bf16"), "fixed", 50 * GIB, rules=R20
    )
    assert 0 < fp.overcommit_bytes < 0.5 * GIB
    assert abs(fp.pools["c4_index_k"].overcommit_bytes) < 1 * 1024**2


def test_footprint_for_tokens_matches_plan():
    s = DeploymentSettings(index_k_dtype="bf16")
    plan = plan_for_budget(FLASH, s, "legacy", 50 * GIB, rules=R20)
    again = footprint_for_tokens(FLASH, s, "legacy", plan.full_tokens, rules=R20)
    assert again.allocated_bytes == plan.allocated_bytes
    assert again.planned_bytes == plan.planned_bytes
    # Without the budget the core recovers it from the token count (the configurator spent it
    # to within one page of tokens), so the corrected count agrees to within one page.
    assert again.correct_full_tokens is not None and plan.correct_full_tokens is not None
    assert abs(again.correct_full_tokens - plan.correct_full_tokens) <= s.page_size
