"""Linear work on inputs built to defeat regex-based graders (naive lazy patterns went quadratic
or cubic on these shapes in the measurements that motivated the design).

Counted, not timed (tests/dsml/opcount.py): 4x the input makes at most about 4x the calls
(quadratic would be 16x). The times of the same shapes are bench rows (bench/bench_dsml.py).
"""

from __future__ import annotations

import pytest

from exporter.dsml import grade_text
from tests.dsml.adversarial import SHAPES
from tests.dsml.opcount import calls_made


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_grading_work_grows_linearly(shape: str) -> None:
    small = SHAPES[shape](25_000)
    large = SHAPES[shape](100_000)
    n_small = calls_made(lambda: grade_text(small, finish_reason="stop", thinking=None))
    n_large = calls_made(lambda: grade_text(large, finish_reason="stop", thinking=None))
    assert n_large <= 5 * max(n_small, 200), (n_small, n_large)
    result = grade_text(SHAPES[shape](400_000))
    assert result.verdict in ("well_formed", "no_tool_call", "suspect", "truncated", "degenerate")
