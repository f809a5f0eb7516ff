"""The probe against the SGLang stand-ins on a simulated device: gated and ungated index-K
reads during HiCache loads, transfer gaps, version tolerance, and fault isolation."""

from __future__ import annotations

import logging
import types

import pytest

from exporter.probe import timeline
from exporter.probe.config import ProbeConfig
from exporter.probe.runtime import FAULTS_BEFORE_DISABLE, Probe
from exporter.probe.snapshot import GAP_BUCKETS_S
from exporter.probe.targets import (
    COUNTER_MODULE,
    POOL_METHODS,
    POOL_MODULE,
    patch_methods,
    patch_module,
)
from tests.probe.rig import RATIOS, Rig, SimOps, fork_pool_class

N_LAYERS = len(RATIOS)
C4 = sum(1 for r in RATIOS if r == 4)
COMPRESSED = sum(1 for r in RATIOS if r)


def test_gated_pool_reads_are_all_gated(standins):
    probe, cc, dsv4 = standins()
    rig = Rig(cc, dsv4.DeepSeekV4TokenToKVPool, SimOps())
    results = [rig.load_and_forward() for _ in range(2)]
    probe.resolve()
    totals = probe.counters.totals()
    assert [r.stale_reads for r in results] == [[], []]
    assert totals["index_k_gated"] == 2 * C4
    assert totals["index_k_ungated"] == 0
    assert totals["kv_gated"] == 2 * (N_LAYERS + COMPRESSED)
    assert totals["kv_ungated"] == 0
    assert totals["loads_started"] == totals["loads_completed"] == 2 * N_LAYERS
    assert probe.counters.load_ops == 2
    assert probe.counters.gap.count == 0
    assert probe.counters.gap_source == "device_events"
    assert probe.counters.errors == 0


def test_fork_pool_without_gate_is_caught_with_gaps(standins):
    probe, cc, dsv4 = standins()
    rig = Rig(cc, fork_pool_class(dsv4), SimOps(copy_ms=1.0))
    result = rig.load_and_forward()
    probe.resolve()
    totals = probe.counters.totals()
    # every ungated index-K read saw the previous content: the race, reproduced
    assert result.index_k_reads == C4 and len(result.stale_reads) == C4
    assert totals["index_k_ungated"] == C4 and totals["index_k_gated"] == 0
    assert totals["kv_ungated"] == 0  # the main KV accessors kept their gate
    gap = probe.counters.gap
    assert gap.count == C4
    assert gap.counts[0] == 0  # none landed before its read: all gaps > 0
    # simulated copies take 1 ms per layer buffer: each gap is a few ms
    assert 0.001 * C4 <= gap.sum <= 0.01 * C4
    per_layer = {k: v.index_k_ungated for k, v in probe.counters.layers.items()}
    assert {k for k, v in per_layer.items() if v} == set(result.stale_reads)


def test_version_whose_own_accessor_lost_the_gate(standins):
    probe, cc, dsv4 = standins(ungated=True)
    rig = Rig(cc, dsv4.DeepSeekV4TokenToKVPool, SimOps())
    result = rig.load_and_forward()
    probe.resolve()
    assert len(result.stale_reads) == C4
    assert probe.counters.totals()["index_k_ungated"] == C4
    assert probe.counters.gap.count == C4


def test_host_bound_gap_when_events_cannot_time(standins, monkeypatch):
    # The host clock the gap is read from, moved by the test: the 30 ms below are the host's
    # view of when the copies landed, not a sleep the test's outcome depends on.
    host = types.SimpleNamespace(now=1000.0)
    host.perf_counter = lambda: host.now
    monkeypatch.setattr(timeline, "time", host)
    probe, cc, dsv4 = standins(gap_mode="host")
    rig = Rig(cc, fork_pool_class(dsv4), SimOps())
    rig.load_and_forward()  # the reads were enqueued before the simulated copies ended
    host.now += 0.03
    probe.resolve()
    gap = probe.counters.gap
    assert probe.counters.gap_source == "host_bound"
    assert gap.count == C4
    # an upper bound from the host: at least the 30 ms the host took to see the copies land
    first_bucket_over_25ms = GAP_BUCKETS_S.index(0.025) + 1
    assert sum(gap.counts[first_bucket_over_25ms:]) == C4


def test_reads_outside_a_load_are_not_counted(standins):
    probe, cc, dsv4 = standins()
    rig = Rig(cc, fork_pool_class(dsv4), SimOps())
    rig.forward(-1)  # decode-like forward, no load bound
    probe.resolve()
    assert probe.counters.totals() == dict.fromkeys(probe.counters.totals(), 0)
    rig.load_and_forward()
    rig.forward(-1)
    probe.resolve()
    assert probe.counters.totals()["index_k_ungated"] == C4  # only the bound forward


