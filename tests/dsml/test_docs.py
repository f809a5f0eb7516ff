"""docs/dsml-grading.md documents every verdict, reason code and threshold constant."""

from __future__ import annotations

from pathlib import Path

from exporter.dsml import REASON_SPECS, REASONS, VERDICTS
from exporter.dsml import thresholds as t

DOC = (Path(__file__).resolve().parents[2] / "docs" / "dsml-grading.md").read_text(encoding="utf-8")


def test_every_verdict_and_reason_is_documented_with_its_severity() -> None:
    for verdict in VERDICTS:
        assert f"| `{verdict}` |" in DOC, verdict
    for code in REASONS:
        row = next((line for line in DOC.splitlines() if line.startswith(f"| `{code}` |")), None)
        assert row is not None, code
        assert f"| {REASON_SPECS[code].severity} |" in row, (code, row)


def test_every_threshold_constant_is_named() -> None:
    names = [n for n in vars(t) if n.isupper()]
    assert names
    missing = [n for n in names if n not in DOC]
    assert not missing, missing
