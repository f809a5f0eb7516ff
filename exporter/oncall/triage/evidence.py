"""Evidence for triage: the data model of what the sidecar, Prometheus, a repro run and
sample files said.

Pure (no I/O): these dataclasses are what the diagnosis rules read and the reports render;
:mod:`exporter.oncall.triage.collect` fills them. The model records *absence* distinctly
from zero: no probe series means "no probe", not "no ungated reads". JSON-serialisable with
:func:`dataclasses.asdict`.
"""

from __future__ import annotations

import math
import time
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from typing import Any

from exporter.samplers.buckets import BUCKET_LABELS
from exporter.stats import wilson_interval

BAD_VERDICTS = ("degenerate", "suspect")


@dataclass
class Deployment:
    index_k_dtype: str | None = None
    configurator: str | None = None
    hicache: bool | None = None
    model: str | None = None
    sglang_version: str | None = None
    source: str = ""


@dataclass
class RankMemory:
    key: str  # "0", or "host:port/0" when several sidecars match the selector
    overcommit_bytes: float | None = None
    reserve_bytes: float | None = None
    gpu_free_bytes: float | None = None
    gpu_total_bytes: float | None = None
    gpu_free_min_bytes: float | None = None  # lowest free bytes in the window (Prometheus)


@dataclass
class PoolGap:
    pool: str
    planned_bytes: float
    allocated_bytes: float

    @property
    def overcommit_bytes(self) -> float:
        return self.allocated_bytes - self.planned_bytes


@dataclass
class BucketCount:
    le: str  # concurrency bucket label (samplers.buckets), or "unknown"
    graded: int = 0
    degenerate: int = 0
    suspect: int = 0

    @property
    def rate(self) -> float:
        return self.degenerate / self.graded if self.graded else 0.0

    @property
    def ci(self) -> tuple[float, float]:
        return wilson_interval(self.degenerate, self.graded)


@dataclass
class Corruption:
    """Graded outputs over the window (or since the sidecar started), by concurrency bucket."""

    source: str
    buckets: list[BucketCount] = field(default_factory=list)
    by_source: dict[str, dict[str, int]] = field(default_factory=dict)
    verdicts: dict[str, int] = field(default_factory=dict)
    reasons: dict[str, int] = field(default_factory=dict)
    # length as a dimension (issue 26): by output-length bucket, finish reasons by verdict, and
    # the output tokens' p50 over the window against the p50 since the sidecar started (drift)
    by_length: list[BucketCount] = field(default_factory=list)
    finish_reasons: dict[str, dict[str, int]] = field(default_factory=dict)
    output_tokens_p50: float | None = None
    output_tokens_p50_total: float | None = None

    @property
    def graded(self) -> int:
        return sum(b.graded for b in self.buckets)

    @property
    def degenerate(self) -> int:
        return sum(b.degenerate for b in self.buckets)


@dataclass
class IndexK:
    """The in-process HiCache probe, as the sidecar reports it."""

    source: str
    probe_ranks: int = 0  # ranks with a dsv4_probe_up series
    probe_up: int = 0
    gated: float | None = None  # reads in the window; None: no such series
    ungated: float | None = None
    ungated_total: float | None = None  # since the probe started (catches pre-window reads)
    ungated_by_rank: dict[str, float] = field(default_factory=dict)
    checks: float | None = None
    mismatches: float | None = None
    gap_buckets: list[tuple[float, float]] = field(default_factory=list)  # (le s, cumulative)
    load_backs: float | None = None  # SGLang's HiCache load-backs in the window


@dataclass
class Canary:
    source: str
    results: dict[str, float] = field(default_factory=dict)
    last_success_age_s: float | None = None
    graded: int = 0
    degenerate: int = 0


@dataclass
class SampleRecord:
    """One bad output with its own reasons (sidecar samples endpoint, or a scanned file)."""

    verdict: str
    reasons: list[str]
    concurrency: int | None
    origin: str


