"""One significance rule for `repro` and `triage` (exporter/stats.py: SIGNIFICANCE).

The issue's case: on the same counts repro said corruption "rises with concurrency"
(p = 0.013, its alpha 0.05) and triage that it "does not rise significantly" (its alpha 0.01).
Here both tools read the same counts and must give the same verdict in the same words.
"""

from __future__ import annotations

import json

import pytest

from exporter.oncall.repro_render import summary_lines
from exporter.oncall.repro_report import Arm, ArmResult, LevelResult, ReproReport
from exporter.oncall.triage.diagnosis import _trend_lines, bucket_trend, derive_facts
from exporter.oncall.triage.evidence import BucketCount, Evidence
from exporter.stats import SIGNIFICANCE, fisher_exact

# (low k, low n, high k, high n): the p = 0.013, a clear rise, a clear non-rise, and a
# significant *fall* (significant, but not a rise)
CASES = [(5, 150, 17, 150), (0, 200, 30, 200), (6, 200, 7, 200), (20, 150, 4, 150)]


def _report(lk: int, ln: int, hk: int, hn: int, alpha: float | None = None) -> ReproReport:
    arm = ArmResult(Arm("bf16", "http://b"), [LevelResult(1, ln, lk), LevelResult(64, hn, hk)])
    if alpha is None:
        return ReproReport([arm])
    return ReproReport([arm], alpha=alpha)


def _words(line: str) -> str:
    for verdict in (True, False):
        if SIGNIFICANCE.trend_words(verdict) in line:
            return SIGNIFICANCE.trend_words(verdict)
    raise AssertionError(f"no verdict wording in {line!r}")


def test_the_rule_is_fisher_at_one_alpha() -> None:
    assert SIGNIFICANCE.test == "fisher_exact"
    assert SIGNIFICANCE.p_value(5, 150, 17, 150) == fisher_exact(5, 150, 17, 150)
    p = fisher_exact(5, 150, 17, 150)
    assert 0.01 < p < 0.05  # the case sits between the two old thresholds
    assert not SIGNIFICANCE.rises(p, 5 / 150, 17 / 150)
    assert SIGNIFICANCE.rises(p, 5 / 150, 17 / 150, alpha=0.05)
    assert not SIGNIFICANCE.rises(1e-9, 0.2, 0.1)  # significant but falling


@pytest.mark.parametrize(("lk", "ln", "hk", "hn"), CASES)
def test_repro_and_triage_agree_on_the_same_counts(lk: int, ln: int, hk: int, hn: int) -> None:
    p = fisher_exact(lk, ln, hk, hn)
    expected = p < SIGNIFICANCE.alpha and hk / hn > lk / ln
    report = _report(lk, ln, hk, hn)
    repro_trend = report.arms[0].trend(report.alpha)
    assert repro_trend is not None and repro_trend.rises is expected
    # triage reading the saved repro result (what `triage --repro` does)
    facts = derive_facts(Evidence(repro=json.loads(json.dumps(report.to_json()))))
    (from_repro,) = facts.trends
    assert from_repro.rises is expected and from_repro.p_value == pytest.approx(p)
    # triage reading the same counts as the sidecar's concurrency buckets
    from_buckets = bucket_trend([BucketCount("1", ln, lk), BucketCount("64", hn, hk)], "x")
    assert from_buckets is not None and from_buckets.rises is expected
    # and both print the same words
    words = SIGNIFICANCE.trend_words(expected)
    assert _words(summary_lines(report)[0]) == words
    assert [_words(line) for line in _trend_lines(facts)] == [words]


def test_a_repro_run_with_its_own_alpha_is_read_back_with_it() -> None:
    """`repro --alpha 0.05` is recorded in the report; triage reads the result as repro
    printed it rather than re-judging it at the default."""
    report = _report(5, 150, 17, 150, alpha=0.05)
    doc = json.loads(json.dumps(report.to_json()))
    assert doc["alpha"] == 0.05
    assert _words(summary_lines(report)[0]) == SIGNIFICANCE.trend_words(True)
    facts = derive_facts(Evidence(repro=doc))
    assert facts.trends[0].rises and facts.rises
