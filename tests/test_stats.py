"""exporter.stats (Wilson interval, Fisher's exact test, two-proportion z) against
hand-computed values, scipy (a test-only dependency) and the properties that make each the
right choice for small counts."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as sps

from exporter.stats import fisher_exact, two_proportion_z, wilson_interval

Z975 = 1.959963984540054  # scipy's exact 97.5% normal quantile


def test_wilson_hand_values() -> None:
    # 0/10: centre = half = (1.96^2/20) / (1 + 1.96^2/10) = 0.138770...
    # 5/10: 0.5 -+ (1.96/1.38416) * sqrt(0.025 + 1.96^2/400) = 0.5 -+ 0.263410
    low, high = wilson_interval(0, 10)
    assert low == 0.0 and high == pytest.approx(0.277540, abs=1e-6)
    low, high = wilson_interval(5, 10)
    assert (low, high) == (pytest.approx(0.236590, abs=1e-6), pytest.approx(0.763410, abs=1e-6))
    low, high = wilson_interval(10, 10)
    assert high == 1.0 and low == pytest.approx(1 - 0.277540, abs=1e-6)
    assert wilson_interval(0, 0) == (0.0, 1.0)


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 5000).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n))))
def test_wilson_matches_scipy(kn):
    k, n = kn
    ref = sps.binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    low, high = wilson_interval(k, n, z=Z975)
    assert low == pytest.approx(ref.low, abs=1e-9) and high == pytest.approx(ref.high, abs=1e-9)
    assert 0.0 <= low <= k / n <= high <= 1.0


def test_fisher_hand_values():
    # Fisher's tea-tasting table [[3, 1], [1, 3]]: two-sided p = 17/35
    assert fisher_exact(3, 4, 1, 4) == pytest.approx(17 / 35, rel=1e-12)
    # [[1, 9], [11, 3]]: the classic textbook example, p = 0.002759...
    assert fisher_exact(1, 10, 11, 14) == pytest.approx(0.0027594561852200836, rel=1e-9)
    assert fisher_exact(0, 0, 5, 10) == 1.0  # an empty arm carries no evidence
    assert fisher_exact(0, 50, 0, 50) == 1.0
    assert fisher_exact(7, 7, 0, 7) == pytest.approx(2 / math.comb(14, 7), rel=1e-12)


def test_fisher_issue_example_is_tiny_but_finite():
    # "fp8 index-K 0/600 vs bf16 index-K 102/600, p < 1e-20"
    p = fisher_exact(0, 600, 102, 600)
    ref = sps.fisher_exact([[0, 600], [102, 498]]).pvalue
    assert 0 < p < 1e-20
    assert p == pytest.approx(ref, rel=1e-6)
    # far below what a naive product of probabilities keeps: log-space sums stay finite
    tiny = fisher_exact(0, 5000, 700, 5000)
    assert 0 < tiny < 1e-200
    assert math.log(tiny) == pytest.approx(
        math.log(sps.fisher_exact([[0, 5000], [700, 4300]]).pvalue), rel=1e-6
    )


tables = st.tuples(st.integers(0, 300), st.integers(0, 300)).flatmap(
    lambda ns: st.tuples(
        st.integers(0, ns[0]), st.just(ns[0]), st.integers(0, ns[1]), st.just(ns[1])
    )
)


@settings(max_examples=300, deadline=None)
@given(tables)
def test_fisher_matches_scipy(t):
    a_bad, a_n, b_bad, b_n = t
    ref = sps.fisher_exact([[a_bad, a_n - a_bad], [b_bad, b_n - b_bad]]).pvalue
    p = fisher_exact(a_bad, a_n, b_bad, b_n)
    assert p == pytest.approx(min(1.0, ref), rel=1e-7, abs=1e-12)
    assert p == pytest.approx(fisher_exact(b_bad, b_n, a_bad, a_n), rel=1e-9, abs=1e-15)


def test_two_proportion_z_hand_and_scipy():
    # 10/100 vs 20/100: pooled 0.15, se = sqrt(0.15 * 0.85 * 0.02) = 0.0504975
    z, p = two_proportion_z(10, 100, 20, 100)
    assert z == pytest.approx(-1.980295, abs=1e-6)
    assert p == pytest.approx(2 * sps.norm.sf(1.980295), rel=1e-5)
    assert p == pytest.approx(0.047671, abs=1e-6)
    z2, p2 = two_proportion_z(20, 100, 10, 100)
    assert z2 == pytest.approx(-z) and p2 == pytest.approx(p)
    assert two_proportion_z(0, 100, 0, 100) == (0.0, 1.0)
    assert two_proportion_z(0, 0, 3, 10) == (0.0, 1.0)


@pytest.mark.parametrize(
    ("fn", "args", "exc"),
    [
        (wilson_interval, (3, 2), ValueError),
        (wilson_interval, (-1, 2), ValueError),
        (wilson_interval, (True, 2), TypeError),
        (fisher_exact, (1, 2, 3, 2), ValueError),
        (fisher_exact, (1.5, 2, 0, 2), TypeError),
        (two_proportion_z, (0, -1, 0, 1), ValueError),
    ],
)
def test_bad_counts_rejected(fn, args, exc):
    with pytest.raises(exc):
        fn(*args)


def test_interval_contains_estimate_and_narrows_with_n() -> None:
    for n in (10, 100, 1000):
        lo, hi = wilson_interval(n // 4, n)
        assert lo <= 0.25 <= hi
    widths = [
        wilson_interval(n // 4, n)[1] - wilson_interval(n // 4, n)[0] for n in (10, 100, 1000)
    ]
    assert widths == sorted(widths, reverse=True)


def test_wider_for_higher_confidence() -> None:
    lo95, hi95 = wilson_interval(3, 30)
    lo99, hi99 = wilson_interval(3, 30, z=2.576)
    assert lo99 < lo95 and hi99 > hi95


@pytest.mark.parametrize(("k", "n", "z"), [(-1, 5, 1.96), (6, 5, 1.96), (1, -1, 1.96), (1, 5, 0)])
def test_rejects_impossible_counts(k: int, n: int, z: float) -> None:
    with pytest.raises(ValueError):
        wilson_interval(k, n, z)
