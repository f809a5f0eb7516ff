"""The `repro` harness: graded load against one endpoint, or two arms A/B at the same load.

For each concurrency level, every arm gets ``concurrency`` multi-turn tool-calling sessions
(the load generator) at the same time, bounded by a request count and/or a duration; each
answer is graded by the DSML grader as it arrives. The result is the degenerate rate per
arm and level with a Wilson 95% interval, the reasons, a low-vs-high-concurrency trend test
per arm and, with two arms, Fisher's exact test on the pooled counts. The arms run
simultaneously (not one after the other) so that whatever else changes during the run hits
both alike.

Everything the runner learns is kept on the runner as it happens, so an interrupted run
(Ctrl-C) still yields a report of what completed.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from exporter.dsml import DEGENERATE, ERROR, grade_openai_response
from exporter.loadgen import Exchange, LoadGenerator
from exporter.oncall.samples import SampleWriter
from exporter.stats import fisher_exact, two_proportion_z, wilson_interval

DEFAULT_LEVELS: tuple[int, ...] = (1, 8, 16, 32, 64)
DEFAULT_REQUESTS = 100
DEFAULT_ALPHA = 0.05
P_FLOOR = 1e-20  # below this a p-value is printed as "p < 1e-20": more digits mean nothing


@dataclass(frozen=True)
class Arm:
    """One endpoint under test. ``label`` names it in reports ("bf16 index-K")."""

    label: str
    url: str
    model: str | None = None


@dataclass
class LevelResult:
    """What one arm produced at one concurrency level."""

    concurrency: int
    requests: int = 0  # answers graded (HTTP 200 with a readable body)
    degenerate: int = 0
    errors: int = 0  # timeouts, connection errors, HTTP errors, unreadable bodies
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
            verdicts=Counter(d.get("verdicts") or {}),
            reasons=Counter(d.get("reasons") or {}),
            seconds=float(d.get("seconds", 0.0)),
        )


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
    p = fisher_exact(lo.degenerate, lo.requests, hi.degenerate, hi.requests)
    return Trend(
        lo.concurrency, hi.concurrency, lo.rate, hi.rate, p, p < alpha and hi.rate > lo.rate
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
            "levels": [lv.to_json() for lv in self.levels],
            "total": {
                "requests": self.requests,
                "degenerate": self.degenerate,
                "rate": round(self.degenerate / self.requests, 6) if self.requests else 0.0,
                "ci_low": round(low, 6),
                "ci_high": round(high, 6),
                "errors": self.errors,
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
        return self.a_n > 0 and self.b_n > 0 and self.p_value < self.alpha

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
    p = fisher_exact(a.degenerate, a.requests, b.degenerate, b.requests)
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
                Arm(a.get("label") or a["url"], a["url"], a.get("model")),
                [LevelResult.from_json(lv) for lv in a.get("levels") or []],
            )
            for a in d.get("arms") or []
        ]
        return cls(
            arms,
            alpha=float((d.get("comparison") or {}).get("alpha", DEFAULT_ALPHA)),
            interrupted=bool(d.get("interrupted", False)),
            levels_planned=tuple(d.get("levels_planned") or ()),
            settings=dict(d.get("settings") or {}),
            started_at=float(d.get("started_at") or 0.0),
            seconds=float(d.get("seconds") or 0.0),
        )


async def discover_model(url: str, timeout: float = 5.0) -> str | None:
    """The first model id the endpoint lists at /v1/models (None when it lists none)."""
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session,
            session.get(url.rstrip("/") + "/v1/models") as resp,
        ):
            if resp.status != 200:
                return None
            data = json.loads(await resp.read())
        return str(data["data"][0]["id"])
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, KeyError, IndexError, TypeError):
        return None


ExchangeCallback = Callable[[int, LevelResult], None]
LevelCallback = Callable[[int, int], None]


class ReproRunner:
    """Runs the levels in order; at each level, all arms at once. Bounded by ``requests``
    (per arm and level) and/or ``duration`` (seconds per level); ``stop`` ends the run
    gracefully between requests, :meth:`abort` cancels what is in flight."""

    def __init__(
        self,
        arms: list[Arm],
        levels: tuple[int, ...] = DEFAULT_LEVELS,
        *,
        requests: int | None = None,
        duration: float | None = None,
        timeout: float = 120.0,
        stream: bool = False,
        grammar: str = "v4",
        max_tokens: int = 1024,
        prompts: list[dict[str, Any]] | None = None,
        writer: SampleWriter | None = None,
        alpha: float = DEFAULT_ALPHA,
        on_exchange: ExchangeCallback | None = None,
        on_level_start: LevelCallback | None = None,
        on_level_end: LevelCallback | None = None,
    ) -> None:
        if not arms:
            raise ValueError("at least one arm")
        if requests is None and duration is None:
            requests = DEFAULT_REQUESTS
        self.arms = list(arms)
        self.levels = tuple(levels)
        self.requests = requests
        self.duration = duration
        self.timeout = timeout
        self.stream = stream
        self.grammar = grammar
        self.max_tokens = max_tokens
        self.prompts = prompts
        self.writer = writer
        self.on_exchange = on_exchange
        self.on_level_start = on_level_start
        self.on_level_end = on_level_end
        self.report = ReproReport(
            [ArmResult(a) for a in self.arms],
            alpha=alpha,
            levels_planned=self.levels,
            settings={
                "levels": list(self.levels),
                "requests": requests,
                "duration": duration,
                "timeout": timeout,
                "stream": stream,
                "grammar": grammar,
                "max_tokens": max_tokens,
            },
        )
        self._current: asyncio.Future | None = None
        self._aborted = False

    def abort(self) -> None:
        """Cancel the requests in flight (second Ctrl-C, or the grace period ran out)."""
        self._aborted = True
        if self._current is not None and not self._current.done():
            self._current.cancel()

    def _hook(
        self, index: int, level: LevelResult, arm_label: str, level_no: int
    ) -> Callable[[Exchange], None]:
        def hook(ex: Exchange) -> None:
            self._record(index, level, arm_label, level_no, ex)

        return hook

    def _record(
        self, index: int, level: LevelResult, arm_label: str, level_no: int, ex: Exchange
    ) -> None:
        if ex.error is not None or ex.response is None:
            level.errors += 1
        else:
            tools = ex.request.get("tools")
            result = grade_openai_response(ex.response, tools=tools, grammar=self.grammar)
            if result.verdict == ERROR:
                level.errors += 1
            else:
                level.requests += 1
                level.verdicts[result.verdict] += 1
                level.reasons.update(result.reasons)
                level.latencies.append(ex.latency)
                if result.verdict == DEGENERATE:
                    level.degenerate += 1
                if self.writer is not None:
                    self.writer.write(
                        ex.response,
                        tools=tools,
                        grammar=self.grammar,
                        meta={
                            "arm": arm_label,
                            "url": self.arms[index].url,
                            "level": level_no,
                            "concurrency": ex.concurrency,
                            "verdict": result.verdict,
                            "reasons": list(result.reasons),
                            "latency_s": round(ex.latency, 4),
                            "time": round(time.time(), 3),
                        },
                    )
        if self.on_exchange is not None:
            self.on_exchange(index, level)

    async def run(self, stop: asyncio.Event | None = None) -> ReproReport:
        stop = stop or asyncio.Event()
        t0 = time.monotonic()
        try:
            arms = []
            for arm in self.arms:
                model = arm.model or await discover_model(arm.url, min(5.0, self.timeout))
                arms.append(Arm(arm.label, arm.url, model or "default"))
            for result, arm in zip(self.report.arms, arms, strict=True):
                result.arm = arm
            gens = [
                LoadGenerator(
                    a.url,
                    model=a.model or "default",
                    stream=self.stream,
                    timeout=self.timeout,
                    prompts=self.prompts,
                    max_tokens=self.max_tokens,
                )
                for a in arms
            ]
            for li, concurrency in enumerate(self.levels):
                if stop.is_set() or self._aborted:
                    self.report.interrupted = True
                    break
                if self.on_level_start is not None:
                    self.on_level_start(li, concurrency)
                level_results = [LevelResult(concurrency) for _ in arms]
                for ar, lr in zip(self.report.arms, level_results, strict=True):
                    ar.levels.append(lr)
                started = time.monotonic()
                self._current = asyncio.gather(
                    *(
                        gen.run_level(
                            concurrency,
                            requests=self.requests,
                            duration=self.duration,
                            hook=self._hook(i, lr, arms[i].label, concurrency),
                            stop=stop,
                        )
                        for i, (gen, lr) in enumerate(zip(gens, level_results, strict=True))
                    )
                )
                try:
                    await self._current
                except asyncio.CancelledError:
                    if not self._aborted:
                        raise
                finally:
                    for lr in level_results:
                        lr.seconds = time.monotonic() - started
                    self._current = None
                if self.on_level_end is not None:
                    self.on_level_end(li, concurrency)
                if stop.is_set() or self._aborted:
                    self.report.interrupted = True
                    break
        finally:
            self.report.seconds = time.monotonic() - t0
            if self.writer is not None:
                self.writer.close()
        return self.report


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
