"""The closed vocabularies and the one rule from reasons to verdict."""

from __future__ import annotations

import pytest

from exporter.dsml import FAMILIES, REASON_SPECS, REASONS, VERDICTS, decide_verdict


def test_vocabularies_are_closed_and_consistent() -> None:
    assert len(set(REASONS)) == len(REASONS)
    assert VERDICTS == (
        "well_formed",
        "no_tool_call",
        "suspect",
        "truncated",
        "degenerate",
        "error",
    )
    for code, spec in REASON_SPECS.items():
        assert spec.code == code
        assert spec.family in FAMILIES
        assert spec.severity in ("hard", "soft", "info", "signal", "error")
        assert code.isidentifier() and code.islower()


@pytest.mark.parametrize(
    ("reasons", "has_call", "finish", "verdict"),
    [
        ((), True, "stop", "well_formed"),
        ((), False, None, "no_tool_call"),
        (("whitespace_layout",), True, "stop", "suspect"),
        (("whitespace_layout", "marker_ascii_pipe"), True, "stop", "degenerate"),
        (("whitespace_layout", "whitespace_layout"), True, "stop", "suspect"),
        (("ngram_loop",), True, "stop", "degenerate"),
        (("length_in_block",), False, "length", "truncated"),
        (("length_in_block", "schema_mismatch"), False, "length", "truncated"),
        (("length_in_block", "nested_tag"), False, "length", "degenerate"),
        (("oversized",), True, None, "well_formed"),
        (("cut_under_stop",), False, "stop", "no_tool_call"),  # a signal: counted, no verdict
        (("repeated_call", "whitespace_layout"), True, "stop", "suspect"),
        (("bad_input", "ngram_loop"), False, None, "error"),
    ],
)
def test_decide_verdict(reasons: tuple, has_call: bool, finish: str | None, verdict: str) -> None:
    assert decide_verdict(reasons, has_call, finish) == verdict
