"""The ``.pth`` start-up hook, installed by ``python -m exporter.probe.install`` into a fresh
venv, activates the probe in a multiprocessing-spawn child (as SGLang starts its schedulers)
when DSV4_PROBE=1, and leaves the child untouched without it."""

from __future__ import annotations

import multiprocessing
import multiprocessing.spawn
import subprocess
import sys
from pathlib import Path

import pytest

from exporter.probe.install import PTH_NAME
from exporter.probe.snapshot import read_snapshot
from tests.probe import spawn_child

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def hooked_python(tmp_path_factory):
    """A bare venv whose site-packages has the repo on its path and the probe's hook."""
    root = tmp_path_factory.mktemp("spawnvenv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    site_dir = Path(purelib)
    (site_dir / "_dsv4_test_repo.pth").write_text(f"{REPO}\n")
    out = subprocess.run(
        [sys.executable, "-m", "exporter.probe.install", "--site-dir", str(site_dir)],
        check=True,
        capture_output=True,
        text=True,
        cwd=REPO,
    ).stdout
    assert str(site_dir / PTH_NAME) in out
    return python


def run_child(python: Path) -> dict:
    ctx = multiprocessing.get_context("spawn")
    previous = multiprocessing.spawn.get_executable()
    ctx.set_executable(str(python))
    try:
        queue = ctx.Queue()
        child = ctx.Process(target=spawn_child.report, args=(queue,))
        child.start()
        result = queue.get(timeout=60)
        child.join(timeout=30)
    finally:
        ctx.set_executable(previous)
    assert child.exitcode == 0
    return result


def test_spawned_child_activates_with_env(hooked_python, tmp_path, monkeypatch):
    monkeypatch.setenv("DSV4_PROBE", "1")
    monkeypatch.setenv("DSV4_PROBE_DIR", str(tmp_path))
    monkeypatch.setenv("DSV4_PROBE_RANK", "0")
    result = run_child(hooked_python)
    assert result["active"]
    assert {"index_k_with_scale", "load_start", "layer_done", "consumer", "wait"} <= set(
        result["hooks"]
    )
    assert result["ungated"] > 0
    snap = read_snapshot(tmp_path / "rank-0.json")
    assert snap.total("index_k_ungated") == result["ungated"]
    assert snap.closed  # the child's exit path wrote a final snapshot


def test_spawned_child_is_inert_without_env(hooked_python, tmp_path, monkeypatch):
    monkeypatch.delenv("DSV4_PROBE", raising=False)
    monkeypatch.setenv("DSV4_PROBE_DIR", str(tmp_path))
    result = run_child(hooked_python)
    assert result == {"boot_imported": False, "active": False}
    assert list(tmp_path.iterdir()) == []


def test_install_and_uninstall_command(tmp_path):
    from exporter.probe.install import main

    assert main(["--site-dir", str(tmp_path)]) == 0
    text = (tmp_path / PTH_NAME).read_text()
    assert text.startswith("import ") and text.count("\n") == 1  # site.py runs one line
    assert main(["--site-dir", str(tmp_path), "--uninstall"]) == 0
    assert not (tmp_path / PTH_NAME).exists()
