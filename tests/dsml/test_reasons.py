"""Every reason code fires on its triggers and stays silent on its near misses."""

from __future__ import annotations

import pytest

from exporter.dsml import REASON_SPECS, REASONS
from tests.dsml.builders import Case
from tests.dsml.reason_cases import NEAR_MISSES, TRIGGERS


def _cases(table: dict[str, list[Case]]) -> list[tuple[str, Case]]:
    return [(code, case) for code, cases in table.items() for case in cases]


def test_every_reason_has_triggers_and_near_misses() -> None:
    assert set(TRIGGERS) == set(REASONS)
    assert set(NEAR_MISSES) == set(REASONS)
    assert all(TRIGGERS[c] and NEAR_MISSES[c] for c in REASONS)


@pytest.mark.parametrize(("code", "case"), _cases(TRIGGERS), ids=lambda x: str(x))
def test_trigger(code: str, case: Case) -> None:
    result = case.grade()
    assert code in result.reasons, (result.verdict, result.findings)
    if case.verdict is not None:
        assert result.verdict == case.verdict, result.findings
    elif REASON_SPECS[code].severity == "hard":
        assert result.verdict == "degenerate"
    finding = next(f for f in result.findings if f.reason == code)
    assert 0 <= finding.start <= finding.end <= max(len(result.text), finding.end)


@pytest.mark.parametrize(("code", "case"), _cases(NEAR_MISSES), ids=lambda x: str(x))
def test_near_miss(code: str, case: Case) -> None:
    result = case.grade()
    assert code not in result.reasons, result.findings
    if case.verdict is not None:
        assert result.verdict == case.verdict, result.findings
