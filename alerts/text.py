"""How numbers are written into rule expressions and descriptions.

A leaf module: the rule groups (``alerts.rules``), the fleet alerts (``alerts.fleet``), the
values table (``alerts.values``) and the mixin generator all format the same thresholds, and
the fleet alerts are built from inside ``alerts.rules``; kept here, none imports another for
these three helpers (no import cycle).
"""

from __future__ import annotations

from exporter.units import GIB, MIB


def human_bytes(n: int) -> str:
    """Bytes as the text of a description (1073741824 -> '1GiB'), exact where possible."""
    for unit, size in (("GiB", GIB), ("MiB", MIB)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return f"{n}B"


def num(x: float) -> str:
    """A number for PromQL at full precision (``:g`` would round 0.2500001 to 0.25)."""
    text = repr(float(x))
    return text.removesuffix(".0")


def pct(ratio: float) -> str:
    """A ratio as a percentage for descriptions (0.02 -> '2%')."""
    return f"{ratio * 100:g}%"
