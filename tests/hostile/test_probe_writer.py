"""The probe writer cannot be turned against the user SGLang runs as (issue 31, item 5): a
symlink planted at any name it writes is replaced, never followed; a directory another user
made, a symlinked one, or one of ours that anyone may write is refused; the default directory
is the runtime directory, never the world-writable temp dir."""

from __future__ import annotations

import os
import stat
import tempfile
import threading
from pathlib import Path

import pytest

from exporter.probe.config import ProbeConfig
from exporter.probe.snapshot import (
    ProbeCounters,
    UnsafeProbeDir,
    open_snapshot_dir,
    snapshot_path,
    write_snapshot,
)


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "victim"
    victim.write_text("precious")
    victim.chmod(0o600)
    return victim


def _unchanged(victim: Path) -> None:
    assert victim.read_text() == "precious"
    assert stat.S_IMODE(victim.stat().st_mode) == 0o600


def test_a_symlink_at_the_old_temporary_name_is_not_followed(tmp_path: Path) -> None:
    probe_dir = tmp_path / "probe"
    probe_dir.mkdir(mode=0o755)
    victim = _victim(tmp_path)
    final = snapshot_path(probe_dir, "0")
    # the temporary name the writer used to derive from its pid and thread id
    planted = probe_dir / f".{final.name}.{os.getpid()}.{threading.get_ident()}.tmp"
    planted.symlink_to(victim)
    write_snapshot(probe_dir, "0", ProbeCounters())
    _unchanged(victim)
    assert final.is_file() and not final.is_symlink()


def test_a_symlink_at_the_snapshot_name_is_replaced_not_followed(tmp_path: Path) -> None:
    probe_dir = tmp_path / "probe"
    probe_dir.mkdir(mode=0o755)
    victim = _victim(tmp_path)
    snapshot_path(probe_dir, "0").symlink_to(victim)
    final = write_snapshot(probe_dir, "0", ProbeCounters())
    _unchanged(victim)
    assert not final.is_symlink() and final.read_bytes().startswith(b"{")


def test_a_symlinked_directory_is_refused(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir(mode=0o755)
    link = tmp_path / "link"
    link.symlink_to(real)
    with pytest.raises(UnsafeProbeDir, match="symlink"):
        write_snapshot(link, "0", ProbeCounters())
    assert not list(real.iterdir())


def test_a_directory_of_another_user_is_refused(tmp_path: Path) -> None:
    probe_dir = tmp_path / "probe"
    probe_dir.mkdir(mode=0o755)
    someone_else = os.geteuid() + 4242
    if os.geteuid() == 0:  # root can make the directory someone else's for real
        os.chown(probe_dir, someone_else, someone_else)
        with pytest.raises(UnsafeProbeDir, match=f"owned by uid {someone_else}"):
            write_snapshot(probe_dir, "0", ProbeCounters())
    else:  # the same check as a user who is not its owner
        with pytest.raises(UnsafeProbeDir, match="owned by uid"):
            os.close(open_snapshot_dir(probe_dir, euid=someone_else))


@pytest.mark.parametrize(
    ("mode", "ok"), [(0o700, True), (0o755, True), (0o777, False), (0o775, False), (0o1777, True)]
)
def test_a_directory_of_ours_anyone_may_write_needs_the_sticky_bit(
    tmp_path: Path, mode: int, ok: bool
) -> None:
    probe_dir = tmp_path / "probe"
    probe_dir.mkdir()
    probe_dir.chmod(mode)
    if ok:
        write_snapshot(probe_dir, "0", ProbeCounters())
    else:
        with pytest.raises(UnsafeProbeDir, match="sticky"):
            write_snapshot(probe_dir, "0", ProbeCounters())


def test_a_root_owned_shared_volume_is_accepted(tmp_path: Path) -> None:
    """A Kubernetes emptyDir is root-owned 0777: only root or the platform creates one."""
    probe_dir = tmp_path / "probe"
    probe_dir.mkdir()
    probe_dir.chmod(0o777)
    if os.geteuid() != 0:
        pytest.skip("needs a root-owned directory")
    os.close(open_snapshot_dir(probe_dir, euid=1000))  # SGLang's uid in the manifests


def test_the_default_directory_is_the_runtime_directory() -> None:
    assert ProbeConfig.from_env({"XDG_RUNTIME_DIR": "/run/user/1000"}).directory == Path(
        "/run/user/1000/dsv4-probe"
    )
    assert ProbeConfig.from_env({}).directory == Path("/run/dsv4-probe")
    assert ProbeConfig.from_env({"XDG_RUNTIME_DIR": "relative"}).directory == Path(
        "/run/dsv4-probe"
    )
    assert ProbeConfig.from_env({"DSV4_PROBE_DIR": "/var/run/x"}).directory == Path("/var/run/x")
    assert not str(ProbeConfig.from_env({}).directory).startswith(tempfile.gettempdir())