@dataclass
class ScanSummary:
    files: list[str] = field(default_factory=list)
    lines: int = 0
    unreadable: int = 0
    # lines the repro result already counts (a `repro --out` file given with its own --repro):
    # kept for their per-sample reasons, left out of every count so no answer counts twice
    in_repro: int = 0
    buckets: list[BucketCount] = field(default_factory=list)
    verdicts: dict[str, int] = field(default_factory=dict)
    reasons: dict[str, int] = field(default_factory=dict)


@dataclass
class Series:
    name: str
    points: list[tuple[float, float]]


@dataclass
class TimeSeries:
    overcommit: list[Series] = field(default_factory=list)
    reserve: list[Series] = field(default_factory=list)
    gpu_free: list[Series] = field(default_factory=list)
    degenerate_ratio: list[Series] = field(default_factory=list)  # one per concurrency bucket
    ungated_rate: list[Series] = field(default_factory=list)
    running: list[Series] = field(default_factory=list)


@dataclass
class Evidence:
    collected_at: float = field(default_factory=time.time)
    end: float | None = None
    window_s: float | None = None
    sidecar_url: str | None = None
    prometheus_url: str | None = None
    selector: str = ""
    notes: list[str] = field(default_factory=list)
    deployment: Deployment | None = None
    ranks: list[RankMemory] = field(default_factory=list)
    pools: list[PoolGap] = field(default_factory=list)
    corruption: Corruption | None = None
    index_k: IndexK | None = None
    canary: Canary | None = None
    samples: list[SampleRecord] = field(default_factory=list)
    scan: ScanSummary | None = None
    repro: dict[str, Any] | None = None
    series: TimeSeries = field(default_factory=TimeSeries)
    alerts: list[dict[str, str]] = field(default_factory=list)
    readiness: dict[str, Any] | None = None
    sources: list[str] = field(default_factory=list)  # what answered, for the report header
    # dsv4_engine_info's labels (engine, source, footprint) and the server's release
    engine: dict[str, str] | None = None
    engine_version: str | None = None

    def to_json(self) -> dict[str, Any]:
        """Strict JSON (no Infinity/NaN tokens: jq and browsers reject them); the +Inf
        histogram bound becomes the string "+Inf", as in Prometheus' own API."""
        return _finite(asdict(self))


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf")
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def bucket_order(le: str) -> int:
    return BUCKET_LABELS.index(le) if le in BUCKET_LABELS else len(BUCKET_LABELS)


def corruption_from_counts(
    source: str, counts: list[tuple[dict[str, str], float]], reasons: dict[str, float]
) -> Corruption | None:
    """Build per-bucket counts from (labels{source,concurrency_le,verdict}, value) pairs."""
    if not counts:
        return None
    buckets: dict[str, BucketCount] = {}
    by_source: dict[str, dict[str, int]] = defaultdict(lambda: {"graded": 0, "degenerate": 0})
    verdicts: Counter[str] = Counter()
    for labels, value in counts:
        n = round(value)
        verdict = labels.get("verdict", "")
        if n <= 0 or verdict == "error":
            continue
        le = labels.get("concurrency_le", "1")
        b = buckets.setdefault(le, BucketCount(le))
        b.graded += n
        verdicts[verdict] += n
        src = by_source[labels.get("source", "?")]
        src["graded"] += n
        if verdict == "degenerate":
            b.degenerate += n
            src["degenerate"] += n
        elif verdict == "suspect":
            b.suspect += n
    return Corruption(
        source,
        sorted(buckets.values(), key=lambda b: bucket_order(b.le)),
        dict(by_source),
        dict(verdicts),
        {r: round(v) for r, v in sorted(reasons.items(), key=lambda kv: -kv[1]) if round(v) > 0},
    )


def length_buckets(counts: list[tuple[dict[str, str], float]]) -> list[BucketCount]:
    """Per output-length bucket counts from (labels{output_tokens_le,verdict}, value) pairs."""
    from exporter.samplers.length import LENGTH_LABELS

    out = {le: BucketCount(le) for le in LENGTH_LABELS}
    for labels, value in counts:
        b = out.get(labels.get("output_tokens_le", ""))
        if b is None:
            continue
        n = round(value)
        b.graded += n
        if labels.get("verdict") == "degenerate":
            b.degenerate += n
        elif labels.get("verdict") == "suspect":
            b.suspect += n
    return [b for b in out.values() if b.graded]
