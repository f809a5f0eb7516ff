"""``make gpu-check`` kept from rotting: its CPU mode in CI, its GPU mode where CUDA is.

The CPU mode runs every part that can run without a GPU through the same code: the race on the
simulated device and on each checked SGLang release's own counter and pool (meta device), the
NVML comparison against the fake NVML, each release's own pool against ``plan``. The GPU mode
(the same command on a CUDA machine, ``make gpu-check``) is skipped here without CUDA.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.gpu.check import RELEASES, calls_per_decode_step

REPO = Path(__file__).resolve().parents[2]

# Fifteen release imports and fifteen pool builds on meta: above the default 300 s when loaded.
pytestmark = pytest.mark.timeout(1200)


def _check(tmp_path: Path, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path / "gpu-check.json"
    done = subprocess.run(
        [sys.executable, "-m", "tests.gpu.check", "--json", str(out), *extra],
        capture_output=True,
        text=True,
        timeout=1100,
        cwd=REPO,
    )
    return done, json.loads(out.read_text()) if out.exists() else {}


def _rows(data: dict, part: str) -> list[dict]:
    return [r for r in data["rows"] if r["part"] == part]


def test_cpu_mode_runs_every_part_and_passes(tmp_path):
    done, data = _check(tmp_path, "--simulated")
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert "PASS" in done.stdout
    standins = data["race stand-ins"]["report"]
    assert standins["ungated"]["index_k_ungated"] == standins["ungated"]["reads"] == 12
    assert standins["ungated"]["stale"] == 12 and standins["gated"]["stale"] == 0
    for version in RELEASES:
        race = data[f"race sglang {version}"]["report"]
        assert race["device"] == "meta"
        # every c4 layer of V4-Flash (21), three loads: counted by the release's own classes
        assert race["ungated"]["index_k_ungated"] == race["ungated"]["reads"] == 63
        assert race["gated"]["index_k_gated"] == 63 and race["gated"]["index_k_ungated"] == 0
        pools = data[f"pool sglang {version}"]["launches"]
        compared = [p for p in pools if "pools" in p]
        assert len(compared) >= 3, pools  # 0.5.12: no fp4 flag, no per-token price to fork
        for launch in compared:
            for name, pair in launch["pools"].items():
                assert pair["release"] == pair["model"], (version, launch["launch"], name)
    assert data["nvml"]["verdict"]["agree"] and data["nvml"]["verdict"]["growth_ok"]
    # what needs a GPU says so instead of passing
    not_run = {r["part"] for r in data["rows"] if r["ok"] is None}
    assert {"gate", "overhead"} <= not_run


def test_calls_per_decode_step_follow_the_layer_mix():
    """Flash: 43 target layers (the config's last ratio is the MTP layer's): per layer the SWA
    KV read; on c4/c128 the compressed KV and attention state; on c4 index-K and indexer state."""
    config = json.loads((REPO / "tests/fixtures/deepseek-v4-flash.config.json").read_text())
    ratios = config["compress_ratios"][:43]
    assert config["num_hidden_layers"] == 43
    c4, c128 = ratios.count(4), ratios.count(128)
    assert calls_per_decode_step("flash") == 43 + 2 * (c4 + c128) + 2 * c4 == 167


torch = pytest.importorskip("torch")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (make gpu-check)")
def test_gpu_mode_passes(tmp_path):
    done, _data = _check(tmp_path)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
