"""Collect triage evidence from the sidecar, Prometheus, a repro result and sample files.

Collection never raises on a source being down: each failure becomes a line in ``notes`` and
the report is written from whatever answered.

Prometheus, when given, is preferred for counts (``increase`` over the window, so an old
incident does not dilute a new one) and is the only source of time series; the sidecar's own
``/metrics`` (counts since it started) is the fallback. Both paths read the same numbers from
one table, :data:`READINGS`: each row names a catalog metric, how to aggregate it and whether
it is a windowed count, and renders itself either as PromQL or as the same aggregation over
one scrape. The sidecar alone gives the per-pool footprint (``/api/v1/footprint``) and, with
its bearer token, the stored bad samples with their per-sample reasons.
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from exporter.metrics import catalog as m
from exporter.metrics.catalog import MetricSpec
from exporter.oncall.samples import GradedLine, read_graded
from exporter.oncall.triage.evidence import (
    BAD_VERDICTS,
    BucketCount,
    Canary,
    Deployment,
    Evidence,
    IndexK,
    PoolGap,
    RankMemory,
    SampleRecord,
    ScanSummary,
    Series,
    bucket_order,
    corruption_from_counts,
    length_buckets,
)
from exporter.oncall.triage.http import (
    FetchError,
    Prometheus,
    SidecarAuth,
    get,
    get_json,
    parse_exposition,
    prom_duration,
)
from exporter.oncall.triage.sections import histogram_quantile
from exporter.samplers.buckets import bucket_label
from exporter.sources.bounded import (
    TRIAGE_FILE_MAX_BYTES,
    TRIAGE_FILE_SECONDS,
    TRIAGE_METRICS_MAX_BYTES,
    InputRejected,
    read_local,
)

MAX_SAMPLE_RECORDS = 10_000

Rows = list[tuple[dict[str, str], float]]
Agg = Literal["sum", "max", "min", ""]


def _sum(values: list[float]) -> float:
    return float(sum(values))


_FOLDS: dict[str, Callable[[list[float]], float]] = {"sum": _sum, "max": max, "min": min}


@dataclass(frozen=True)
class Reading:
    """One number (or labelled set of numbers) the diagnosis reads, said once for both paths.

    ``agg`` "" keeps the raw series. ``windowed`` counters are an ``increase`` over the window
    in Prometheus and the total since the sidecar started in a scrape. ``over_time`` (e.g.
    ``min_over_time``) needs history: Prometheus only, absent from a scrape.
    """

    key: str
    spec: MetricSpec
    agg: Agg = ""
    by: tuple[str, ...] = ()
    match: tuple[tuple[str, str], ...] = ()
    windowed: bool = False
    series: str = ""  # "_bucket" for a histogram's buckets
    over_time: str = ""

    @property
    def name(self) -> str:
        return self.spec.name + self.series

    def promql(self, selector: str, window: str) -> str:
        inner = self.name + _sel(selector, *(f'{k}="{v}"' for k, v in self.match))
        if self.over_time:
            inner = f"{self.over_time}({inner}[{window}])"
        elif self.windowed:
            inner = f"increase({inner}[{window}])"
        if not self.agg:
            return inner
        return (
            f"{self.agg} by ({', '.join(self.by)}) ({inner})" if self.by else f"{self.agg}({inner})"
        )

    def from_scrape(self, by_name: dict[str, Rows]) -> Rows:
        """The same aggregation over one scrape's samples (no instance label there)."""
        if self.over_time:
            return []
        rows = [
            (lb, v)
            for lb, v in by_name.get(self.name, [])
            if all(lb.get(k) == want for k, want in self.match)
        ]
        if not self.agg:
            return rows
        groups: dict[tuple[tuple[str, str], ...], list[float]] = defaultdict(list)
        for lb, v in rows:
            groups[tuple((k, lb[k]) for k in self.by if k in lb)].append(v)
        fold = _FOLDS[self.agg]
        return [(dict(key), fold(values)) for key, values in groups.items()]


