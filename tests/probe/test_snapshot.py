"""The snapshot file format: what the probe and the simulator write, what the sidecar reads."""

from __future__ import annotations

import json
import os
import stat

import pytest

from exporter.probe.snapshot import (
    GAP_BUCKETS_S,
    GapHistogram,
    ProbeCounters,
    SnapshotError,
    rank_from_filename,
    read_snapshot,
    write_snapshot,
)


def sample_counters() -> ProbeCounters:
    counters = ProbeCounters()
    counters.hooks = {"index_k_with_scale": True, "wait": True}
    counters.gap_source = "device_events"
    counters.load_ops = 2
    for layer in range(3):
        counters.count_load(layer)
        counters.count_read(layer, index_k=True, gated=False)
        counters.count_read(layer, index_k=False, gated=True)
    counters.count_load(5, completed=False)
    counters.gap.observe(0.002)
    counters.gap.observe(0.0)
    return counters


def test_round_trip(tmp_path):
    path = write_snapshot(tmp_path, 7, sample_counters(), written_at=1000.0, seq=4)
    assert path.name == "rank-7.json"
    snap = read_snapshot(path)
    assert (snap.rank, snap.seq, snap.written_at, snap.pid) == ("7", 4, 1000.0, os.getpid())
    assert snap.total("index_k_ungated") == 3 and snap.total("kv_gated") == 3
    assert snap.total("loads_started") == 4 and snap.total("loads_completed") == 3
    assert snap.gap_bounds == GAP_BUCKETS_S and sum(snap.gap_counts) == 2
    assert snap.gap_counts[0] == 1  # the 0-second gap
    assert snap.hooks == {"index_k_with_scale": True, "wait": True}
    assert snap.gap_source == "device_events" and not snap.closed


def test_write_is_atomic_and_world_readable(tmp_path):
    write_snapshot(tmp_path, "0", sample_counters())
    write_snapshot(tmp_path, "0", sample_counters(), closed=True)
    assert [p.name for p in tmp_path.iterdir()] == ["rank-0.json"]  # no temp file left
    mode = stat.S_IMODE((tmp_path / "rank-0.json").stat().st_mode)
    assert mode & 0o044 == 0o044
    assert read_snapshot(tmp_path / "rank-0.json").closed


def test_rank_must_be_a_safe_label(tmp_path):
    with pytest.raises(ValueError):
        write_snapshot(tmp_path, "../x", sample_counters())
    assert rank_from_filename("rank-3.json") == "3"
    assert rank_from_filename(".rank-3.json.12.tmp") is None
    assert rank_from_filename("rank-a b.json") is None


def test_histogram_buckets():
    hist = GapHistogram()
    for value in (0.0, -1.0, 1e-05, 1.1e-05, 1.0, 5.0):
        hist.observe(value)
    assert hist.counts[0] == 2  # 0 and a clamped negative
    assert hist.counts[1] == 1  # exactly on a bound: le is inclusive
    assert hist.counts[2] == 1
    assert hist.counts[len(GAP_BUCKETS_S) - 1] == 1  # le=1.0
    assert hist.counts[-1] == 1  # +Inf
    assert hist.count == 6 and hist.sum == pytest.approx(6.000021)


def _doc(tmp_path):
    path = write_snapshot(tmp_path, "1", sample_counters())
    return path, json.loads(path.read_text())


_POOL = {
    "class": "DeepSeekV4TokenToKVPool",
    "draft": False,
    "layers": [0, 43],
    "tensors": 3,
    "bytes": {"swa_kv": 1000, "c4_index_k": 300},
    "index_k": {
        "dtype": "bf16",
        "layout": "fused",
        "bytes_per_slot": 256.0,
        "page_size": 64,
        "head_dim": 128,
    },
}
_CONF = {
    "class": "DSV4PoolConfigurator",
    "method": "calculate_pool_sizes",
    "available_bytes": 1200,
    "page_size": 256,
    "bytes_per_full_token": 7086.75,
    "fixed_bytes": {"_get_c128_state_fixed_bytes": 10},
    "sizes": {"full_max_total_num_tokens": 256},
}


