"""The sidecar end: snapshot files in, /metrics series out; down ranks drop their counters."""

from __future__ import annotations

import asyncio
import os

from prometheus_client import CollectorRegistry, generate_latest

from exporter.probe.snapshot import ProbeCounters, write_snapshot
from exporter.probe.writer import Reporter
from exporter.sources.probe_files import ProbeFileSource
from tests.probe.rig import RATIOS, Rig, SimOps, fork_pool_class

NOW = 10_000.0


class Clock:
    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def counters(ungated: int = 2, gated: int = 5, verify: bool = False) -> ProbeCounters:
    c = ProbeCounters(gap_source="device_events", verify_enabled=verify)
    c.hooks = {"index_k_with_scale": True, "layer_done": True}
    c.count_load(0)
    c.count_load(1, completed=False)
    c.count_read(2, index_k=False, gated=True)
    c.errors = 3
    for _ in range(ungated):
        c.count_read(1, index_k=True, gated=False)
        c.gap.observe(0.003)
    for _ in range(gated):
        c.count_read(1, index_k=True, gated=True)
    if verify:
        c.count_check(True)
        c.count_check(False)
    return c


def samples(source: ProbeFileSource) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in source.collect():
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(found, name: str, **labels: str) -> float | None:
    return found.get((name, tuple(sorted(labels.items()))))


def render(source: ProbeFileSource) -> str:
    registry = CollectorRegistry()
    registry.register(source)
    return generate_latest(registry).decode()


def test_up_rank_exports_its_counters(tmp_path):
    write_snapshot(tmp_path, "0", counters(), written_at=NOW - 1)
    source = ProbeFileSource(tmp_path, clock=Clock())
    asyncio.run(source.poll_once())
    found = samples(source)
    assert source.health.up
    assert value(found, "dsv4_probe_up", rank="0") == 1
    assert value(found, "dsv4_probe_last_report_timestamp_seconds", rank="0") == NOW - 1
    reads = "dsv4_hicache_index_k_reads_total"
    assert value(found, reads, rank="0", gated="false") == 2
    assert value(found, reads, rank="0", gated="true") == 5
    assert value(found, "dsv4_hicache_layer_loads_total", rank="0") == 2
    assert value(found, "dsv4_hicache_layer_loads_completed_total", rank="0") == 1
    assert value(found, "dsv4_hicache_kv_reads_total", rank="0", gated="true") == 1
    assert value(found, "dsv4_hicache_kv_reads_total", rank="0", gated="false") == 0
    assert value(found, "dsv4_probe_errors_total", rank="0") == 3
    assert value(found, "dsv4_hicache_transfer_gap_seconds_count", rank="0") == 2
    assert value(found, "dsv4_hicache_transfer_gap_seconds_bucket", rank="0", le="0.001") == 0
    assert value(found, "dsv4_hicache_transfer_gap_seconds_bucket", rank="0", le="0.005") == 2
    assert value(found, "dsv4_hicache_transfer_gap_seconds_bucket", rank="0", le="+Inf") == 2
    assert value(found, "dsv4_probe_hook_installed", rank="0", hook="index_k_with_scale") == 1
    assert value(found, "dsv4_probe_hook_installed", rank="0", hook="index_k_fp4_scale") == 0
    assert value(found, "dsv4_hicache_index_k_checksum_mismatches_total", rank="0") is None
    text = render(source)
    assert 'dsv4_probe_info{gap_source="device_events"' in text
    assert 'dsv4_hicache_index_k_reads_total{gated="false",rank="0"} 2.0' in text


def test_verification_series_only_when_on(tmp_path):
    write_snapshot(tmp_path, "0", counters(verify=True), written_at=NOW)
    source = ProbeFileSource(tmp_path, clock=Clock())
    asyncio.run(source.poll_once())
    found = samples(source)
    assert value(found, "dsv4_hicache_index_k_checksum_checks_total", rank="0") == 2
    assert value(found, "dsv4_hicache_index_k_checksum_mismatches_total", rank="0") == 1


def test_stale_writer_goes_down_and_drops_counters(tmp_path):
    write_snapshot(tmp_path, "0", counters(), written_at=NOW)
    write_snapshot(tmp_path, "1", counters(), written_at=NOW)
    clock = Clock()
    source = ProbeFileSource(tmp_path, stale_after_s=5.0, clock=clock)
    asyncio.run(source.poll_once())
    assert value(samples(source), "dsv4_probe_up", rank="0") == 1
    clock.now = NOW + 6
    write_snapshot(tmp_path, "1", counters(), written_at=clock.now - 0.5)  # still writing
    asyncio.run(source.poll_once())
    found = samples(source)
    assert value(found, "dsv4_probe_up", rank="0") == 0
    assert value(found, "dsv4_probe_down_reason", rank="0", reason="stale") == 1
    assert value(found, "dsv4_probe_last_report_timestamp_seconds", rank="0") == NOW
    assert value(found, "dsv4_hicache_index_k_reads_total", rank="0", gated="false") is None
    assert value(found, "dsv4_hicache_transfer_gap_seconds_count", rank="0") is None
    assert value(found, "dsv4_probe_up", rank="1") == 1
    assert value(found, "dsv4_hicache_index_k_reads_total", rank="1", gated="false") == 2