def _r(
    key: str,
    spec: MetricSpec,
    agg: Agg = "",
    *by: str,
    match: tuple[tuple[str, str], ...] = (),
    windowed: bool = False,
    series: str = "",
    over_time: str = "",
) -> Reading:
    return Reading(key, spec, agg, tuple(by), match, windowed, series, over_time)


_UNGATED = (("gated", "false"),)
_UNGATED_MATCHER = 'gated="false"'
_RANK = ("instance", "rank")

READINGS: tuple[Reading, ...] = (
    _r("deployment", m.DEPLOYMENT_INFO),
    _r("sglang", m.SGLANG_INFO),
    _r("engine", m.ENGINE_INFO),
    _r("vllm", m.VLLM_INFO),
    _r("overcommit", m.KV_POOL_OVERCOMMIT, "max", *_RANK),
    _r("reserve", m.MEMORY_RESERVE, "max", *_RANK),
    _r("gpu_free", m.GPU_MEMORY_FREE, "min", *_RANK),
    _r("gpu_total", m.GPU_MEMORY_TOTAL, "max", *_RANK),
    _r("gpu_free_min", m.GPU_MEMORY_FREE, "min", *_RANK, over_time="min_over_time"),
    _r("planned", m.KV_POOL_PLANNED, "max", "pool"),
    _r("allocated", m.KV_POOL_ALLOCATED, "max", "pool"),
    _r("samples", m.DSML_SAMPLES, "sum", "source", "concurrency_le", "verdict", windowed=True),
    _r("reasons", m.DSML_REASONS, "sum", "reason", windowed=True),
    _r(
        "length_samples", m.DSML_LENGTH_SAMPLES, "sum", "output_tokens_le", "verdict", windowed=True
    ),
    _r("finishes", m.DSML_FINISH_REASONS, "sum", "finish_reason", "verdict", windowed=True),
    _r("output_tokens", m.DSML_OUTPUT_TOKENS, "sum", "le", windowed=True, series="_bucket"),
    _r("output_tokens_total", m.DSML_OUTPUT_TOKENS, "sum", "le", series="_bucket"),
    _r("probe_up", m.PROBE_UP),
    _r("index_k_reads", m.HICACHE_INDEX_K_READS, "sum", "gated", windowed=True),
    _r("ungated_total", m.HICACHE_INDEX_K_READS, "sum", match=_UNGATED),
    _r("ungated_by_rank", m.HICACHE_INDEX_K_READS, "sum", *_RANK, match=_UNGATED, windowed=True),
    _r("checks", m.HICACHE_CHECKS, "sum", windowed=True),
    _r("mismatches", m.HICACHE_MISMATCHES, "sum", windowed=True),
    _r("gap", m.HICACHE_GAP, "sum", "le", windowed=True, series="_bucket"),
    _r("load_backs", m.HICACHE_LOAD_BACKS, "sum", windowed=True),
    _r("canary_results", m.CANARY_REQUESTS, "sum", "result", windowed=True),
    _r("canary_last_success", m.SOURCE_LAST_SUCCESS, "max", match=(("source", "canary"),)),
)
_BY_KEY = {r.key: r for r in READINGS}
Read = Callable[[str], Rows]  # reading key -> rows


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
    sidecar_auth: SidecarAuth | None = None  # the sidecar's web config: basic auth, its CA
    repro_path: Path | None = None
    scan_paths: list[Path] = field(default_factory=list)
    timeout: float = 10.0


T = TypeVar("T")

# What an answer of unexpected shape raises while it is read into the evidence.
_SHAPE_ERRORS = (TypeError, ValueError, KeyError, AttributeError, IndexError, ArithmeticError)


