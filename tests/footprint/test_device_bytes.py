"""The caching-allocator replay (exporter/footprint/device_bytes.py) against PyTorch's own rules
(``c10/cuda/CUDACachingAllocator.cpp``): requests rounded to 512 B, requests of at most 1 MiB
served from 2 MiB segments, 1-10 MiB from 20 MiB segments, larger ones from a segment of their
own rounded to 2 MiB, a block split only when the rest is worth keeping (>= 512 B in the small
pool, > 1 MiB in the large one), best fit among free blocks. Each expected figure is worked
out by hand from those rules in the test, not read back from the code."""

from __future__ import annotations

import pytest

from exporter.footprint import PRESETS, DeploymentSettings, plan_for_budget, rules_for_version
from exporter.footprint.device_bytes import (
    DeviceBytes,
    pool_tensor_sizes,
    round_request,
    segment_size,
    simulate,
)
from exporter.units import GIB, MIB


@pytest.mark.parametrize(
    ("nbytes", "block"), [(1, 512), (512, 512), (513, 1024), (1000, 1024), (MIB + 1, MIB + 512)]
)
def test_requests_are_rounded_up_to_512_bytes(nbytes, block):
    assert round_request(nbytes) == block


@pytest.mark.parametrize(
    ("block", "segment"),
    [
        (512, 2 * MIB),  # small pool: 2 MiB segments
        (MIB, 2 * MIB),  # 1 MiB is still small
        (MIB + 512, 20 * MIB),  # 1-10 MiB: 20 MiB segments
        (10 * MIB - 512, 20 * MIB),
        (10 * MIB, 10 * MIB),  # from 10 MiB: its own segment, rounded to 2 MiB
        (10 * MIB + 512, 12 * MIB),
        (13 * MIB, 14 * MIB),
    ],
)
def test_segment_sizes(block, segment):
    assert segment_size(block) == segment


def test_small_tensors_share_one_2_mib_segment():
    # 1000 B -> 1024 B blocks; 2 MiB holds 2048 of them: one cudaMalloc.
    got = simulate([1000] * 2048)
    assert got == DeviceBytes(
        tensors=1000 * 2048, allocated=1024 * 2048, reserved=2 * MIB, segments=1
    )
    # the 2049th needs a second segment
    assert simulate([1000] * 2049).segments == 2


def test_small_pool_splits_down_to_a_512_byte_rest():
    # 2 MiB segment: 1 MiB, then 1 MiB - 512 (rest 512 >= 512: split, kept), then 512 fits it.
    got = simulate([MIB, MIB - 512, 512])
    assert (got.allocated, got.reserved, got.segments) == (2 * MIB, 2 * MIB, 1)


def test_large_pool_keeps_a_rest_of_at_most_1_mib_with_the_block():
    # 9.5 MiB twice from one 20 MiB segment: the second leaves 1 MiB, not > 1 MiB, so it is
    # not split and memory_allocated counts the whole 10.5 MiB block.
    half = 19 * MIB // 2
    got = simulate([half, half])
    assert (got.tensors, got.allocated, got.reserved, got.segments) == (
        2 * half,
        20 * MIB,
        20 * MIB,
        1,
    )
    # 9 MiB twice leaves 2 MiB (> 1 MiB): split, allocated is the two requests only.
    got = simulate([9 * MIB, 9 * MIB])
    assert (got.allocated, got.reserved, got.segments) == (18 * MIB, 20 * MIB, 1)


def test_a_large_request_gets_its_own_segment_rounded_to_2_mib():
    # 10 MiB + 1 B -> 10 MiB + 512 B in a 12 MiB segment; the rest (2 MiB - 512 B) is split off.
    got = simulate([10 * MIB + 1])
    assert (got.allocated, got.reserved, got.segments) == (10 * MIB + 512, 12 * MIB, 1)
    # 11 MiB + 1 B -> a 12 MiB segment whose rest (1 MiB - 512 B) stays with the block.
    got = simulate([11 * MIB + 1])
    assert (got.allocated, got.reserved) == (12 * MIB, 12 * MIB)
    # The split-off rest serves a later request that fits it: no new segment.
    got = simulate([10 * MIB + 1, MIB + 512])
    assert (got.reserved, got.segments) == (12 * MIB, 1)