def test_completions_counted_on_slot_reuse_without_a_clock(standins):
    probe, cc, dsv4 = standins(gap_mode="off")
    rig = Rig(cc, dsv4.DeepSeekV4TokenToKVPool, SimOps())
    for _ in range(4):  # 3 producer slots: the 4th load reuses slot 0
        rig.load_and_forward()
    probe.resolve()
    totals = probe.counters.totals()
    assert probe.counters.gap_source == "none"
    assert totals["loads_started"] == 4 * N_LAYERS
    assert totals["loads_completed"] == N_LAYERS
    assert totals["index_k_gated"] == 4 * C4


def test_counter_reset_closes_the_window(standins):
    probe, cc, dsv4 = standins()
    rig = Rig(cc, fork_pool_class(dsv4), SimOps())
    rig.host.generation += 1
    rig.controller.load(None, None)
    rig.counter.set_consumer(rig.controller.start_loading())
    rig.counter.reset()
    rig.pool.get_index_k_with_scale_buffer(1)
    assert probe.counters.totals()["index_k_ungated"] == 0


def test_missing_classes_disable_cleanly(caplog):
    probe = Probe(ProbeConfig(directory="/nonexistent"))
    with caplog.at_level(logging.INFO, logger="exporter.probe"):
        patch_module(probe, types.ModuleType(COUNTER_MODULE))
        patch_module(probe, types.ModuleType(POOL_MODULE))
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3  # one line per missing class
    assert any("DeepSeekV4TokenToKVPool not found" in line for line in lines)
    assert any("LayerDoneCounter not found" in line for line in lines)
    assert not any(probe.counters.hooks.values())


def test_unexpected_signature_disables_that_method_only(caplog):
    class Pool:
        layer_transfer_counter = None

        def get_index_k_with_scale_buffer(self, idx):  # renamed parameter: not ours to guess
            return idx

        def get_extra_key_buffer(self, layer_id):
            return layer_id

    module = types.ModuleType(POOL_MODULE)
    module.DeepSeekV4TokenToKVPool = Pool
    original = Pool.get_index_k_with_scale_buffer
    probe = Probe(ProbeConfig(directory="/nonexistent"))
    with caplog.at_level(logging.INFO, logger="exporter.probe"):
        patch_module(probe, module)
    assert Pool.get_index_k_with_scale_buffer is original
    assert probe.counters.hooks["kv_extra"] and not probe.counters.hooks["index_k_with_scale"]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "get_index_k_with_scale_buffer (unexpected signature)" in warnings[0].getMessage()
    assert Pool().get_extra_key_buffer(3) == 3


def test_probe_errors_never_reach_sglang(standins, caplog):
    probe, cc, dsv4 = standins()
    rig = Rig(cc, dsv4.DeepSeekV4TokenToKVPool, SimOps())
    rig.load_and_forward()

    def broken_stream_key():
        raise RuntimeError("probe bug")

    probe.stream_key = broken_stream_key
    rig.counter.set_consumer(0)
    expected = rig.pool.index_pools[4].index_k_with_scale_buffer[0]
    with caplog.at_level(logging.WARNING, logger="exporter.probe"):
        for _ in range(FAULTS_BEFORE_DISABLE + 5):
            assert rig.pool.get_index_k_with_scale_buffer(1) is expected
    slot = probe.slots["index_k_with_scale"]
    assert slot.faults == FAULTS_BEFORE_DISABLE  # disabled after that many: no more work
    assert not slot.active
    assert probe.counters.errors >= FAULTS_BEFORE_DISABLE
    messages = [r.getMessage() for r in caplog.records]
    assert sum("error in index_k_with_scale" in m for m in messages) == 1
    assert sum("index_k_with_scale hook failed" in m for m in messages) == 1


def test_sglang_exceptions_pass_through_untouched(standins):
    probe, cc, dsv4 = standins()
    rig = Rig(cc, dsv4.DeepSeekV4TokenToKVPool, SimOps())
    rig.load_and_forward()
    rig.counter.set_consumer(0)
    with pytest.raises(IndexError):
        rig.pool.get_index_k_with_scale_buffer(len(RATIOS) + 5)
    with pytest.raises(AssertionError):
        rig.controller.layer_done_counter.events[0].complete(99)
    assert probe.counters.errors == 0
    assert not probe.inside  # the nesting guard was released by the exception


def test_override_calling_super_counts_once(standins):
    probe, cc, dsv4 = standins()

    class Logged(dsv4.DeepSeekV4TokenToKVPool):
        def get_index_k_with_scale_buffer(self, layer_id):
            return super().get_index_k_with_scale_buffer(layer_id)

    rig = Rig(cc, Logged, SimOps())
    rig.load_and_forward()
    assert probe.counters.totals()["index_k_gated"] == C4
    assert hasattr(Logged.__dict__["get_index_k_with_scale_buffer"], "__dsv4_probe_wrapped__")


def test_patching_twice_does_not_double_wrap(standins):
    probe, _, dsv4 = standins()
    cls = dsv4.DeepSeekV4TokenToKVPool
    wrapped = cls.get_index_k_with_scale_buffer
    patch_methods(probe, cls, POOL_METHODS)
    assert cls.get_index_k_with_scale_buffer is wrapped
