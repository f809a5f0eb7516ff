"""Small, dependency-free statistics for rates of bad outputs, shared by `scan`, `repro`
and `triage`: pure functions.

The on-call tools compare degenerate rates between concurrency levels and between A/B arms.
Rates near 0 with a few hundred samples are the normal case, so the interval has to behave at
k = 0 (Wilson, not the normal approximation) and the test has to be exact at small counts
(Fisher), while p-values down to 1e-300 must stay finite (log-space sums). scipy is not a
runtime dependency: the sidecar image stays small, and the tests cross-check against it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = [
    "SIGNIFICANCE",
    "SignificanceRule",
    "fisher_exact",
    "two_proportion_z",
    "wilson_interval",
]

# Relative tolerance when deciding which tables are "at least as extreme" as the observed one:
# tables with equal probability must be included although floating point makes them differ in
# the last bits (the same convention as R's fisher.test and scipy).
_FISHER_RTOL = 1e-7


def _check(bad: int, n: int, name: str) -> None:
    if isinstance(bad, bool) or isinstance(n, bool):
        raise TypeError(f"{name}: counts must be integers, not bool")
    if int(bad) != bad or int(n) != n:
        raise TypeError(f"{name}: counts must be integers")
    if n < 0 or bad < 0 or bad > n:
        raise ValueError(f"{name}: need 0 <= bad <= n, got bad={bad}, n={n}")


def wilson_interval(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval for k successes in n trials (95% for z = 1.96).

    Unlike the normal approximation it never leaves [0, 1] and is not degenerate at k = 0,
    which is exactly the "0 bad out of 600" case an A/B against a clean arm produces.
    With n = 0 nothing is known: (0.0, 1.0).
    """
    _check(k, n, "wilson_interval")
    if not z > 0:
        raise ValueError(f"z must be positive, got {z}")
    if n == 0:
        return 0.0, 1.0
    p = k / n
    z2 = z * z
    denom = 1.0 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = (z / denom) * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    low = 0.0 if k == 0 else max(0.0, centre - half)
    high = 1.0 if k == n else min(1.0, centre + half)
    return low, high


def _log_comb(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def fisher_exact(a_bad: int, a_n: int, b_bad: int, b_n: int) -> float:
    """Two-sided p-value of Fisher's exact test on the 2x2 table
    [[a_bad, a_n - a_bad], [b_bad, b_n - b_bad]].

    Conditioning on the margins, the number of bad outputs in arm A is hypergeometric; the
    p-value sums the probabilities of every table no more likely than the observed one. The
    sum runs in log space (log-sum-exp), so p-values like 1e-40 come out finite and exact to
    a few ulps instead of underflowing or losing everything to cancellation.
    """
    _check(a_bad, a_n, "fisher_exact arm A")
    _check(b_bad, b_n, "fisher_exact arm B")
    total = a_n + b_n
    bad = a_bad + b_bad
    lo = max(0, a_n - (total - bad))
    hi = min(a_n, bad)
    if lo == hi:
        return 1.0
    log_denominator = _log_comb(total, a_n)

    def log_pmf(x: int) -> float:
        return _log_comb(bad, x) + _log_comb(total - bad, a_n - x) - log_denominator

    observed = log_pmf(a_bad) + math.log1p(_FISHER_RTOL)
    terms = [lp for lp in (log_pmf(x) for x in range(lo, hi + 1)) if lp <= observed]
    peak = max(terms)
    log_p = peak + math.log(math.fsum(math.exp(t - peak) for t in terms))
    return min(1.0, math.exp(log_p))


def two_proportion_z(a_bad: int, a_n: int, b_bad: int, b_n: int) -> tuple[float, float]:
    """Pooled two-proportion z-test: (z, two-sided p) for rate A minus rate B.

    The large-sample companion of :func:`fisher_exact` (what most dashboards and papers
    quote); it is reported next to Fisher's p, never instead of it, because it is unreliable
    with few bad outputs. When either arm is empty, or both rates are 0 or both 1, there is
    no evidence of a difference: (0.0, 1.0).
    """
    _check(a_bad, a_n, "two_proportion_z arm A")
    _check(b_bad, b_n, "two_proportion_z arm B")
    if a_n == 0 or b_n == 0:
        return 0.0, 1.0
    pooled = (a_bad + b_bad) / (a_n + b_n)
    se = math.sqrt(pooled * (1 - pooled) * (1 / a_n + 1 / b_n))
    if se == 0.0:
        return 0.0, 1.0
    z = (a_bad / a_n - b_bad / b_n) / se
    return z, math.erfc(abs(z) / math.sqrt(2))


@dataclass(frozen=True)
class SignificanceRule:
    """The one rule by which `repro` and `triage` call a difference between two rates real.

    Both tools claim "corruption rises with concurrency" (and `repro --ab` "significant") on
    the same kind of evidence; with a threshold each they disagreed on the same data (repro
    said it rises at p = 0.013, triage that it did not). So the test, the level and the words
    live here once and both tools call :meth:`rises` and :meth:`trend_words`.

    Fisher's exact test, two-sided: exact at the small counts on-call runs produce. alpha =
    0.01 rather than 0.05: a verdict feeds a diagnosis that tells someone to turn HiCache off,
    and an on-call run compares several levels and arms, so the stricter level keeps the
    false-alarm rate of the whole report near 5%.
    """

    test: str = "fisher_exact"
    alpha: float = 0.01

    def p_value(self, low_k: int, low_n: int, high_k: int, high_n: int) -> float:
        """The rule's test on [[low_k, low_n - low_k], [high_k, high_n - high_k]]."""
        return fisher_exact(low_k, low_n, high_k, high_n)

    def significant(self, p_value: float, alpha: float | None = None) -> bool:
        return p_value < (self.alpha if alpha is None else alpha)

    def rises(
        self, p_value: float, low_rate: float, high_rate: float, alpha: float | None = None
    ) -> bool:
        """A rise is a significant difference in the rising direction."""
        return self.significant(p_value, alpha) and high_rate > low_rate

    @staticmethod
    def trend_words(rises: bool) -> str:
        """The one wording of the verdict, so a ticket reads the same from either tool."""
        return "rises with concurrency" if rises else "does not rise significantly with concurrency"


SIGNIFICANCE = SignificanceRule()
