"""Concurrency buckets for the corruption rate: bounded label values for `concurrency_le`.

Non-cumulative: each sample is counted once, in the smallest bucket whose bound holds its
concurrency, so ``sum by (concurrency_le)`` needs no differencing and "fine at 1, broken at
60" reads straight off the series.
"""

from __future__ import annotations

CONCURRENCY_BUCKETS: tuple[int, ...] = (1, 4, 8, 16, 32, 64, 128)
BUCKET_LABELS: tuple[str, ...] = (*(str(b) for b in CONCURRENCY_BUCKETS), "+Inf")


def bucket_label(concurrency: int | float | None) -> str:
    """The smallest ``le`` bound holding ``concurrency``; unknown concurrency counts as 1."""
    c = 1 if concurrency is None else concurrency
    for b in CONCURRENCY_BUCKETS:
        if c <= b:
            return str(b)
    return "+Inf"
