"""What a `repro` run produces, without running anything: arms, per-level results, the
low-vs-high concurrency trend, the A/B comparison and the report (JSON in and out).

Pure data and statistics (no I/O, no aiohttp), so the triage diagnosis can read a saved
report without pulling in the load generator; :mod:`exporter.oncall.repro` is the runner.
"""

from __future__ import annotations

import math
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from exporter.causes import CAUSES, NON_JSON
from exporter.stats import SIGNIFICANCE, fisher_exact, two_proportion_z, wilson_interval

DEFAULT_LEVELS: tuple[int, ...] = (1, 8, 16, 32, 64)
DEFAULT_REQUESTS = 100
DEFAULT_ALPHA = SIGNIFICANCE.alpha  # `--alpha` overrides it per run; the report records it
P_FLOOR = 1e-20  # below this a p-value is printed as "p < 1e-20": more digits mean nothing
# Why a request counts as an error, beyond the outbound causes ("connection refused", ...).
UNGRADABLE = "ungradable answer"  # HTTP 200 and JSON, but no completion the grader can read
NO_ANSWER = "no answer"
OTHER_CAUSE = "other"
_OWN_CAUSES = frozenset((NON_JSON, UNGRADABLE, NO_ANSWER, OTHER_CAUSE))
_HTTP_CAUSE = re.compile(r"HTTP [1-5][0-9][0-9]")  # causes.http_status()


def error_cause(text: str | None) -> str:
    """The bounded cause string a failed request is counted under: one of outbound's
    :data:`~exporter.outbound.CAUSES`, ``HTTP <status>``, or this module's own words; anything
    else (a report file edited by hand) is ``other``, so a report never carries free text."""
    if text is None:
        return NO_ANSWER
    if text in _OWN_CAUSES or text in CAUSES or _HTTP_CAUSE.fullmatch(text):
        return text
    return OTHER_CAUSE


def causes_text(causes: Counter) -> str:
    """ "connection refused: 5, HTTP 503: 2" (most frequent first)."""
    return ", ".join(f"{c}: {n}" for c, n in sorted(causes.items(), key=lambda kv: (-kv[1], kv[0])))


def errors_cell(errors: int, causes: Counter) -> str:
    """ "5 (connection refused: 5)": the count with why, so a dead arm is not a mystery."""
    return f"{errors} ({causes_text(causes)})" if errors and causes else str(errors)


@dataclass(frozen=True)
class Arm:
    """One endpoint under test. ``label`` names it in reports ("bf16 index-K")."""

    label: str
    url: str
    model: str | None = None
    # the serving engine (sglang, vllm): each arm is graded as its own parser delivers blocks
    engine: str | None = None