def test_closed_and_dead_writers(tmp_path):
    write_snapshot(tmp_path, "0", counters(), written_at=NOW, closed=True)
    write_snapshot(tmp_path, "1", counters(), written_at=NOW, pid=4_000_000)
    asked = []

    def pid_alive(pid):
        asked.append(pid)
        return pid == os.getpid()

    source = ProbeFileSource(tmp_path, clock=Clock(), pid_alive=pid_alive)
    asyncio.run(source.poll_once())
    found = samples(source)
    assert value(found, "dsv4_probe_down_reason", rank="0", reason="writer_exited") == 1
    assert value(found, "dsv4_probe_down_reason", rank="1", reason="writer_dead") == 1
    assert asked == [4_000_000]  # same namespace and host as this test: the pid was checked


def test_pid_not_checked_across_namespaces(tmp_path):
    path = write_snapshot(tmp_path, "0", counters(), written_at=NOW, pid=4_000_000)
    path.write_text(path.read_text().replace('"pid_namespace":', '"pid_namespace":"pid:[1]","x":'))
    source = ProbeFileSource(tmp_path, clock=Clock(), pid_alive=lambda pid: False)
    asyncio.run(source.poll_once())
    assert value(samples(source), "dsv4_probe_up", rank="0") == 1


def test_garbage_marks_that_rank_down_only(tmp_path):
    write_snapshot(tmp_path, "0", counters(), written_at=NOW)
    write_snapshot(tmp_path, "1", counters(), written_at=NOW - 2)
    source = ProbeFileSource(tmp_path, clock=Clock())
    asyncio.run(source.poll_once())
    (tmp_path / "rank-1.json").write_text("{not json")
    (tmp_path / "rank-2.json").write_text('{"format": "dsv4-probe-snapshot", "version": 9}')
    (tmp_path / ".rank-3.json.1.tmp").write_text("partial")
    asyncio.run(source.poll_once())
    found = samples(source)
    assert source.health.up
    assert value(found, "dsv4_probe_up", rank="0") == 1
    assert value(found, "dsv4_probe_down_reason", rank="1", reason="malformed") == 1
    assert value(found, "dsv4_probe_last_report_timestamp_seconds", rank="1") == NOW - 2
    assert value(found, "dsv4_probe_down_reason", rank="2", reason="unsupported_version") == 1
    assert value(found, "dsv4_probe_last_report_timestamp_seconds", rank="2") is None
    assert {v.rank for v in source.ranks} == {"0", "1", "2"}
    render(source)  # the down ranks still render as valid exposition


def test_missing_directory_and_forgetting(tmp_path):
    directory = tmp_path / "probe"
    clock = Clock()
    source = ProbeFileSource(directory, forget_after_s=100.0, clock=clock)
    asyncio.run(source.poll_once())
    assert not source.health.up and source.health.errors["dir_missing"] == 1
    assert sum(source.health.errors.values()) == 1  # the others zero-initialised
    write_snapshot(directory, "0", counters(), written_at=NOW)
    asyncio.run(source.poll_once())
    assert source.health.up and [v.rank for v in source.ranks] == ["0"]
    clock.now = NOW + 101
    asyncio.run(source.poll_once())
    assert source.ranks == () and value(samples(source), "dsv4_probe_up", rank="0") is None


def test_run_polls_until_stopped(tmp_path):
    write_snapshot(tmp_path, "0", counters(), written_at=NOW)
    source = ProbeFileSource(tmp_path, interval_s=0.01, clock=Clock())

    async def main():
        stop = asyncio.Event()
        task = asyncio.create_task(source.run(stop))
        while source.health.cycles < 2:
            await asyncio.sleep(0.01)
        stop.set()
        await asyncio.wait_for(task, 2.0)

    asyncio.run(main())
    assert source.health.cycles >= 2 and source.health.up


def test_probe_to_metrics_end_to_end(standins, tmp_path):
    """The issue's 'done when': an ungated index-K path shows up on /metrics as ungated reads
    and a gap histogram; the gated path shows zero."""
    from exporter.probe.config import ProbeConfig
    from exporter.probe.runtime import Probe

    c4 = sum(1 for r in RATIOS if r == 4)
    for rank, fork in (("0", False), ("1", True)):
        probe = Probe(ProbeConfig(directory=tmp_path, rank=rank))
        _, cc, dsv4 = standins(probe=probe)
        pool_cls = fork_pool_class(dsv4) if fork else dsv4.DeepSeekV4TokenToKVPool
        Rig(cc, pool_cls, SimOps()).load_and_forward()
        assert Reporter(probe).tick() is not None
    source = ProbeFileSource(tmp_path)
    asyncio.run(source.poll_once())
    found = samples(source)
    reads = "dsv4_hicache_index_k_reads_total"
    assert value(found, reads, rank="0", gated="false") == 0
    assert value(found, reads, rank="0", gated="true") == c4
    assert value(found, "dsv4_hicache_transfer_gap_seconds_count", rank="0") == 0
    assert value(found, reads, rank="1", gated="false") == c4
    assert value(found, "dsv4_hicache_transfer_gap_seconds_count", rank="1") == c4
    assert value(found, "dsv4_hicache_transfer_gap_seconds_bucket", rank="1", le="0.0") == 0
    assert value(found, "dsv4_hicache_layer_loads_total", rank="1") == len(RATIOS)