def test_memory_round_trip_and_overcommit(tmp_path):
    counters = sample_counters()
    counters.memory = {"configurator": _CONF, "pools": [_POOL, {**_POOL, "draft": True}]}
    snap = read_snapshot(write_snapshot(tmp_path, 0, counters))
    mem = snap.memory
    assert mem.configurator is not None and mem.configurator.available_bytes == 1200
    assert mem.configurator.fixed_total == 10
    assert mem.bytes_by_pool() == {"swa_kv": 2000, "c4_index_k": 600}  # target + draft
    assert mem.overcommit_bytes == 2600 - 1200
    ik = mem.index_k()
    assert ik is not None and (ik.dtype, ik.bytes_per_slot, ik.page_size) == ("bf16", 256.0, 64)


def test_memory_absent_until_seen_and_version_1_still_read(tmp_path):
    path = write_snapshot(tmp_path, 0, sample_counters())
    assert read_snapshot(path).memory.overcommit_bytes is None
    doc = json.loads(path.read_text())
    doc["version"] = 1
    del doc["memory"]
    path.write_text(json.dumps(doc))
    snap = read_snapshot(path)
    assert snap.memory.pools == () and snap.memory.configurator is None
    assert snap.total("index_k_ungated") == 3


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [
        (lambda d: d.update(version=3), "unsupported_version"),
        (lambda d: d.update(memory=[]), "malformed"),
        (
            lambda d: d["memory"].update(pools=[{"class": "P", "tensors": 1, "bytes": []}]),
            "malformed",
        ),
        (
            lambda d: d["memory"].update(
                pools=[{"class": "P", "tensors": 1, "bytes": {"swa kv": 1}}]
            ),
            "malformed",
        ),
        (
            lambda d: d["memory"].update(
                pools=[{"class": "P", "tensors": 1, "bytes": {"swa_kv": -1}}]
            ),
            "malformed",
        ),
        (lambda d: d["memory"].update(pools=[_POOL] * 9), "malformed"),
        (
            lambda d: d["memory"].update(
                configurator={"class": "C", "method": "m", "available_bytes": "50G"}
            ),
            "malformed",
        ),
        (
            lambda d: d["memory"].update(pools=[{**_POOL, "index_k": {"dtype": "int3"}}]),
            "malformed",
        ),
        (lambda d: d.update(format="other"), "malformed"),
        (lambda d: d["layers"]["0"].update(index_k_gated=-1), "malformed"),
        (lambda d: d["layers"]["0"].update(index_k_gated=True), "malformed"),
        (lambda d: d["layers"].update(x={}), "malformed"),
        (lambda d: d["gap"]["counts"].pop(), "malformed"),
        (lambda d: d["gap"].update(bounds=list(reversed(d["gap"]["bounds"]))), "malformed"),
        (lambda d: d.update(rank="2"), "malformed"),
        (lambda d: d.update(gap_source="guess"), "malformed"),
        (lambda d: d.update(written_at="yesterday"), "malformed"),
    ],
)
def test_bad_documents_are_rejected_with_a_reason(tmp_path, mutate, reason):
    path, doc = _doc(tmp_path)
    mutate(doc)
    path.write_text(json.dumps(doc))
    with pytest.raises(SnapshotError) as err:
        read_snapshot(path)
    assert err.value.reason == reason


def test_unreadable_garbage_and_oversized(tmp_path):
    with pytest.raises(SnapshotError) as err:
        read_snapshot(tmp_path / "rank-9.json")
    assert err.value.reason == "unreadable"
    (tmp_path / "rank-8.json").write_bytes(b"\x00\xff{")
    with pytest.raises(SnapshotError) as err:
        read_snapshot(tmp_path / "rank-8.json")
    assert err.value.reason == "malformed"
    (tmp_path / "rank-7.json").write_bytes(b" " * ((1 << 20) + 2))
    with pytest.raises(SnapshotError) as err:
        read_snapshot(tmp_path / "rank-7.json")
    assert err.value.reason == "malformed"