@dataclass
class LevelResult:
    """What one arm produced at one concurrency level."""

    concurrency: int
    requests: int = 0  # answers graded (HTTP 200 with a readable body)
    degenerate: int = 0
    errors: int = 0  # timeouts, connection errors, HTTP errors, unreadable bodies
    error_causes: Counter = field(default_factory=Counter)  # error_cause() -> count
    verdicts: Counter = field(default_factory=Counter)
    reasons: Counter = field(default_factory=Counter)
    latencies: list[float] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def rate(self) -> float:
        return self.degenerate / self.requests if self.requests else 0.0

    @property
    def ci(self) -> tuple[float, float]:
        return wilson_interval(self.degenerate, self.requests)

    def to_json(self) -> dict[str, Any]:
        low, high = self.ci
        lat = sorted(self.latencies)
        return {
            "concurrency": self.concurrency,
            "requests": self.requests,
            "degenerate": self.degenerate,
            "rate": round(self.rate, 6),
            "ci_low": round(low, 6),
            "ci_high": round(high, 6),
            "errors": self.errors,
            "error_causes": dict(self.error_causes.most_common()),
            "verdicts": dict(sorted(self.verdicts.items())),
            "reasons": dict(self.reasons.most_common()),
            "latency_p50_s": round(lat[len(lat) // 2], 4) if lat else None,
            "seconds": round(self.seconds, 3),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> LevelResult:
        return cls(
            concurrency=int(d["concurrency"]),
            requests=int(d["requests"]),
            degenerate=int(d["degenerate"]),
            errors=int(d.get("errors", 0)),
            error_causes=_read_causes(d.get("error_causes")),
            verdicts=Counter(d.get("verdicts") or {}),
            reasons=Counter(d.get("reasons") or {}),
            seconds=float(d.get("seconds", 0.0)),
        )


def _read_causes(raw: Any) -> Counter:
    """Error causes from a saved report, re-bounded (the file is input like any other)."""
    out: Counter = Counter()
    if isinstance(raw, dict):
        for cause, n in raw.items():
            if isinstance(cause, str) and isinstance(n, int) and not isinstance(n, bool) and n > 0:
                out[error_cause(cause)] += n
    return out


@dataclass(frozen=True)
class Trend:
    """Lowest versus highest concurrency level of one arm: does corruption follow load?"""

    low: int
    high: int
    low_rate: float
    high_rate: float
    p_value: float
    rises: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "low": self.low,
            "high": self.high,
            "low_rate": round(self.low_rate, 6),
            "high_rate": round(self.high_rate, 6),
            "p_value": self.p_value,
            "rises": self.rises,
        }


def level_trend(levels: list[LevelResult], alpha: float = DEFAULT_ALPHA) -> Trend | None:
    """Fisher's test between the lowest and the highest level that graded anything."""
    populated = sorted((lv for lv in levels if lv.requests), key=lambda lv: lv.concurrency)
    if len(populated) < 2 or populated[0].concurrency == populated[-1].concurrency:
        return None
    lo, hi = populated[0], populated[-1]
    p = SIGNIFICANCE.p_value(lo.degenerate, lo.requests, hi.degenerate, hi.requests)
    return Trend(
        lo.concurrency,
        hi.concurrency,
        lo.rate,
        hi.rate,
        p,
        SIGNIFICANCE.rises(p, lo.rate, hi.rate, alpha),
    )


@dataclass
class ArmResult:
    arm: Arm
    levels: list[LevelResult] = field(default_factory=list)

    @property
    def requests(self) -> int:
        return sum(lv.requests for lv in self.levels)

    @property
    def degenerate(self) -> int:
        return sum(lv.degenerate for lv in self.levels)

    @property
    def errors(self) -> int:
        return sum(lv.errors for lv in self.levels)

    @property
    def error_causes(self) -> Counter:
        out: Counter = Counter()
        for lv in self.levels:
            out.update(lv.error_causes)
        return out

    def trend(self, alpha: float = DEFAULT_ALPHA) -> Trend | None:
        return level_trend(self.levels, alpha)

    def to_json(self, alpha: float = DEFAULT_ALPHA) -> dict[str, Any]:
        low, high = wilson_interval(self.degenerate, self.requests)
        trend = self.trend(alpha)
        reasons: Counter = Counter()
        for lv in self.levels:
            reasons.update(lv.reasons)
        return {
            "label": self.arm.label,
            "url": self.arm.url,
            "model": self.arm.model,
            "engine": self.arm.engine,
            "levels": [lv.to_json() for lv in self.levels],
            "total": {
                "requests": self.requests,
                "degenerate": self.degenerate,
                "rate": round(self.degenerate / self.requests, 6) if self.requests else 0.0,
                "ci_low": round(low, 6),
                "ci_high": round(high, 6),
                "errors": self.errors,
                "error_causes": dict(self.error_causes.most_common()),
                "reasons": dict(reasons.most_common()),
            },
            "trend": trend.to_json() if trend else None,
        }


@dataclass(frozen=True)
class Comparison:
    """A versus B over everything both arms completed (pooled over levels: both arms ran the
    same levels at the same time, so pooling compares like with like)."""

    a: str
    b: str
    a_bad: int
    a_n: int
    b_bad: int
    b_n: int
    p_value: float
    z: float
    z_p_value: float
    alpha: float
    per_level: tuple[tuple[int, float], ...]

    @property
    def significant(self) -> bool:
        return self.a_n > 0 and self.b_n > 0 and SIGNIFICANCE.significant(self.p_value, self.alpha)

    @property
    def summary(self) -> str:
        verdict = "significant" if self.significant else f"not significant at {self.alpha:g}"
        return (
            f"{self.a} {self.a_bad}/{self.a_n} vs {self.b} {self.b_bad}/{self.b_n}, "
            f"{format_p(self.p_value)}: {verdict}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "test": "fisher_exact",
            "a": self.a,
            "b": self.b,
            "a_degenerate": self.a_bad,
            "a_requests": self.a_n,
            "b_degenerate": self.b_bad,
            "b_requests": self.b_n,
            "p_value": self.p_value,
            "significant": self.significant,
            "alpha": self.alpha,
            "z": round(self.z, 4),
            "z_p_value": self.z_p_value,
            "per_level": [{"concurrency": c, "p_value": p} for c, p in self.per_level],
            "summary": self.summary,
        }


def compare(a: ArmResult, b: ArmResult, alpha: float = DEFAULT_ALPHA) -> Comparison:
    p = SIGNIFICANCE.p_value(a.degenerate, a.requests, b.degenerate, b.requests)
    z, zp = two_proportion_z(a.degenerate, a.requests, b.degenerate, b.requests)
    per_level = []
    b_levels = {lv.concurrency: lv for lv in b.levels}
    for lv in a.levels:
        other = b_levels.get(lv.concurrency)
        if other is not None and lv.requests and other.requests:
            per_level.append(
                (
                    lv.concurrency,
                    fisher_exact(lv.degenerate, lv.requests, other.degenerate, other.requests),
                )
            )
    return Comparison(
        a.arm.label,
        b.arm.label,
        a.degenerate,
        a.requests,
        b.degenerate,
        b.requests,
        p,
        z,
        zp,
        alpha,
        tuple(per_level),
    )


def format_p(p: float) -> str:
    """ "p < 1e-20" for vanishing p-values, otherwise two significant digits."""
    if p < P_FLOOR:
        return f"p < {P_FLOOR:.0e}"
    if p < 1e-3:
        return f"p = {p:.1e}"
    return f"p = {p:.3f}" if p < 0.995 else "p = 1"


@dataclass
class ReproReport:
    arms: list[ArmResult]
    alpha: float = DEFAULT_ALPHA
    interrupted: bool = False
    levels_planned: tuple[int, ...] = ()
    settings: dict[str, Any] = field(default_factory=dict)
    started_at: float = field(default_factory=time.time)
    seconds: float = 0.0

    @property
    def comparison(self) -> Comparison | None:
        if len(self.arms) != 2:
            return None
        return compare(self.arms[0], self.arms[1], self.alpha)

    @property
    def graded(self) -> int:
        return sum(a.requests for a in self.arms)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": "dsv4-sidecar/repro",
            "alpha": self.alpha,
            "arms": [a.to_json(self.alpha) for a in self.arms],
            "interrupted": self.interrupted,
            "levels_planned": list(self.levels_planned),
            "settings": self.settings,
            "started_at": self.started_at,
            "seconds": round(self.seconds, 3),
        }
        cmp = self.comparison
        if cmp is not None:
            out["comparison"] = cmp.to_json()
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ReproReport:
        """Rebuild a report from `repro --json` output (for triage)."""
        arms = [
            ArmResult(
                Arm(a.get("label") or a["url"], a["url"], a.get("model"), a.get("engine")),
                [LevelResult.from_json(lv) for lv in a.get("levels") or []],
            )
            for a in d.get("arms") or []
        ]
        return cls(
            arms,
            alpha=float(d.get("alpha", (d.get("comparison") or {}).get("alpha", DEFAULT_ALPHA))),
            interrupted=bool(d.get("interrupted", False)),
            levels_planned=tuple(d.get("levels_planned") or ()),
            settings=dict(d.get("settings") or {}),
            started_at=float(d.get("started_at") or 0.0),
            seconds=float(d.get("seconds") or 0.0),
        )


def parse_levels(spec: str) -> tuple[int, ...]:
    """ "1,8,16" -> (1, 8, 16): sorted, de-duplicated, each 1..1024."""
    try:
        values = sorted({int(x) for x in spec.split(",") if x.strip()})
    except ValueError:
        raise ValueError(f"--concurrency must be comma-separated integers, got {spec!r}") from None
    if not values or values[0] < 1 or values[-1] > 1024:
        raise ValueError(f"--concurrency levels must be between 1 and 1024, got {spec!r}")
    return tuple(values)


def is_finite_positive(x: float | None) -> bool:
    return x is not None and math.isfinite(x) and x > 0
