"""How much work a call does, counted instead of timed: the function calls it makes.

Timing belongs in bench/ (a loaded machine makes any time bound flaky); a count of the Python
and C function calls a pass makes is deterministic, and grows as its work does wherever that
work is a loop in Python or repeated calls of C primitives. A quadratic pass inside one C call
is not seen here: bench/bench_dsml.py times the same shapes.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import FrameType
from typing import Any


def calls_made(fn: Callable[[], object]) -> int:
    """Function calls (Python and C) made while ``fn`` runs."""
    n = 0

    def count(_frame: FrameType, _event: str, _arg: Any) -> None:
        nonlocal n
        n += 1

    sys.setprofile(count)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return n
