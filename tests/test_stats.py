"""Wilson interval: known values, edges, and the properties that make it the right choice."""

from __future__ import annotations

import pytest

from exporter.stats import wilson_interval


@pytest.mark.parametrize(
    ("k", "n", "low", "high"),
    [
        (0, 10, 0.0, 0.2775),
        (5, 10, 0.2366, 0.7634),
        (10, 10, 0.7225, 1.0),
        (1, 100, 0.0018, 0.0545),
        (81, 263, 0.2553, 0.3662),
    ],
)
def test_known_values(k: int, n: int, low: float, high: float) -> None:
    lo, hi = wilson_interval(k, n)
    assert lo == pytest.approx(low, abs=1e-4)
    assert hi == pytest.approx(high, abs=1e-4)


def test_no_data_means_no_information() -> None:
    assert wilson_interval(0, 0) == (0.0, 1.0)


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
