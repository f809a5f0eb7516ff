"""Fixtures: a probe attached to the SGLang stand-ins, torn down after each test."""

from __future__ import annotations

import pytest

from exporter.probe.boot import attach
from exporter.probe.config import ProbeConfig
from exporter.probe.runtime import Probe
from tests.probe.rig import forget_standins, import_standins


@pytest.fixture
def standins(tmp_path, monkeypatch):
    """``install(gap_mode=..., ungated=...) -> (probe, cache_controller, dsv4_pool_module)``."""
    watchers = []
    forget_standins()

    def install(*, gap_mode: str = "auto", ungated: bool = False, probe: Probe | None = None):
        """Fresh stand-in modules each call, patched for this probe only."""
        for watcher in watchers:
            watcher.uninstall()
        forget_standins()
        if ungated:
            monkeypatch.setenv("FAKE_SGLANG_UNGATED_INDEX_K", "1")
        probe = probe or Probe(ProbeConfig(directory=tmp_path, gap_mode=gap_mode, rank="0"))
        watchers.append(attach(probe))
        cc, dsv4 = import_standins()
        from sglang.srt import fake_device

        fake_device.reset()
        return probe, cc, dsv4

    yield install
    for watcher in watchers:
        watcher.uninstall()
    forget_standins()
