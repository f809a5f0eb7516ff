"""V4.1 is graded like V4: every V4 trigger respelled in V4.1 fires the same reason, every V4
near miss respelled stays silent, and clean V4.1 output is well_formed with its calls."""

from __future__ import annotations

from dataclasses import replace

import pytest

from exporter.dsml import grade_text, render_completion
from exporter.dsml import markers as m
from tests.dsml.builders import Case
from tests.dsml.reason_cases import NEAR_MISSES, TRIGGERS

# Reasons about the spelling itself, or about V3.2/V4 (not V4.1) versions, do not carry over.
SPELLING = {"marker_spaced", "version_mismatch", "dialect_mismatch", "marker_damaged"}


def respell(text: str) -> str:
    """V4 tags to V4.1 tags (the V4 block name to ``calls``, a space after every marker)."""
    out = text.replace(m.block_open("v4"), m.block_open("v4.1"))
    out = out.replace(m.block_close("v4"), m.block_close("v4.1"))
    for name in (m.INVOKE, m.PARAMETER):
        out = out.replace(f"{m.MARKER}{name}", f"{m.MARKER} {name}")
    return out


def _v4_cases(table: dict[str, list[Case]]) -> list[tuple[str, Case]]:
    out = []
    for code, cases in table.items():
        if code in SPELLING:
            continue
        for case in cases:
            text = case.text or ""
            if m.MARKER not in text or m.BLOCK_NAMES["v3.2"] in text:
                continue
            if case.kwargs.get("grammar") not in (None, "v4"):
                continue
            kwargs = {**case.kwargs, "grammar": "v4.1"}
            out.append((code, replace(case, text=respell(text), kwargs=kwargs)))
    return out


TRIGGERS_41 = _v4_cases(TRIGGERS)
NEAR_41 = _v4_cases(NEAR_MISSES)


def test_enough_cases_carry_over() -> None:
    assert len(TRIGGERS_41) >= 25 and len(NEAR_41) >= 15


@pytest.mark.parametrize(("code", "case"), TRIGGERS_41, ids=lambda x: str(x))
def test_v41_trigger(code: str, case: Case) -> None:
    result = case.grade()
    assert code in result.reasons, (result.verdict, result.findings, case.text)
    if case.verdict is not None:
        assert result.verdict == case.verdict, result.findings


@pytest.mark.parametrize(("code", "case"), NEAR_41, ids=lambda x: str(x))
def test_v41_near_miss(code: str, case: Case) -> None:
    result = case.grade()
    assert code not in result.reasons, result.findings
    if case.verdict is not None:
        assert result.verdict == case.verdict, result.findings


def test_clean_v41_calls_are_extracted() -> None:
    calls = [("read_file", {"path": "a.py", "limit": 10}), ("list_tasks", {})]
    text = render_completion("Two things.", calls, reasoning="plan", grammar="v4.1", eos=True)
    result = grade_text(text, finish_reason="tool_calls")
    assert result.verdict == "well_formed" and result.grammar == "v4.1"
    assert [(c.name, c.arguments) for c in result.calls] == calls
    self_closing = render_completion("x", [("list_tasks", {})], grammar="v4.1", self_closing=True)
    assert grade_text(self_closing, grammar="v4.1").verdict == "well_formed"


def test_streamed_v41_grades_as_whole() -> None:
    from exporter.dsml import StreamingGrader

    text = respell(TRIGGERS["json_invalid"][0].text or "") + "\n" + m.EOS
    for size in (1, 3, 7, 64):
        g = StreamingGrader(grammar="v4.1")
        data = text.encode()
        for i in range(0, len(data), size):
            g.feed(data[i : i + size])
        assert g.finish("stop") == grade_text(text, grammar="v4.1", finish_reason="stop")
