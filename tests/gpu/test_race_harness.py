"""The GPU race harness as a test: skipped without torch or CUDA (CI has neither)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

HARNESS = Path(__file__).with_name("race_harness.py")


def test_race_harness_reproduces_and_counts_the_race():
    done = subprocess.run(
        [sys.executable, str(HARNESS)], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "PASS" in done.stdout
