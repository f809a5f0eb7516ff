"""The post-import hook and the reporter thread."""

from __future__ import annotations

import importlib
import importlib.machinery
import inspect
import logging
import sys
import types

import pytest

from exporter.probe.config import ProbeConfig
from exporter.probe.hooks import ImportWatcher
from exporter.probe.runtime import Probe
from exporter.probe.snapshot import read_snapshot
from exporter.probe.writer import Reporter, resolve_rank
from tests.support import HANG_GUARD_S, wait_for


@pytest.fixture
def module_dir(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    names = []

    def make(name: str, body: str = "VALUE = 1\n") -> str:
        (tmp_path / f"{name}.py").write_text(body)
        names.append(name)
        return name

    yield make
    for name in names:
        sys.modules.pop(name, None)


def test_callback_runs_after_the_module_body(module_dir):
    name = module_dir("dsv4_watch_a", "VALUE = 41\n\ndef f():\n    return VALUE\n")
    seen = []
    watcher = ImportWatcher()
    watcher.watch(name, lambda m: seen.append(m.VALUE))
    watcher.install()
    try:
        module = importlib.import_module(name)
    finally:
        watcher.uninstall()
    assert seen == [41]
    assert isinstance(module.__loader__, importlib.machinery.SourceFileLoader)
    assert module.__spec__.loader is module.__loader__  # the real loader is put back
    assert "return VALUE" in inspect.getsource(module.f)
    assert watcher not in sys.meta_path


def test_already_imported_module_is_patched_at_once(module_dir):
    name = module_dir("dsv4_watch_b")
    importlib.import_module(name)
    seen = []
    ImportWatcher().watch(name, lambda m: seen.append(m.__name__))
    assert seen == [name]


def test_failing_callback_does_not_break_the_import(module_dir, caplog):
    name = module_dir("dsv4_watch_c")
    watcher = ImportWatcher()
    watcher.watch(name, lambda m: 1 / 0)
    watcher.install()
    try:
        with caplog.at_level(logging.WARNING, logger="exporter.probe"):
            module = importlib.import_module(name)
    finally:
        watcher.uninstall()
    assert module.VALUE == 1
    assert any("patching dsv4_watch_c failed" in r.getMessage() for r in caplog.records)


def test_unwatched_and_missing_modules_are_left_to_others(module_dir):
    watcher = ImportWatcher()
    watcher.watch("dsv4_not_there_at_all", lambda m: None)
    watcher.install()
    try:
        with pytest.raises(ModuleNotFoundError):
            importlib.import_module("dsv4_not_there_at_all")
        assert watcher.find_spec("json", None) is None
    finally:
        watcher.uninstall()


def test_rank_comes_from_env_or_torch_distributed(monkeypatch):
    assert resolve_rank("5") == "5"
    assert resolve_rank("bad rank") is None
    fake = types.SimpleNamespace(
        is_available=lambda: True, is_initialized=lambda: True, get_rank=lambda: 3
    )
    monkeypatch.setitem(sys.modules, "torch.distributed", fake)
    assert resolve_rank(None) == "3"
    monkeypatch.setattr(fake, "is_initialized", lambda: False)
    assert resolve_rank(None) is None


def test_tick_writes_and_close_marks_closed(tmp_path):
    probe = Probe(ProbeConfig(directory=tmp_path, rank="2"))
    probe.counters.count_read(0, index_k=True, gated=False)
    probe.engaged = True
    reporter = Reporter(probe)
    first = reporter.tick()
    second = reporter.tick()
    assert first == second == tmp_path / "rank-2.json"
    snap = read_snapshot(second)
    assert snap.seq == 2 and snap.total("index_k_ungated") == 1 and not snap.closed
    reporter.close()
    assert read_snapshot(second).closed
    reporter.close()  # idempotent
    assert read_snapshot(second).seq == 3


def test_unknown_rank_writes_nothing_and_says_so_once(tmp_path, monkeypatch, caplog):
    monkeypatch.delitem(sys.modules, "torch.distributed", raising=False)
    probe = Probe(ProbeConfig(directory=tmp_path, rank=None, rank_grace_s=0.0))
    reporter = Reporter(probe)
    with caplog.at_level(logging.WARNING, logger="exporter.probe"):
        assert reporter.tick() is None
        assert reporter.tick() is None
    assert list(tmp_path.iterdir()) == []
    assert sum("rank unknown" in r.getMessage() for r in caplog.records) == 1


def test_unwritable_directory_is_logged_not_raised(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    probe = Probe(ProbeConfig(directory=blocker / "sub", rank="0"))
    reporter = Reporter(probe)
    with caplog.at_level(logging.WARNING, logger="exporter.probe"):
        assert reporter.tick() is None
        assert reporter.tick() is None
    assert sum("cannot write snapshot" in r.getMessage() for r in caplog.records) == 1


def test_thread_starts_on_first_hook_call_and_writes_every_interval(tmp_path):
    probe = Probe(ProbeConfig(directory=tmp_path, rank="0", interval_s=0.05))
    reporter = Reporter(probe)
    probe.on_engage = reporter.start
    path = tmp_path / "rank-0.json"
    # nothing runs before a wrapped method is called: no thread, no file
    assert reporter._thread is None and not path.exists()
    probe.engage()
    try:
        # three writes, however long a loaded machine takes (the bound is a hang guard only)
        wait_for(lambda: path.exists() and read_snapshot(path).seq >= 3, timeout=HANG_GUARD_S)
    finally:
        reporter.close()
    assert not reporter._thread.is_alive()
    assert read_snapshot(path).closed
