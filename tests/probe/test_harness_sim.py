"""The GPU race harness's own flow, run on the simulated device so that CI catches a harness
that no longer runs (the GPU run itself is tests/gpu, skipped without CUDA)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

HARNESS = Path(__file__).resolve().parents[1] / "gpu" / "race_harness.py"


def test_harness_passes_on_the_simulated_device(tmp_path):
    done = subprocess.run(
        [sys.executable, str(HARNESS), "--simulated"],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "DSV4_HARNESS_OUT": str(tmp_path)},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((tmp_path / "harness.json").read_text())
    assert report["failures"] == []
    assert report["ungated"]["totals"]["index_k_ungated"] > 0
    assert report["gated"]["totals"]["index_k_ungated"] == 0
    assert (
        'dsv4_hicache_index_k_reads_total{gated="false",rank="1"}'
        in (tmp_path / "metrics.txt").read_text()
    )
