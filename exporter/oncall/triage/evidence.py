"""Evidence for triage: what the sidecar, Prometheus, a repro run and sample files say.

The model (dataclasses, JSON-serialisable with :func:`dataclasses.asdict`) is what the pure
diagnosis rules read, so it records *absence* distinctly from zero: no probe series means
"no probe", not "no ungated reads". Collection never raises on a source being down: each
failure becomes a line in ``notes`` and the report is written from whatever answered.

Prometheus, when given, is preferred for counts (``increase`` over the window, so an old
incident does not dilute a new one) and is the only source of time series; the sidecar's own
``/metrics`` (counts since it started) is the fallback. The sidecar alone gives the per-pool
footprint (``/api/v1/footprint``) and, with its bearer token, the stored bad samples with
their per-sample reasons.
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from exporter.oncall.samples import read_graded
from exporter.oncall.triage.http import (
    FetchError,
    Prometheus,
    get,
    get_json,
    parse_exposition,
    prom_duration,
)
from exporter.samplers.buckets import BUCKET_LABELS, bucket_label
from exporter.stats import wilson_interval

BAD_VERDICTS = ("degenerate", "suspect")
UNGATED = 'gated="false"'
DEGENERATE = 'verdict="degenerate"'
INDEX_K_READS = "dsv4_hicache_index_k_reads_total"
MAX_SAMPLE_RECORDS = 10_000


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


# --- helpers shared by both metric sources --------------------------------------------------


def _bucket_order(le: str) -> int:
    return BUCKET_LABELS.index(le) if le in BUCKET_LABELS else len(BUCKET_LABELS)


def corruption_from_counts(
    source: str, counts: list[tuple[dict[str, str], float]], reasons: dict[str, float]
) -> Corruption | None:
    """Build per-bucket counts from (labels{source,concurrency_le,verdict}, value) pairs."""
    if not counts:
        return None
    buckets: dict[str, BucketCount] = {}
    by_source: dict[str, dict[str, int]] = defaultdict(lambda: {"graded": 0, "degenerate": 0})
    verdicts: Counter = Counter()
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
        sorted(buckets.values(), key=lambda b: _bucket_order(b.le)),
        dict(by_source),
        dict(verdicts),
        {r: round(v) for r, v in sorted(reasons.items(), key=lambda kv: -kv[1]) if round(v) > 0},
    )


def _rank_key(labels: dict[str, str], multi: bool) -> str:
    rank = labels.get("rank", "?")
    return f"{labels.get('instance', '?')}/{rank}" if multi else rank


def _set_rank(
    ranks: dict[str, RankMemory], rows: list[tuple[dict[str, str], float]], attr: str, multi: bool
) -> None:
    for labels, value in rows:
        key = _rank_key(labels, multi)
        setattr(ranks.setdefault(key, RankMemory(key)), attr, value)


def _sorted_ranks(ranks: dict[str, RankMemory]) -> list[RankMemory]:
    def order(key: str) -> tuple[str, int]:
        inst, _, rank = key.rpartition("/")
        return inst, int(rank) if rank.isdigit() else 1 << 30

    return [ranks[k] for k in sorted(ranks, key=order)]


# --- collectors ---------------------------------------------------------------------------------


@dataclass
class CollectOptions:
    sidecar_url: str | None = None
    prometheus_url: str | None = None
    selector: str = ""
    window_s: float = 1800.0
    end: float | None = None
    step_s: float | None = None
    rate_window_s: float | None = None
    samples_token: str | None = None
    repro_path: Path | None = None
    scan_paths: list[Path] = field(default_factory=list)
    timeout: float = 10.0


def collect(opts: CollectOptions) -> Evidence:
    """Gather everything the options point at; never raises for a source being down."""
    end = opts.end if opts.end is not None else time.time()
    ev = Evidence(
        end=end,
        window_s=opts.window_s,
        sidecar_url=opts.sidecar_url,
        prometheus_url=opts.prometheus_url,
        selector=opts.selector,
    )
    sidecar_metrics: str | None = None
    if opts.sidecar_url:
        sidecar_metrics = _collect_sidecar(ev, opts)
        if sidecar_metrics is not None or ev.deployment is not None:
            ev.sources.append(f"sidecar {opts.sidecar_url}")
    prom_ok = False
    if opts.prometheus_url:
        prom_ok = _collect_prometheus(ev, opts, end)
        if prom_ok:
            ev.sources.append(f"Prometheus {opts.prometheus_url} ({_sel(opts.selector)})")
    if sidecar_metrics is not None and not prom_ok:
        _from_exposition(ev, sidecar_metrics, now=time.time())
    if opts.repro_path is not None:
        _collect_repro(ev, opts.repro_path)
        if ev.repro is not None:
            ev.sources.append(f"repro result {opts.repro_path}")
    if opts.scan_paths:
        _collect_scan(ev, opts.scan_paths)
        if ev.scan is not None and ev.scan.files:
            ev.sources.append(f"scan of {', '.join(Path(f).name for f in ev.scan.files)}")
    return ev


def _collect_sidecar(ev: Evidence, opts: CollectOptions) -> str | None:
    base = opts.sidecar_url.rstrip("/") if opts.sidecar_url else ""
    try:
        status, doc = get_json(base + "/api/v1/footprint", timeout=opts.timeout)
        if status == 200 and isinstance(doc, dict):
            _from_footprint(ev, doc)
        else:
            ev.notes.append(f"sidecar /api/v1/footprint: HTTP {status}")
    except FetchError as exc:
        ev.notes.append(str(exc))
        return None  # the sidecar is not answering: skip its other endpoints
    try:
        _status, doc = get_json(base + "/readyz", timeout=opts.timeout)
        ev.readiness = doc if isinstance(doc, dict) else None
    except FetchError as exc:
        ev.notes.append(str(exc))
    metrics = None
    try:
        status, body = get(base + "/metrics", timeout=opts.timeout)
        if status == 200:
            metrics = body.decode("utf-8", "replace")
        else:
            ev.notes.append(f"sidecar /metrics: HTTP {status}")
    except FetchError as exc:
        ev.notes.append(str(exc))
    if opts.samples_token:
        _collect_samples_endpoint(ev, base, opts)
    else:
        ev.notes.append(
            "no samples token given: per-sample reasons come only from scanned files "
            "(set DSV4_SIDECAR_SAMPLES_TOKEN or --samples-token-file)"
        )
    return metrics


def _collect_samples_endpoint(ev: Evidence, base: str, opts: CollectOptions) -> None:
    try:
        status, doc = get_json(
            base + "/api/v1/samples",
            params={"limit": 1000},
            timeout=opts.timeout,
            token=opts.samples_token,
        )
    except FetchError as exc:
        ev.notes.append(str(exc))
        return
    if status != 200 or not isinstance(doc, dict):
        ev.notes.append(f"sidecar /api/v1/samples: HTTP {status} (token rejected, or endpoint off)")
        return
    for item in doc.get("samples") or []:
        if not isinstance(item, dict) or item.get("verdict") not in BAD_VERDICTS:
            continue
        conc = item.get("concurrency")
        ev.samples.append(
            SampleRecord(
                item["verdict"],
                [str(r) for r in item.get("reasons") or []],
                conc if isinstance(conc, int) and not isinstance(conc, bool) else None,
                f"sidecar:{item.get('source', '?')}",
            )
        )


def _from_footprint(ev: Evidence, doc: dict[str, Any]) -> None:
    dep = doc.get("deployment")
    if isinstance(dep, dict):
        ev.deployment = Deployment(
            index_k_dtype=dep.get("index_k_dtype"),
            configurator=dep.get("configurator"),
            hicache=dep.get("hicache"),
            model=next((r.get("model") for r in doc.get("ranks") or [] if r.get("model")), None),
            source="sidecar /api/v1/footprint",
        )
    if doc.get("status") not in (None, "ok"):
        ev.notes.append(f"sidecar footprint unavailable: {doc.get('status')}: {doc.get('detail')}")
    ranks: dict[str, RankMemory] = {}
    pools: dict[str, PoolGap] = {}
    for r in doc.get("ranks") or []:
        key = str(r.get("rank"))
        ranks[key] = RankMemory(
            key,
            overcommit_bytes=r.get("overcommit_bytes"),
            reserve_bytes=r.get("reserve_bytes"),
            gpu_free_bytes=r.get("gpu_free_bytes"),
        )
        for name, p in (r.get("pools") or {}).items():
            gap = PoolGap(name, float(p["planned_bytes"]), float(p["allocated_bytes"]))
            if name not in pools or gap.overcommit_bytes > pools[name].overcommit_bytes:
                pools[name] = gap
    ev.ranks = _sorted_ranks(ranks)
    ev.pools = sorted(pools.values(), key=lambda p: -p.overcommit_bytes)


def _sel(selector: str, *extra: str) -> str:
    parts = [p for p in (selector.strip().strip("{}").strip(), *extra) if p]
    return "{" + ", ".join(parts) + "}"


Query = Callable[[str], list[tuple[dict[str, str], float]]]


def _inc(metric: str, s: str, w: str, by: str = "", *extra: str) -> str:
    """``sum [by (...)] (increase(metric{selector, extra}[w]))``."""
    inner = f"increase({metric}{_sel(s, *extra)}[{w}])"
    return f"sum by ({by}) ({inner})" if by else f"sum({inner})"


def _utc(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


def _collect_prometheus(ev: Evidence, opts: CollectOptions, end: float) -> bool:
    """Windowed counts, latest values and time series from Prometheus; False when it had
    nothing for the selector (the sidecar's /metrics is then used)."""
    prom = Prometheus(opts.prometheus_url or "", timeout=opts.timeout)
    s = opts.selector
    window = opts.window_s
    w = prom_duration(window)
    step = opts.step_s or max(1.0, round(window / 120))
    rate_w = prom_duration(opts.rate_window_s or min(window, max(4 * step, 60.0)))
    start = end - window

    def q(query: str) -> list[tuple[dict[str, str], float]]:
        return prom.instant(query, end)

    try:
        present = q(f"count(dsv4_sidecar_build_info{_sel(s)})")
    except FetchError as exc:
        ev.notes.append(str(exc))
        return False
    if not present:
        ev.notes.append(
            f"Prometheus has no dsv4-sidecar series for selector {_sel(s)} at the window's end"
        )
        return False
    try:
        _prom_instant(ev, q, s, w, end)
        _prom_series(ev, prom, s, start, end, step, rate_w)
    except FetchError as exc:
        ev.notes.append(str(exc))
    return True


def _prom_instant(ev: Evidence, q: Query, s: str, w: str, end: float) -> None:
    src = f"Prometheus, increase over {w} to {_utc(end)}"
    info = q(f"dsv4_deployment_info{_sel(s)}")
    if info:
        labels = sorted(info, key=lambda kv: kv[0].get("instance", ""))[0][0]
        if len({(x[0].get("index_k_dtype"), x[0].get("hicache")) for x in info}) > 1:
            ev.notes.append("sidecars under the selector report different deployments")
        dep = ev.deployment or Deployment()
        dep.index_k_dtype = labels.get("index_k_dtype") or dep.index_k_dtype
        dep.configurator = labels.get("configurator") or dep.configurator
        dep.hicache = {"true": True, "false": False}.get(labels.get("hicache", ""), dep.hicache)
        dep.model = labels.get("model") or dep.model
        dep.source = dep.source or "Prometheus dsv4_deployment_info"
        ev.deployment = dep
    sg = q(f"dsv4_sglang_info{_sel(s)}")
    if sg and ev.deployment is not None:
        ev.deployment.sglang_version = sg[0][0].get("version")
    over = q(f"max by (instance, rank) (dsv4_kv_pool_overcommit_bytes{_sel(s)})")
    multi = len({labels.get("instance") for labels, _ in over}) > 1
    ranks = {r.key: r for r in ev.ranks} if not multi else {}
    _set_rank(ranks, over, "overcommit_bytes", multi)
    _set_rank(
        ranks,
        q(f"max by (instance, rank) (dsv4_memory_reserve_bytes{_sel(s)})"),
        "reserve_bytes",
        multi,
    )
    _set_rank(
        ranks,
        q(f"min by (instance, rank) (dsv4_gpu_memory_free_bytes{_sel(s)})"),
        "gpu_free_bytes",
        multi,
    )
    _set_rank(
        ranks,
        q(f"max by (instance, rank) (dsv4_gpu_memory_total_bytes{_sel(s)})"),
        "gpu_total_bytes",
        multi,
    )
    _set_rank(
        ranks,
        q(f"min by (instance, rank) (min_over_time(dsv4_gpu_memory_free_bytes{_sel(s)}[{w}]))"),
        "gpu_free_min_bytes",
        multi,
    )
    ev.ranks = _sorted_ranks(ranks)
    if not ev.pools:
        planned = {
            lb.get("pool", "?"): v
            for lb, v in q(f"max by (pool) (dsv4_kv_pool_planned_bytes{_sel(s)})")
        }
        alloc = {
            lb.get("pool", "?"): v
            for lb, v in q(f"max by (pool) (dsv4_kv_pool_allocated_bytes{_sel(s)})")
        }
        ev.pools = sorted(
            (PoolGap(p, planned[p], alloc[p]) for p in planned if p in alloc),
            key=lambda p: -p.overcommit_bytes,
        )
    counts = q(_inc("dsv4_dsml_samples_total", s, w, by="source, concurrency_le, verdict"))
    reasons = {
        lb.get("reason", "?"): v for lb, v in q(_inc("dsv4_dsml_reasons_total", s, w, "reason"))
    }
    ev.corruption = corruption_from_counts(src, counts, reasons)
    ik = IndexK(src)
    probe = q(f"dsv4_probe_up{_sel(s)}")
    ik.probe_ranks = len(probe)
    ik.probe_up = sum(1 for _, v in probe if v == 1)
    reads = {lb.get("gated", "?"): v for lb, v in q(_inc(INDEX_K_READS, s, w, "gated"))}
    ik.gated, ik.ungated = reads.get("true"), reads.get("false")
    total = q(f"sum({INDEX_K_READS}{_sel(s, UNGATED)})")
    ik.ungated_total = total[0][1] if total else None
    multi_ik = len({lb.get("instance") for lb, _ in probe}) > 1
    for lb, v in q(_inc(INDEX_K_READS, s, w, "instance, rank", UNGATED)):
        ik.ungated_by_rank[_rank_key(lb, multi_ik)] = v
    ik.checks = _scalar(q(_inc("dsv4_hicache_index_k_checksum_checks_total", s, w)))
    ik.mismatches = _scalar(q(_inc("dsv4_hicache_index_k_checksum_mismatches_total", s, w)))
    gap = q(_inc("dsv4_hicache_transfer_gap_seconds_bucket", s, w, "le"))
    ik.gap_buckets = sorted((float(lb.get("le", "inf")), v) for lb, v in gap)
    ik.load_backs = _scalar(q(_inc("dsv4_sglang_hicache_load_backs_total", s, w)))
    ev.index_k = ik
    canary = Canary(src)
    canary.results = {
        lb.get("result", "?"): round(v)
        for lb, v in q(_inc("dsv4_canary_requests_total", s, w, "result"))
    }
    canary.last_success_age_s = _scalar(
        q(f"max(time() - dsv4_canary_last_success_timestamp_seconds{_sel(s)})")
    )
    if ev.corruption is not None:
        c = ev.corruption.by_source.get("canary", {})
        canary.graded, canary.degenerate = c.get("graded", 0), c.get("degenerate", 0)
    ev.canary = canary if canary.results or canary.last_success_age_s is not None else None
    ev.alerts = [
        {
            "alertname": lb.get("alertname", ""),
            "state": lb.get("alertstate", ""),
            "severity": lb.get("severity", ""),
            "where": " ".join(
                f"{k}={lb[k]}" for k in ("instance", "rank", "source", "risk") if k in lb
            ),
        }
        for lb, _ in q('ALERTS{alertname=~"DSV4.*"}')
    ]


def _prom_series(
    ev: Evidence, prom: Prometheus, s: str, start: float, end: float, step: float, rate_w: str
) -> None:
    def series(query: str, name: Callable[[dict[str, str]], str]) -> list[Series]:
        return [Series(name(lb), pts) for lb, pts in prom.range(query, start, end, step) if pts]

    multi = len({r.key.rpartition("/")[0] for r in ev.ranks}) > 1

    def rank_name(lb: dict[str, str]) -> str:
        return "rank " + _rank_key(lb, multi)

    ts = ev.series
    ts.overcommit = series(
        f"max by (instance, rank) (dsv4_kv_pool_overcommit_bytes{_sel(s)})", rank_name
    )
    ts.reserve = series(f"min(dsv4_memory_reserve_bytes{_sel(s)})", lambda _lb: "reserve (min)")
    ts.gpu_free = series(
        f"min by (instance, rank) (dsv4_gpu_memory_free_bytes{_sel(s)})", rank_name
    )
    ratio = (
        _inc("dsv4_dsml_samples_total", s, rate_w, "concurrency_le", DEGENERATE)
        + " / "
        + _inc("dsv4_dsml_samples_total", s, rate_w, "concurrency_le")
    )
    ts.degenerate_ratio = sorted(
        series(ratio, lambda lb: lb.get("concurrency_le", "?")), key=lambda x: _bucket_order(x.name)
    )
    ts.ungated_rate = series(
        f"sum(rate({INDEX_K_READS}{_sel(s, UNGATED)}[{rate_w}]))",
        lambda _lb: "ungated index-K reads/s",
    )
    ts.running = series(
        f"sum(dsv4_sglang_running_requests{_sel(s)})", lambda _lb: "running requests"
    )


def _scalar(rows: list[tuple[dict[str, str], float]]) -> float | None:
    return rows[0][1] if rows else None


def _from_exposition(ev: Evidence, text: str, now: float) -> None:
    """Counts since the sidecar started, from one scrape of its /metrics."""
    src = "sidecar /metrics, counts since it started"
    try:
        samples = parse_exposition(text)
    except ValueError as exc:
        ev.notes.append(f"sidecar /metrics unparseable: {exc}")
        return
    by_name: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
    for name, labels, value in samples:
        by_name[name].append((labels, value))
    reasons: Counter = Counter()
    for lb, v in by_name["dsv4_dsml_reasons_total"]:
        reasons[lb.get("reason", "?")] += v
    ev.corruption = corruption_from_counts(src, by_name["dsv4_dsml_samples_total"], dict(reasons))
    ranks = {r.key: r for r in ev.ranks}
    for lb, v in by_name["dsv4_gpu_memory_free_bytes"]:
        ranks.setdefault(lb.get("rank", "?"), RankMemory(lb.get("rank", "?"))).gpu_free_bytes = v
    for lb, v in by_name["dsv4_gpu_memory_total_bytes"]:
        ranks.setdefault(lb.get("rank", "?"), RankMemory(lb.get("rank", "?"))).gpu_total_bytes = v
    ev.ranks = _sorted_ranks(ranks)
    if ev.deployment is None and by_name["dsv4_deployment_info"]:
        lb = by_name["dsv4_deployment_info"][0][0]
        ev.deployment = Deployment(
            lb.get("index_k_dtype"),
            lb.get("configurator"),
            {"true": True, "false": False}.get(lb.get("hicache", "")),
            lb.get("model"),
            source="sidecar /metrics",
        )
    if ev.deployment is not None and by_name["dsv4_sglang_info"]:
        ev.deployment.sglang_version = by_name["dsv4_sglang_info"][0][0].get("version")
    ik = IndexK(src)
    ik.probe_ranks = len(by_name["dsv4_probe_up"])
    ik.probe_up = sum(1 for _, v in by_name["dsv4_probe_up"] if v == 1)
    reads = by_name["dsv4_hicache_index_k_reads_total"]
    if reads:
        ik.gated = sum(v for lb, v in reads if lb.get("gated") == "true")
        ik.ungated = sum(v for lb, v in reads if lb.get("gated") == "false")
        ik.ungated_total = ik.ungated
        for lb, v in reads:
            if lb.get("gated") == "false":
                ik.ungated_by_rank[lb.get("rank", "?")] = v
    if by_name["dsv4_hicache_index_k_checksum_checks_total"]:
        ik.checks = sum(v for _, v in by_name["dsv4_hicache_index_k_checksum_checks_total"])
        ik.mismatches = sum(v for _, v in by_name["dsv4_hicache_index_k_checksum_mismatches_total"])
    gap: Counter = Counter()
    for lb, v in by_name["dsv4_hicache_transfer_gap_seconds_bucket"]:
        gap[float(lb.get("le", "inf"))] += v
    ik.gap_buckets = sorted(gap.items())
    if by_name["dsv4_sglang_hicache_load_backs_total"]:
        ik.load_backs = sum(v for _, v in by_name["dsv4_sglang_hicache_load_backs_total"])
    ev.index_k = ik
    results = {lb.get("result", "?"): round(v) for lb, v in by_name["dsv4_canary_requests_total"]}
    last = by_name["dsv4_canary_last_success_timestamp_seconds"]
    if results or last:
        canary = Canary(src, results)
        if last and last[0][1] > 0:
            canary.last_success_age_s = max(0.0, now - last[0][1])
        c = ev.corruption.by_source.get("canary", {}) if ev.corruption else {}
        canary.graded, canary.degenerate = c.get("graded", 0), c.get("degenerate", 0)
        ev.canary = canary


def _collect_repro(ev: Evidence, path: Path) -> None:
    target = path / "report.json" if path.is_dir() else path
    try:
        doc = json.loads(target.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        ev.notes.append(f"repro result {target} unreadable: {exc}")
        return
    if not isinstance(doc, dict) or not isinstance(doc.get("arms"), list):
        ev.notes.append(f"repro result {target}: not `repro --json` output")
        return
    ev.repro = doc


def _collect_scan(ev: Evidence, paths: list[Path]) -> None:
    scan = ScanSummary()
    buckets: dict[str, BucketCount] = {}
    verdicts: Counter = Counter()
    reasons: Counter = Counter()
    for path in paths:
        try:
            lines = list(read_graded(path))
        except OSError as exc:
            ev.notes.append(f"scan {path}: {exc.strerror or exc}")
            continue
        scan.files.append(str(path))
        for line in lines:
            scan.lines += 1
            if line is None:
                scan.unreadable += 1
                continue
            le = bucket_label(line.concurrency) if line.concurrency is not None else "unknown"
            b = buckets.setdefault(le, BucketCount(le))
            b.graded += 1
            verdicts[line.verdict] += 1
            reasons.update(line.reasons)
            if line.verdict == "degenerate":
                b.degenerate += 1
            elif line.verdict == "suspect":
                b.suspect += 1
            if line.verdict in BAD_VERDICTS and len(ev.samples) < MAX_SAMPLE_RECORDS:
                ev.samples.append(
                    SampleRecord(
                        line.verdict, list(line.reasons), line.concurrency, f"scan:{path.name}"
                    )
                )
    scan.buckets = sorted(buckets.values(), key=lambda b: _bucket_order(b.le))
    scan.verdicts = dict(verdicts)
    scan.reasons = dict(reasons.most_common())
    ev.scan = scan
