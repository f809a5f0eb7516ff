"""Linear time on inputs built to defeat regex-based graders (naive lazy patterns went quadratic
or cubic on these shapes in the measurements that motivated the design)."""

from __future__ import annotations

import time

import pytest

from exporter.dsml import grade_text
from tests.dsml.adversarial import SHAPES


def _seconds(text: str) -> float:
    best = float("inf")
    for _ in range(2):
        t0 = time.thread_time()
        grade_text(text, finish_reason="stop", thinking=None)
        best = min(best, time.thread_time() - t0)
    return best


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_grading_time_grows_linearly(shape: str) -> None:
    small = SHAPES[shape](100_000)
    large = SHAPES[shape](400_000)
    t_small, t_large = _seconds(small), _seconds(large)
    # 4x the input: linear is ~4x, quadratic 16x; the floor absorbs timer noise on tiny times
    assert t_large <= 8 * max(t_small, 0.002), (t_small, t_large)
    assert t_large < 2.0
    result = grade_text(large)
    assert result.verdict in ("well_formed", "no_tool_call", "suspect", "truncated", "degenerate")
