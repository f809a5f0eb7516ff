"""The compose stacks' ingest-token service: its command, run as compose runs it (the path moved
under tmp_path), leaves a token the sidecar and the tap accept, keeps it across restarts, and
never follows a link planted at its path."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from exporter.config import token_file_problem
from exporter.tokenfile import MODE, TOKEN_BYTES
from tests.deploy.conftest import COMPOSE_FILES, compose


def _run(path: Path) -> subprocess.CompletedProcess[str]:
    """The ingest-token service's entrypoint and command, its path argument replaced."""
    svc = compose(COMPOSE_FILES[0])["services"]["ingest-token"]
    python, *module = svc["entrypoint"]
    assert python == "python" and len(svc["command"]) == 1
    return subprocess.run(
        [sys.executable, *module, str(path)], capture_output=True, text=True, timeout=60
    )


def test_writes_a_token_both_readers_accept_and_keeps_it(tmp_path: Path) -> None:
    path = tmp_path / "token"
    res = _run(path)
    assert res.returncode == 0, res.stderr
    token = path.read_text(encoding="ascii")
    assert token_file_problem(path) is None  # what serve and tap check at start
    assert len(token.strip()) == 2 * TOKEN_BYTES and token.strip() not in res.stderr
    assert stat.S_IMODE(path.stat().st_mode) == MODE == 0o400
    assert os.listdir(tmp_path) == ["token"], "no temporary file left behind"
    # a restarted stack keeps its token (a gateway given it keeps working)
    assert _run(path).returncode == 0
    assert path.read_text(encoding="ascii") == token


def test_replaces_an_unusable_file(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("\n")
    assert token_file_problem(path) is not None
    assert _run(path).returncode == 0
    assert token_file_problem(path) is None


@pytest.mark.parametrize("planted", ["link", "directory"])
def test_refuses_what_is_not_a_regular_file(tmp_path: Path, planted: str) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    path = tmp_path / "token"
    if planted == "link":
        path.symlink_to(victim)
    else:
        path.mkdir()
    res = _run(path)
    assert res.returncode == 2 and "not a regular file" in res.stderr
    assert victim.read_text() == "keep me\n"
    assert sorted(os.listdir(tmp_path)) == ["token", "victim"]
