"""The probe directory read as untrusted input (issue 24): a FIFO named like a snapshot, numbers
past the float range, a huge probe_version, thousands of rank files and a future timestamp each
give a bounded, specific answer; the poller never blocks and /metrics always renders."""

from __future__ import annotations

import asyncio
import json
import os
import threading
from pathlib import Path

from exporter.probe.snapshot import ProbeCounters, snapshot_path, write_snapshot
from exporter.sources.probe_files import MAX_RANK_FILES, ProbeFileSource
from tests.probe.test_probe_files import NOW, Clock, render, samples, value


def _poll(source: ProbeFileSource) -> None:
    """poll_once on a thread that must finish: a blocked open() would hang it."""
    t = threading.Thread(target=lambda: asyncio.run(source.poll_once()), daemon=True)
    t.start()
    t.join(10)
    assert not t.is_alive(), "poll_once blocked"


def _rewrite(tmp_path: Path, rank: str, **changes: object) -> None:
    path = snapshot_path(tmp_path, rank)
    doc = json.loads(path.read_text())
    doc.update(changes)
    path.write_text(json.dumps(doc))


def test_a_fifo_named_like_a_snapshot_is_unreadable_not_a_hang(tmp_path: Path) -> None:
    write_snapshot(tmp_path, "0", ProbeCounters(), written_at=NOW - 1)
    os.mkfifo(snapshot_path(tmp_path, "1"))
    source = ProbeFileSource(tmp_path, clock=Clock())
    _poll(source)
    found = samples(source)
    assert value(found, "dsv4_probe_up", rank="0") == 1
    assert value(found, "dsv4_probe_down_reason", rank="1", reason="unreadable") == 1


def test_an_integer_past_the_float_range_is_malformed_and_metrics_render(tmp_path: Path) -> None:
    write_snapshot(tmp_path, "0", ProbeCounters(), written_at=NOW - 1)
    _rewrite(tmp_path, "0", seq=10**400)  # valid JSON; float(10**400) raises OverflowError
    source = ProbeFileSource(tmp_path, clock=Clock())
    _poll(source)
    assert value(samples(source), "dsv4_probe_down_reason", rank="0", reason="malformed") == 1
    assert "dsv4_probe_up" in render(source)


def test_a_huge_probe_version_never_becomes_a_label(tmp_path: Path) -> None:
    write_snapshot(tmp_path, "0", ProbeCounters(), written_at=NOW - 1)
    _rewrite(tmp_path, "0", probe_version="v" * 900_000)
    source = ProbeFileSource(tmp_path, clock=Clock())
    _poll(source)
    text = render(source)
    assert len(text) < 100_000
    assert value(samples(source), "dsv4_probe_down_reason", rank="0", reason="malformed") == 1


def test_thousands_of_rank_files_are_capped_and_counted(tmp_path: Path) -> None:
    for rank in range(2000):
        write_snapshot(tmp_path, str(rank), ProbeCounters(), written_at=NOW - 1)
    source = ProbeFileSource(tmp_path, clock=Clock())
    _poll(source)
    found = samples(source)
    ranks = {dict(labels)["rank"] for name, labels in found if name == "dsv4_probe_up"}
    assert len(ranks) == MAX_RANK_FILES
    assert source.health.errors.get("too_many_files") == 1


def test_a_future_timestamp_is_judged_not_trusted(tmp_path: Path) -> None:
    write_snapshot(tmp_path, "0", ProbeCounters(), written_at=NOW + 3600)
    write_snapshot(tmp_path, "1", ProbeCounters(), written_at=NOW + 1)  # within the window
    source = ProbeFileSource(tmp_path, clock=Clock())
    _poll(source)
    found = samples(source)
    assert value(found, "dsv4_probe_down_reason", rank="0", reason="clock_skew") == 1
    assert value(found, "dsv4_probe_up", rank="1") == 1