def _guarded(ev: Evidence, source: str, read: Callable[[], T]) -> T | None:
    """``read()``, or None with a note when the answer had a shape it could not take (wrong
    JSON types, a label value no parser expects): triage still writes its report."""
    try:
        return read()
    except _SHAPE_ERRORS as exc:
        ev.notes.append(f"{source}: answer of an unexpected shape skipped ({type(exc).__name__})")
        return None


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
        sidecar_metrics = _guarded(ev, "sidecar", lambda: _collect_sidecar(ev, opts))
        if sidecar_metrics is not None or ev.deployment is not None:
            ev.sources.append(f"sidecar {opts.sidecar_url}")
    prom_ok = False
    if opts.prometheus_url:
        prom_ok = bool(_guarded(ev, "Prometheus", lambda: _collect_prometheus(ev, opts, end)))
        if prom_ok:
            ev.sources.append(f"Prometheus {opts.prometheus_url} ({_sel(opts.selector)})")
    if sidecar_metrics is not None and not prom_ok:
        metrics = sidecar_metrics
        _guarded(ev, "sidecar /metrics", lambda: _from_exposition(ev, metrics, now=time.time()))
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
        status, doc = get_json(
            base + "/api/v1/footprint", timeout=opts.timeout, auth=opts.sidecar_auth
        )
        if status == 200 and isinstance(doc, dict):
            _from_footprint(ev, doc)
        else:
            ev.notes.append(f"sidecar /api/v1/footprint: HTTP {status}")
    except FetchError as exc:
        ev.notes.append(str(exc))
        if "HTTP 401" in str(exc):
            ev.notes.append(
                "the sidecar asks for basic auth (its web config file): give --sidecar-user "
                "and the password in DSV4_TRIAGE_SIDECAR_PASSWORD or --sidecar-password-file"
            )
        return None  # the sidecar is not answering: skip its other endpoints
    try:
        _status, doc = get_json(base + "/readyz", timeout=opts.timeout, auth=opts.sidecar_auth)
        ev.readiness = doc if isinstance(doc, dict) else None
    except FetchError as exc:
        ev.notes.append(str(exc))
    metrics = None
    try:
        status, body = get(
            base + "/metrics",
            timeout=opts.timeout,
            auth=opts.sidecar_auth,
            limit=TRIAGE_METRICS_MAX_BYTES,
        )
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
            auth=opts.sidecar_auth,
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


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _num(value: Any) -> float | None:
    """A finite JSON number (not a bool), else None: the answer is untrusted."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _from_footprint(ev: Evidence, doc: dict[str, Any]) -> None:
    """The footprint's deployment, ranks and pools, taking only values of the documented types
    (a field of another type is left out, never a crash: the sidecar may be anything)."""
    ranks_doc = _dicts(doc.get("ranks"))
    dep = doc.get("deployment")
    if isinstance(dep, dict):
        hicache = dep.get("hicache")
        ev.deployment = Deployment(
            index_k_dtype=_str(dep.get("index_k_dtype")),
            configurator=_str(dep.get("configurator")),
            hicache=hicache if isinstance(hicache, bool) else None,
            model=next((_str(r.get("model")) for r in ranks_doc if _str(r.get("model"))), None),
            source="sidecar /api/v1/footprint",
        )
    status = doc.get("status")
    if status not in (None, "ok"):
        ev.notes.append(f"sidecar footprint unavailable: {status}: {doc.get('detail')}")
    ranks: dict[str, RankMemory] = {}
    pools: dict[str, PoolGap] = {}
    for r in ranks_doc:
        key = str(r.get("rank"))
        ranks[key] = RankMemory(
            key,
            overcommit_bytes=_num(r.get("overcommit_bytes")),
            reserve_bytes=_num(r.get("reserve_bytes")),
            gpu_free_bytes=_num(r.get("gpu_free_bytes")),
        )
        rank_pools = r.get("pools")
        for name, p in rank_pools.items() if isinstance(rank_pools, dict) else ():
            planned = _num(p.get("planned_bytes")) if isinstance(p, dict) else None
            allocated = _num(p.get("allocated_bytes")) if isinstance(p, dict) else None
            if planned is None or allocated is None:
                continue
            gap = PoolGap(str(name), planned, allocated)
            if name not in pools or gap.overcommit_bytes > pools[name].overcommit_bytes:
                pools[name] = gap
    ev.ranks = _sorted_ranks(ranks)
    ev.pools = sorted(pools.values(), key=lambda p: -p.overcommit_bytes)


def _sel(selector: str, *extra: str) -> str:
    parts = [p for p in (selector.strip().strip("{}").strip(), *extra) if p]
    return "{" + ", ".join(parts) + "}"


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

    def q(query: str) -> Rows:
        return prom.instant(query, end)

    try:
        present = q(f"count({m.BUILD_INFO.name}{_sel(s)})")
    except FetchError as exc:
        ev.notes.append(str(exc))
        return False
    if not present:
        ev.notes.append(
            f"Prometheus has no dsv4-sidecar series for selector {_sel(s)} at the window's end"
        )
        return False
    try:
        src = f"Prometheus, increase over {w} to {_utc(end)}"
        _from_readings(ev, lambda key: q(_BY_KEY[key].promql(s, w)), src, now=end)
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
        _prom_series(ev, prom, s, start, end, step, rate_w)
    except FetchError as exc:
        ev.notes.append(str(exc))
    return True


def _from_exposition(ev: Evidence, text: str, now: float) -> None:
    """Counts since the sidecar started, from one scrape of its /metrics."""
    try:
        samples = parse_exposition(text)
    except ValueError as exc:
        ev.notes.append(f"sidecar /metrics unparseable: {exc}")
        return
    by_name: dict[str, Rows] = defaultdict(list)
    for name, labels, value in samples:
        by_name[name].append((labels, value))
    src = "sidecar /metrics, counts since it started"
    _from_readings(ev, lambda key: _BY_KEY[key].from_scrape(by_name), src, now=now)


def _from_readings(ev: Evidence, read: Read, src: str, now: float) -> None:
    """Fill the evidence from :data:`READINGS`, whichever path answers them."""
    info = read("deployment")
    if info:
        labels = sorted(info, key=lambda kv: kv[0].get("instance", ""))[0][0]
        if len({(x[0].get("index_k_dtype"), x[0].get("hicache")) for x in info}) > 1:
            ev.notes.append("sidecars under the selector report different deployments")
        dep = ev.deployment or Deployment()
        dep.index_k_dtype = labels.get("index_k_dtype") or dep.index_k_dtype
        dep.configurator = labels.get("configurator") or dep.configurator
        dep.hicache = {"true": True, "false": False}.get(labels.get("hicache", ""), dep.hicache)
        dep.model = labels.get("model") or dep.model
        origin = src.split(",", 1)[0]  # "Prometheus" or "sidecar /metrics"
        dep.source = dep.source or f"{origin} {m.DEPLOYMENT_INFO.name}"
        ev.deployment = dep
    sg = read("sglang")
    if sg and ev.deployment is not None:
        ev.deployment.sglang_version = sg[0][0].get("version")
    engine = read("engine")
    if engine:
        ev.engine = {k: engine[0][0].get(k, "") for k in m.ENGINE_INFO.labels}
    server = read("vllm") or sg
    if server:
        ev.engine_version = server[0][0].get("version")
    over = read("overcommit")
    multi = len({labels.get("instance") for labels, _ in over}) > 1
    ranks = {r.key: r for r in ev.ranks} if not multi else {}
    _set_rank(ranks, over, "overcommit_bytes", multi)
    for key, attr in (
        ("reserve", "reserve_bytes"),
        ("gpu_free", "gpu_free_bytes"),
        ("gpu_total", "gpu_total_bytes"),
        ("gpu_free_min", "gpu_free_min_bytes"),
    ):
        _set_rank(ranks, read(key), attr, multi)
    ev.ranks = _sorted_ranks(ranks)
    if not ev.pools:
        planned = {lb.get("pool", "?"): v for lb, v in read("planned")}
        alloc = {lb.get("pool", "?"): v for lb, v in read("allocated")}
        ev.pools = sorted(
            (PoolGap(p, planned[p], alloc[p]) for p in planned if p in alloc),
            key=lambda p: -p.overcommit_bytes,
        )
    reasons = {lb.get("reason", "?"): v for lb, v in read("reasons")}
    corruption = corruption_from_counts(src, read("samples"), reasons)
    ev.corruption = corruption
    if corruption is not None:
        corruption.by_length = length_buckets(read("length_samples"))
        finishes: dict[str, dict[str, int]] = {}
        for lb, v in read("finishes"):
            if v:
                row = finishes.setdefault(lb.get("finish_reason", "?"), {})
                row[lb.get("verdict", "?")] = round(v)
        corruption.finish_reasons = finishes
        for key, attr in (
            ("output_tokens", "output_tokens_p50"),
            ("output_tokens_total", "output_tokens_p50_total"),
        ):
            rows = sorted((float(lb.get("le", "inf")), v) for lb, v in read(key))
            setattr(corruption, attr, histogram_quantile(0.5, rows))
    ik = IndexK(src)
    probe = read("probe_up")
    ik.probe_ranks = len(probe)
    ik.probe_up = sum(1 for _, v in probe if v == 1)
    reads = {lb.get("gated", "?"): v for lb, v in read("index_k_reads")}
    ik.gated, ik.ungated = reads.get("true"), reads.get("false")
    ik.ungated_total = _scalar(read("ungated_total"))
    multi_ik = len({lb.get("instance") for lb, _ in probe}) > 1
    for lb, v in read("ungated_by_rank"):
        ik.ungated_by_rank[_rank_key(lb, multi_ik)] = v
    ik.checks = _scalar(read("checks"))
    ik.mismatches = _scalar(read("mismatches"))
    ik.gap_buckets = sorted((float(lb.get("le", "inf")), v) for lb, v in read("gap"))
    ik.load_backs = _scalar(read("load_backs"))
    ev.index_k = ik
    canary = Canary(src)
    canary.results = {lb.get("result", "?"): round(v) for lb, v in read("canary_results")}
    last = _scalar(read("canary_last_success"))
    if last is not None and last > 0:
        canary.last_success_age_s = max(0.0, now - last)
    if ev.corruption is not None:
        c = ev.corruption.by_source.get("canary", {})
        canary.graded, canary.degenerate = c.get("graded", 0), c.get("degenerate", 0)
    ev.canary = canary if canary.results or canary.last_success_age_s is not None else None


def _prom_series(
    ev: Evidence, prom: Prometheus, s: str, start: float, end: float, step: float, rate_w: str
) -> None:
    def series(query: str, name: Callable[[dict[str, str]], str]) -> list[Series]:
        return [Series(name(lb), pts) for lb, pts in prom.range(query, start, end, step) if pts]

    multi = len({r.key.rpartition("/")[0] for r in ev.ranks}) > 1

    def rank_name(lb: dict[str, str]) -> str:
        return "rank " + _rank_key(lb, multi)

    def inc(by: str, *extra: str) -> str:
        inner = f"increase({m.DSML_SAMPLES.name}{_sel(s, *extra)}[{rate_w}])"
        return f"sum by ({by}) ({inner})"

    ts = ev.series
    ts.overcommit = series(_BY_KEY["overcommit"].promql(s, rate_w), rank_name)
    ts.reserve = series(f"min({m.MEMORY_RESERVE.name}{_sel(s)})", lambda _lb: "reserve (min)")
    ts.gpu_free = series(_BY_KEY["gpu_free"].promql(s, rate_w), rank_name)
    ratio = inc("concurrency_le", 'verdict="degenerate"') + " / " + inc("concurrency_le")
    ts.degenerate_ratio = sorted(
        series(ratio, lambda lb: lb.get("concurrency_le", "?")), key=lambda x: bucket_order(x.name)
    )
    ts.ungated_rate = series(
        f"sum(rate({m.HICACHE_INDEX_K_READS.name}{_sel(s, _UNGATED_MATCHER)}[{rate_w}]))",
        lambda _lb: "ungated index-K reads/s",
    )
    ts.running = series(f"sum({m.SGLANG_RUNNING.name}{_sel(s)})", lambda _lb: "running requests")


def _scalar(rows: Rows) -> float | None:
    return rows[0][1] if rows else None


def _rank_key(labels: dict[str, str], multi: bool) -> str:
    rank = labels.get("rank", "?")
    return f"{labels.get('instance', '?')}/{rank}" if multi else rank


def _set_rank(ranks: dict[str, RankMemory], rows: Rows, attr: str, multi: bool) -> None:
    for labels, value in rows:
        key = _rank_key(labels, multi)
        setattr(ranks.setdefault(key, RankMemory(key)), attr, value)


def _sorted_ranks(ranks: dict[str, RankMemory]) -> list[RankMemory]:
    def order(key: str) -> tuple[str, int]:
        inst, _, rank = key.rpartition("/")
        return inst, int(rank) if rank.isdigit() else 1 << 30

    return [ranks[k] for k in sorted(ranks, key=order)]


def _collect_repro(ev: Evidence, path: Path) -> None:
    target = path / "report.json" if path.is_dir() else path
    try:
        raw = read_local(target, TRIAGE_FILE_MAX_BYTES, TRIAGE_FILE_SECONDS)
        doc = json.loads(raw.decode("utf-8"))
    except (OSError, ValueError, RecursionError) as exc:  # InputRejected is a ValueError
        ev.notes.append(f"repro result {target} unreadable: {exc}")
        return
    if not isinstance(doc, dict) or not isinstance(doc.get("arms"), list):
        ev.notes.append(f"repro result {target}: not `repro --json` output")
        return
    ev.repro = doc


# Slack around a repro run's recorded window when matching its sample lines' times (the
# report's start is taken before the first request, a line's time after its answer).
REPRO_TIME_SLACK_S = 5.0


def _repro_lines(repro: dict[str, Any] | None) -> Callable[[GradedLine], bool]:
    """A predicate: was this sample line written by the repro run whose result triage also
    reads? Such a line is one of the answers the repro result already counts: `triage --repro
    DIR --scan DIR/samples.jsonl` (the example in `triage --help`) gives every answer twice.
    A line matches by the metadata `repro --out` writes: an arm label and URL of that result,
    and a time inside its run, so lines another run appended to the same file still count."""
    if not repro:
        return lambda line: False
    arms = {
        (a.get("label") or a.get("url"), a.get("url"))
        for a in repro.get("arms") or []
        if isinstance(a, dict)
    }
    try:
        start = float(repro.get("started_at") or 0.0)
        end = start + float(repro.get("seconds") or 0.0)
    except (TypeError, ValueError):
        return lambda line: False
    if not start:
        return lambda line: False

    def match(line: GradedLine) -> bool:
        return (
            (line.arm, line.url) in arms
            and line.time is not None
            and start - REPRO_TIME_SLACK_S <= line.time <= end + REPRO_TIME_SLACK_S
        )

    return match


def _file_key(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _collect_scan(ev: Evidence, paths: list[Path]) -> None:
    scan = ScanSummary()
    buckets: dict[str, BucketCount] = {}
    verdicts: Counter[str] = Counter()
    reasons: Counter[str] = Counter()
    in_repro = _repro_lines(ev.repro)
    seen: set[tuple[int, int]] = set()
    for path in paths:
        key = _file_key(path)
        if key is not None and key in seen:  # the same file twice (also via a link or ./)
            ev.notes.append(f"scan {path}: given more than once, read once")
            continue
        try:
            lines = list(read_graded(path))
        except OSError as exc:
            ev.notes.append(f"scan {path}: {exc.strerror or exc}")
            continue
        except InputRejected as exc:
            ev.notes.append(f"scan {path}: {exc}; not counted")
            continue
        if key is not None:
            seen.add(key)
        scan.files.append(str(path))
        repeated = 0
        for line in lines:
            scan.lines += 1
            if line is None:
                scan.unreadable += 1
                continue
            if line.verdict in BAD_VERDICTS and len(ev.samples) < MAX_SAMPLE_RECORDS:
                ev.samples.append(
                    SampleRecord(
                        line.verdict, list(line.reasons), line.concurrency, f"scan:{path.name}"
                    )
                )
            if in_repro(line):
                repeated += 1
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
        if repeated:
            scan.in_repro += repeated
            ev.notes.append(
                f"scan {path}: {repeated} lines are answers the repro result already counts "
                "(written by that run); counted once, their reasons read from the file"
            )
    scan.buckets = sorted(buckets.values(), key=lambda b: bucket_order(b.le))
    scan.verdicts = dict(verdicts)
    scan.reasons = dict(reasons.most_common())
    ev.scan = scan
