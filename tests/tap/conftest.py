"""Fixtures of the tap's tests."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from tests.support import stop_process


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Child processes a test starts (append them); each is stopped when the test ends."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        stop_process(p)