def test_best_fit_takes_the_smallest_free_block_that_fits():
    # Two 20 MiB segments leave free rests of 14 MiB and 16 MiB; a 13 MiB request would be
    # its own segment, so use 5 MiB: best fit takes the 14 MiB rest (rest 9 MiB), leaving the
    # 16 MiB one whole for a 9.5 MiB request: still two segments.
    got = simulate([6 * MIB, 4 * MIB, 4 * MIB, 4 * MIB, 4 * MIB, 5 * MIB, 9 * MIB + MIB // 2])
    assert got.segments == 2 and got.reserved == 40 * MIB


def test_zero_byte_tensors_allocate_nothing():
    assert simulate([0, 0]) == DeviceBytes(0, 0, 0, 0)


def test_pool_tensor_sizes_expand_each_pool_in_order():
    assert pool_tensor_sizes({"a": (10, 2), "b": (3, 1), "c": (7, 0)}) == [10, 10, 3]


def test_a_kv_pool_is_a_little_more_on_the_device_than_its_tensors():
    """V4-Flash fp8 at 50 GiB on 0.5.23: most KV tensors are far above 10 MiB (their own
    segment, rounded to 2 MiB), so the rounding is under 2 MiB per segment. Measured by hand on
    an H200 with SGLang's own pool (docs/gpu-validation.md): memory_allocated grew 0.10-0.13%
    beyond the tensors, NVML's used memory 0.43-0.46% (segments plus driver-side memory)."""
    fp = plan_for_budget(
        PRESETS["deepseek-v4-flash"],
        DeploymentSettings(),
        "legacy",
        50 * GIB,
        rules=rules_for_version("0.5.23"),
    )
    dev = fp.device
    assert dev is not None and dev.tensors == fp.allocated_bytes
    assert dev.tensors < dev.allocated <= dev.reserved
    assert dev.reserved - dev.tensors < dev.segments * 2 * MIB
    assert 0.0010 <= dev.allocated / dev.tensors - 1 <= 0.0013
    assert dev.reserved / dev.tensors - 1 < 0.0043
    assert fp.device_overcommit_bytes == dev.reserved - fp.planned_bytes > fp.overcommit_bytes


def test_online_compress_with_mtp_gives_the_draft_pool_its_own_pending_lengths():
    """Every DeepSeekV4TokenToKVPool allocates online_c128_mtp_pending_seq_lens when online
    compress and SGLANG_EXPERIMENTAL_ONLINE_C128_MTP are on: the draft (MTP) worker's pool
    too, on the stage where it runs (issue 33: the model had the target's only)."""
    from exporter.footprint.allocation import allocated_tensors
    from exporter.footprint.geometry import stage_slice
    from exporter.footprint.pricing import counts_for_full_tokens

    geom, rules = PRESETS["deepseek-v4-flash"], rules_for_version("0.5.23").rules
    settings = DeploymentSettings(
        speculative=True, num_draft_tokens=3, online_compress=True, online_c128_mtp=True
    )
    counts = counts_for_full_tokens(geom, settings, 1_000_192, rules)
    last, first = stage_slice(geom, 2, 1), stage_slice(geom, 2, 0)
    per, n = allocated_tensors(geom, last, settings, counts, rules)["c128_mtp_pending_lens"]
    assert (per, n) == (8 * counts.c128_state, 2)
    assert allocated_tensors(geom, first, settings, counts, rules)["c128_mtp_pending_lens"][1] == 1
    target = allocated_tensors(geom, last, settings, counts, rules, include_draft=False)
    assert target["c128_mtp_pending_lens"][1] == 1
