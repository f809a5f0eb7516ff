"""Threshold values in the runbooks and promtool tests, rendered from the alert config.

A runbook that says "above 1 GiB" and a promtool test that feeds ``1073741825`` restate a
knob; written by hand they drift from the rule when the knob changes. Their sources are
templates instead (``docs/runbooks/templates/*.md.in``, ``alerts/tests/templates/*.yaml.in``)
where every such number is a placeholder, and ``python -m alerts.generate`` renders them with
the same :class:`~exporter.thresholds.AlertConfig` as the rules (``--check`` fails when a
committed rendering is stale). A placeholder is::

    ${knob}            the value as the rule file writes it (1073741824, 0.02, 5m)
    ${knob+1}          arithmetic: + - * with a number, or with a duration for duration knobs
                       (${kv_overcommit_for+3m} -> 8m)
    ${knob|fmt}        formatted: bytes (1 GiB), hb (1GiB, as descriptions say a threshold),
                       h1024 (Prometheus humanize1024: 1Gi), pct (2%), hpct (Prometheus
                       humanizePercentage: 2%), dur (seconds as a duration: 1h), int
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable
from typing import Any

from alerts.text import human_bytes, num, pct
from exporter.thresholds import AlertConfig, duration, seconds
from exporter.units import GIB, MIB

PLACEHOLDER = re.compile(
    r"\$\{\s*(?P<knob>[a-z][a-z0-9_]*)\s*"
    r"(?:(?P<op>[-+*])\s*(?P<operand>[0-9]+(?:\.[0-9]+)?(?:ms|[smhdwy])?))?\s*"
    r"(?:\|\s*(?P<fmt>[a-z0-9]+))?\s*\}"
)
_OPS: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
}
_PREFIXES_1024 = ("ki", "Mi", "Gi", "Ti", "Pi", "Ei", "Zi", "Yi")


def _go_g(x: float) -> str:
    """Go's ``%.4g`` (Prometheus' template functions): Python's, with Go's exponent form."""
    return re.sub(r"e([+-])0?(\d\d)", r"e\1\2", f"{x:.4g}")


def humanize1024(x: float) -> str:
    """Prometheus' ``humanize1024`` template function (1073741825 -> ``1Gi``)."""
    if abs(x) <= 1 or math.isnan(x) or math.isinf(x):
        return _go_g(x)
    prefix = ""
    for p in _PREFIXES_1024:
        if abs(x) < 1024:
            break
        prefix, x = p, x / 1024
    return _go_g(x) + prefix


def prose_bytes(n: float) -> str:
    """Bytes as prose says them: ``1 GiB``, ``512 MiB``, ``0.5 GiB`` (runbooks)."""
    if n >= GIB or n % MIB:
        return f"{n / GIB:g} GiB"
    return f"{n / MIB:g} MiB"


FORMATS: dict[str, Callable[[Any], str]] = {
    "bytes": prose_bytes,
    "hb": lambda v: human_bytes(int(v)),
    "h1024": humanize1024,
    "pct": pct,
    "hpct": lambda v: _go_g(v * 100) + "%",
    "dur": duration,
    "int": lambda v: str(round(v)),
}


def _plain(value: Any) -> str:
    if isinstance(value, float):
        return num(value)
    return str(value)


def value(cfg: AlertConfig, match: re.Match[str]) -> str:
    """One placeholder's text; ``ValueError`` naming an unknown knob, format or operand."""
    knob, op, operand, fmt = match.group("knob", "op", "operand", "fmt")
    if knob not in vars(cfg):
        raise ValueError(f"unknown knob {knob!r} in {match.group(0)}")
    v: Any = getattr(cfg, knob)
    if op is not None:
        if isinstance(v, str):  # a duration knob: duration arithmetic, a duration out
            rhs = float(operand) if op == "*" else seconds(operand)
            v = duration(_OPS[op](seconds(v), rhs))
        else:
            v = _OPS[op](v, float(operand) if "." in operand else int(operand))
    if fmt is None:
        return _plain(v)
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r} in {match.group(0)}; known: {', '.join(FORMATS)}")
    return FORMATS[fmt](v)


def render(template: str, cfg: AlertConfig, name: str = "template") -> str:
    """``template`` with every placeholder replaced by its value under ``cfg``."""
    try:
        out = PLACEHOLDER.sub(lambda m: value(cfg, m), template)
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None
    if "${" in out:  # a malformed placeholder would otherwise ship as text
        bad = out[out.index("${") :].split("}", 1)[0] + "}"
        raise ValueError(f"{name}: malformed placeholder {bad!r}")
    return out


def knobs_used(template: str) -> set[str]:
    """The knobs a template's placeholders read (the generator's report, and the tests')."""
    return {m.group("knob") for m in PLACEHOLDER.finditer(template)}
