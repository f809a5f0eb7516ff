"""The grader against vLLM's own DeepSeek tool and reasoning parsers, per supported release.

Each release runs in its own subprocess (:mod:`tests.dsml.vllm_differential`; the wheel is
fetched once with ``pip download --no-deps vllm==X`` and its parsers imported with stand-in
modules): 0.23 and 0.24 (the text-level parser), 0.25, 0.28, 0.30 and 0.34 (the parser engine;
``deepseek_v41`` from 0.30). The grader is given the dialect the sidecar resolves from the
``--tool-call-parser`` name and the release (``v4@vllm-0.30.0``, ``v4.1@vllm-0.34.0``).
Holds, per release:

- no output whose vLLM parse equals the intent (prose and calls) is flagged, raw or as the
  client receives it (non-streaming and streaming);
- every output whose parse differs from the intent is flagged (V3.2 and V4), or for V4.1 at
  least 99% (the SGLang differential's bar; the miss is one grammar-level value, not vLLM's);
- vLLM never delivers V4's / V4.1's self-closing zero-argument invoke as that call (0.23-0.24
  drop it, 0.25+ name a call after the rest of the tag), so clean items carrying one harm the
  client, and the grader flags each of them;
- every damage op where the grader is stricter than vLLM is one documented as stricter than
  SGLang, or one the release's parser engine recovers from (:data:`ENGINE_LENIENT`); the
  table's rules that decide whether text after a block or a missing ``string=`` reaches the
  client are seen in the figures both ways;
- the simulator posing as vLLM (exporter/sim/vllm.py) set to the release sends what that
  release's parser sends, non-streaming, for every V4 item and for every answer of the
  simulated model (clean and each corruption phenotype), reading the release's rules from the
  same table; only 0.23.0's non-finite numbers differ (it keeps ``NaN`` as JSON NaN, 0.24.0
  as the string; one rule set covers both and the simulator sends 0.24.0's).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from exporter.dsml.vllm_releases import rules_for
from exporter.sim.generation import PHENOTYPES
from tests.dsml.diff_corpus import SIGNALLED_OPS
from tests.dsml.test_differential import STRICTER
from tests.dsml.vllm_oracle import RELEASES, parsers, run_release

ROOT = Path(__file__).resolve().parents[2]
# The release that keeps a non-finite number as JSON NaN (0.24.0 sends the string: the
# simulator, one rule set for both, sends 0.24.0's).
NAN_AS_JSON = "0.23.0"
pytestmark = pytest.mark.timeout(900)  # a wheel download on a fresh machine
# Damage the 0.25+ parser engine recovers from, so the client gets the intended calls although
# the grader flags the text (docs/vllm.md): a missing or damaged closer inside a block (the call
# ends at the next tag the engine knows, or finish() closes it), a damaged marker, an unfinished
# block whose arguments were complete, a JSON invoke body, a loop in a value it does not send.
ENGINE_LENIENT = {
    "closer.no_invoke_close",
    "closer.block_by_other",
    "closer.invoke_by_block",
    "marker.no_angle",
    "marker.missing_bar",
    "marker.ascii",
    "marker.spacing",
    "marker.doubled",
    "marker.unknown_name",
    "truncate.stop",
    "truncate.length",
    "lenient.json_body",
    "loop.value",
    "attr.no_flag",
    "stray.after_block",
}


@pytest.fixture(scope="module", params=RELEASES)
def summary(request: pytest.FixtureRequest, dsml_kernel: str) -> dict[str, Any]:
    """One release's run on this module's kernel (the subprocess inherits DSV4_DSML_KERNEL)."""
    return run_release("tests.dsml.vllm_differential", request.param)


def test_corpus_covers_vllms_dialects(summary: dict[str, Any]) -> None:
    assert set(summary["clean_by_dialect"]) == set(parsers(summary["version"]))
    assert summary["items"] >= 2000 and summary["harmful"] >= 1500


def test_no_faithful_output_is_flagged(summary: dict[str, Any]) -> None:
    assert summary["clean_faithful"] >= 500
    assert summary["clean_flagged"] == []
    assert summary["client_view_clean_flagged"] == 0
    assert summary["client_stream_view_clean_flagged"] == 0


def test_every_harmful_output_is_flagged(summary: dict[str, Any]) -> None:
    """Flagged, or for the ops left to a counted signal (issue 32) signalled."""
    missed = summary["missed"]
    assert [r for r in missed if r["dialect"] != "v4.1" or r["op"] == "clean"] == [], missed[:5]
    v41_harmful = summary["harmful_by_dialect"].get("v4.1", 0)
    assert len(missed) <= 0.01 * v41_harmful, missed[:5]
    assert set(summary["signalled_by_op"]) <= set(SIGNALLED_OPS), summary["signalled_by_op"]


def test_clean_self_closing_invokes_harm_and_are_flagged(summary: dict[str, Any]) -> None:
    assert summary["clean_harmed_by_vllm"] >= 20
    assert summary["by_op"]["clean"].get("harm/passed", 0) == 0


def test_stricter_than_vllm_only_where_documented(summary: dict[str, Any]) -> None:
    rules, _ = rules_for(summary["version"])
    stricter = set(summary["stricter_by_op"])
    lenient = ENGINE_LENIENT if rules.self_closing == "name_swallows" else set()
    assert stricter <= set(STRICTER) | lenient, stricter - set(STRICTER) - lenient
    # the table's rules, seen both ways: text after a block reaches a streaming client up to
    # 0.29 (harm), not from 0.30; a parameter without string= is kept from 0.31
    assert ("stray.after_block" in stricter) == (not rules.after_block_streamed)
    assert ("attr.no_flag" in stricter) == rules.missing_string_flag_kept


def test_the_simulated_vllm_parses_as_the_release_does(summary: dict[str, Any]) -> None:
    """Every V4 item, and every answer the simulated model gives (each phenotype present)."""
    assert summary["simulator_compared"] >= 1000
    assert summary["simulator_mismatch"] == []
    non_finite = summary["simulator_mismatch_non_finite"]
    assert non_finite == [] if summary["version"] != NAN_AS_JSON else len(non_finite) >= 1
    own = summary["simulated_model"]
    assert set(own["phenotypes"]) == {"clean", *PHENOTYPES}, own["phenotypes"]
    assert own["mismatch"] == []


def test_hand_built_cases_are_flagged_exactly_where_the_release_harms(
    summary: dict[str, Any],
) -> None:
    """Issue 32's deepseek_v41 case (0.30+: a self-closing invoke then another becomes one
    call named ``list_tasks"/>\\n<｜DSML｜ invoke name="read_file``), the same invoke last, and
    a bare invoke quoted in prose (a call to 0.30+, content before): flagged iff harmful."""
    cases = {r["case"]: r for r in summary["cases"]}
    for row in cases.values():
        assert (row["verdict"] not in ("well_formed", "no_tool_call")) == row["harm"], row
    has_v41 = rules_for(summary["version"])[0].has_v41
    assert ("v41_self_closing_then_invoke" in cases) == has_v41
    if has_v41:
        issue = cases["v41_self_closing_then_invoke"]
        assert issue["grammar"] == f"v4.1@vllm-{summary['version']}" and issue["harm"]
        assert "dialect_mismatch" in issue["reasons"]
