"""The grader against vLLM's own DeepSeek-V4 tool and reasoning parsers, per supported release.

Each release runs in its own subprocess (:mod:`tests.dsml.vllm_differential`; the wheel is
fetched once with ``pip download --no-deps vllm==X`` and its parsers imported with stand-in
modules). The grader is given the vLLM dialect (``v4@vllm``, ``v3.2@vllm``). Holds, per release:

- no output whose vLLM parse equals the intent (prose and calls) is flagged, raw or as the
  client receives it (non-streaming and streaming);
- every output whose parse differs from the intent is flagged;
- vLLM drops V4's self-closing zero-argument invoke, so clean items carrying one harm the
  client, and the grader flags each of them;
- every damage op where the grader is stricter than vLLM is one already documented as stricter
  than SGLang;
- the simulator posing as vLLM (exporter/sim/vllm.py) sends what the released parser it
  restates (0.24.0) sends, non-streaming, for every V4 item.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from exporter.sim.vllm import VERSION as SIM_VERSION
from tests.dsml.diff_corpus import SIGNALLED_OPS
from tests.dsml.test_differential import STRICTER
from tests.dsml.vllm_oracle import RELEASES

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(900)  # a wheel download on a fresh machine


def _run(version: str) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "tests.dsml.vllm_differential", version],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, f"vllm {version}:\n{proc.stderr[-3000:]}"
    return dict(json.loads(proc.stdout))


@pytest.fixture(scope="module", params=RELEASES)
def summary(request: pytest.FixtureRequest, dsml_kernel: str) -> dict[str, Any]:
    """One release's run on this module's kernel (the subprocess inherits DSV4_DSML_KERNEL)."""
    return _run(request.param)


def test_corpus_covers_vllms_dialects(summary: dict[str, Any]) -> None:
    assert set(summary["clean_by_dialect"]) == {"v3.2", "v4"}
    assert summary["items"] >= 2000 and summary["harmful"] >= 1500


def test_no_faithful_output_is_flagged(summary: dict[str, Any]) -> None:
    assert summary["clean_faithful"] >= 500
    assert summary["clean_flagged"] == []
    assert summary["client_view_clean_flagged"] == 0
    assert summary["client_stream_view_clean_flagged"] == 0


def test_every_harmful_output_is_flagged(summary: dict[str, Any]) -> None:
    """Flagged, or for the ops left to a counted signal (issue 32) signalled."""
    assert summary["missed"] == [], summary["missed"][:5]
    assert set(summary["signalled_by_op"]) <= set(SIGNALLED_OPS), summary["signalled_by_op"]


def test_clean_self_closing_invokes_harm_and_are_flagged(summary: dict[str, Any]) -> None:
    assert summary["clean_harmed_by_vllm"] >= 20
    assert summary["by_op"]["clean"].get("harm/passed", 0) == 0


def test_stricter_than_vllm_only_where_documented(summary: dict[str, Any]) -> None:
    assert set(summary["stricter_by_op"]) <= set(STRICTER)


def test_the_simulated_vllm_parses_as_the_release_does(summary: dict[str, Any]) -> None:
    """Compared on the release the simulator restates (0.23.0 keeps a NaN value as JSON NaN,
    0.24.0 as the string)."""
    compared = summary["simulator_compared"]
    assert compared >= 1000 if summary["version"] == SIM_VERSION else compared == 0
    assert summary["simulator_mismatch"] == []
