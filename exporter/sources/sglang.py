"""SGLang source: server facts from /server_info (or /get_server_info) and live load from
SGLang's own /metrics.

Field names move between SGLang versions, so extraction is defensive and tested against
recorded shapes from several versions (tests/fixtures/sglang). Unreachable, slow, malformed,
oversized or too deeply nested answers mark the source down with a bounded reason (one of
``ERROR_REASONS``); they never raise out of the poller. Bodies are read with a size cap and JSON
with a depth bound (``exporter.sources.bounded``), so a hostile or broken upstream costs at
most the cap in memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families

from exporter.metrics import catalog as m
from exporter.sources import bounded
from exporter.sources.base import SourceHealth
from exporter.units import GIB

log = logging.getLogger(__name__)

ERROR_REASONS = (
    "unreachable",
    "timeout",
    "http_status",
    "bad_json",
    "bad_shape",
    "metrics_unavailable",
    bounded.TOO_LARGE,
    bounded.TOO_DEEP,
    "internal_error",  # the poll loop raised (a sidecar bug); the supervisor restarted it
)
DSV4_DEFAULT_SWA_RATIO = 0.1
GLOBAL_DEFAULT_SWA_RATIO = 0.8
DSV4_DEFAULT_MAX_RUNNING = 256
# Memory fields SGLang reports (see RankMemory for the release each comes from).
MEMORY_FIELDS = ("weight", "kv_cache", "graph", "startup_available", "swa_tokens", "context_len")
MAX_GRAPH_PHASES = 8  # 0.5.23 has six (GRAPH_MEMORY_USAGE_KEYS); bounds the phase label
MAX_LOAD_BACK_POOLS = 8  # HiCache load-back pools re-exported by name (kv, index_k, ...)
# /server_info strings that become label values or log text: a release string, a model path.
_VERSION = re.compile(r"[0-9A-Za-z.+_-]{1,64}")
MAX_MODEL_PATH = 512
_PHASE = re.compile(r"[a-z][a-z0-9_]{0,31}")


class ShapeError(ValueError):
    """The JSON parsed but lacks what the sidecar needs; the message names the field."""


@dataclass(frozen=True)
class ServerFacts:
    """What the sidecar needs from /server_info, normalised across versions."""

    version: str
    model_path: str
    served_model_name: str
    tp_size: int
    dp_size: int
    pp_size: int
    mem_fraction_static: float | None
    page_size: int
    swa_full_tokens_ratio: float
    max_running_requests: int
    speculative: bool
    speculative_algorithm: str | None
    fp4_indexer: bool
    hicache: bool
    max_total_num_tokens: int | None
    weights_gb: float | None = None
    # SGLang's --nnodes (a server arg, so /server_info has it); --node-rank there is the
    # head's own (0): each node's rank comes from its pod (the node_rank setting).
    nnodes: int = 1
    memory: RankMemory | None = None  # internal_states[0].memory_usage (DP worker 0)
    # Server args that size the SWA pool in cap mode (0.5.21+, footprint.pricing.swa_cap_tokens);
    # None where /server_info lacks them (the footprint then assumes SGLang's defaults).
    chunked_prefill_size: int | None = None
    swa_prefix_tails: int | None = None
    disable_radix_cache: bool = False
    disable_overlap_schedule: bool = False
    # Attention DP (--enable-dp-attention; 0.5.23 also attn_dp_size): SGLang's
    # max_running_requests is global and divided per attention-DP worker.
    enable_dp_attention: bool = False
    attn_dp_size: int | None = None
    # max_running_requests as /server_info reports it (global) or None when only the per-DP
    # effective value was reported (then max_running_requests above is already per worker).
    max_running_requests_global: int | None = None
    speculative_num_draft_tokens: int | None = None

    @property
    def model(self) -> str:
        return self.served_model_name or self.model_path


@dataclass(frozen=True)
class RankMemory:
    """SGLang's own memory figures for one rank, in bytes; None where the release lacks them.

    Sources by release (sglang/srt/observability/metrics_collector.py ``emit_constants`` and
    the scheduler's ``memory_usage`` in /server_info internal_states):
    ``weight``: sglang:weight_memory_usage_gb 0.5.17+, memory_usage.weight 0.5.12+;
    ``kv_cache``: sglang:kv_cache_memory_usage_gb 0.5.17+, memory_usage.kvcache 0.5.12+ (0 for
    DSV4 pools: exported, never used); ``graph``: sglang:graph_memory_usage_gb{phase} 0.5.17+,
    memory_usage.graph (one float before 0.5.17, per phase after); ``startup_available``:
    sglang:startup_available_gpu_memory_gb 0.5.12+, memory_usage.startup_available 0.5.17+;
    ``swa_tokens``: sglang:max_total_num_tokens_swa 0.5.17+; ``context_len``:
    sglang:context_len 0.5.12+.
    """

    weight_bytes: int | None = None
    kv_cache_bytes: int | None = None
    graph_bytes: Mapping[str, int] | None = None  # phase -> bytes ("all" before 0.5.17)
    startup_available_bytes: int | None = None
    swa_tokens: int | None = None
    context_len: int | None = None

    @property
    def graph_total_bytes(self) -> int | None:
        return None if self.graph_bytes is None else sum(self.graph_bytes.values())

    def present(self) -> set[str]:
        return {f for f, v in zip(MEMORY_FIELDS, self._values(), strict=True) if v is not None}

    def merged(self, fallback: RankMemory | None) -> RankMemory:
        """Field by field: this one's value, else the fallback's."""
        if fallback is None:
            return self
        pick = [
            mine if mine is not None else theirs
            for mine, theirs in zip(self._values(), fallback._values(), strict=True)
        ]
        return RankMemory(*pick)

    def _values(self) -> tuple[Any, ...]:
        return (
            self.weight_bytes,
            self.kv_cache_bytes,
            self.graph_bytes,
            self.startup_available_bytes,
            self.swa_tokens,
            self.context_len,
        )


def _gb(v: Any) -> int | None:
    """A non-negative finite GB (GiB) number as bytes; anything else is absent."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0 or v == float("inf"):
        return None
    return round(v * GIB)


def _count(v: Any) -> int | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0 or v == float("inf"):
        return None
    return int(v)


def _graph_phases(raw: Any) -> dict[str, int] | None:
    """memory_usage.graph: one float (before 0.5.17) or {phase: GB} (0.5.17+)."""
    if isinstance(raw, Mapping):
        out = {}
        for phase, v in list(raw.items())[:MAX_GRAPH_PHASES]:
            b = _gb(v)
            if isinstance(phase, str) and _PHASE.fullmatch(phase) and b is not None:
                out[phase] = b
        return out or None
    b = _gb(raw)
    return None if b is None else {"all": b}


def memory_usage_of(state: Mapping[str, Any]) -> RankMemory | None:
    """internal_states[i].memory_usage as RankMemory; None when absent or not an object."""
    mu = state.get("memory_usage")
    if not isinstance(mu, Mapping):
        return None
    return RankMemory(
        weight_bytes=_gb(mu.get("weight")),
        kv_cache_bytes=_gb(mu.get("kvcache")),
        graph_bytes=_graph_phases(mu.get("graph")),
        startup_available_bytes=_gb(mu.get("startup_available")),
        swa_tokens=_count(mu.get("token_capacity_swa")),
    )


# Most ranks one deployment can have along any parallel axis (TP, PP, DP): far past any
# published DSV4 launch (TP 16 over two nodes, PP 4, DP 16), and the bound on what a hostile
# /server_info can make the sidecar iterate over or export (tp_size: 10**8 froze the loop).
MAX_PARALLEL = 256
_PARALLEL = ("tp_size", "dp_size", "pp_size", "nnodes")


def _num(d: Mapping[str, Any], key: str, kind: type, default: Any = None) -> Any:
    v = d.get(key, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ShapeError(f"server_info field {key!r} should be a finite number, got {v!r:.64}")
    if key in _PARALLEL and not 0 <= v <= MAX_PARALLEL:
        raise ShapeError(f"server_info field {key!r} is {v!r:.64}, outside 0..{MAX_PARALLEL}")
    return kind(v)


def _served_name(value: Any, model_path: str) -> str:
    """The name clients send as ``model`` (the canary too): SGLang's, when it is a sane one."""
    if isinstance(value, str) and 0 < len(value) <= MAX_MODEL_PATH:
        return value
    return model_path


def parse_server_info(d: Any) -> ServerFacts:
    """Normalise a /server_info JSON object (any supported version) into ServerFacts."""
    if not isinstance(d, Mapping):
        raise ShapeError("server_info is not a JSON object")
    states = d.get("internal_states")
    state0: Mapping[str, Any] = {}
    if isinstance(states, list) and states and isinstance(states[0], Mapping):
        state0 = states[0]
    tokens = _num(d, "max_total_num_tokens", int)
    if tokens is None:
        tokens = _num(state0, "max_total_num_tokens", int)
    if tokens is None and isinstance(state0.get("memory_usage"), Mapping):
        tokens = _num(state0["memory_usage"], "token_capacity", int)
    swa = _num(d, "swa_full_tokens_ratio", float)
    if swa is None or swa == GLOBAL_DEFAULT_SWA_RATIO:
        swa = DSV4_DEFAULT_SWA_RATIO  # SGLang's DSV4 override of the global default
    mrr_global = _num(d, "max_running_requests", int)
    mrr = mrr_global
    if mrr is None:
        mrr = _num(state0, "effective_max_running_requests_per_dp", int, DSV4_DEFAULT_MAX_RUNNING)
    weights = None
    if isinstance(state0.get("memory_usage"), Mapping):
        weights = _num(state0["memory_usage"], "weight", float)
    model_path = d.get("model_path")
    if not isinstance(model_path, str) or not model_path:
        raise ShapeError("server_info has no 'model_path'")
    if len(model_path) > MAX_MODEL_PATH:
        raise ShapeError(f"server_info 'model_path' is {len(model_path)} characters long")
    version = str(d.get("version") or "unknown")
    if not _VERSION.fullmatch(version):
        version = "unparseable"  # read as an unknown release (legacy rules), never a label
    algo = d.get("speculative_algorithm")
    return ServerFacts(
        version=version,
        model_path=model_path,
        served_model_name=_served_name(d.get("served_model_name"), model_path),
        tp_size=_num(d, "tp_size", int, 1),
        dp_size=_num(d, "dp_size", int, 1),
        pp_size=_num(d, "pp_size", int, 1),
        mem_fraction_static=_num(d, "mem_fraction_static", float),
        page_size=_num(d, "page_size", int, 256) or 256,
        swa_full_tokens_ratio=swa,
        max_running_requests=mrr,
        speculative=bool(algo) and str(algo).upper() != "NONE",
        speculative_algorithm=str(algo) if algo else None,
        fp4_indexer=bool(d.get("enable_deepseek_v4_fp4_indexer", False)),
        hicache=bool(d.get("enable_hierarchical_cache", False)),
        max_total_num_tokens=tokens,
        weights_gb=weights,
        nnodes=max(_num(d, "nnodes", int, 1) or 1, 1),
        memory=memory_usage_of(state0),
        chunked_prefill_size=_num(d, "chunked_prefill_size", int),
        swa_prefix_tails=_num(d, "swa_prefix_tails", int),
        disable_radix_cache=bool(d.get("disable_radix_cache", False)),
        disable_overlap_schedule=bool(d.get("disable_overlap_schedule", False)),
        enable_dp_attention=bool(d.get("enable_dp_attention", False)),
        attn_dp_size=_num(d, "attn_dp_size", int),
        max_running_requests_global=mrr_global,
        speculative_num_draft_tokens=_num(d, "speculative_num_draft_tokens", int),
    )


def tool_call_parser_of(d: Any) -> str | None:
    """``tool_call_parser`` from a /server_info object (SGLang reports every server arg there),
    or None when absent or not a string. Kept apart from :func:`parse_server_info`: only the
    DSML grader needs it, and a missing or odd value must never fail the poll."""
    if not isinstance(d, Mapping):
        return None
    value = d.get("tool_call_parser")
    return value if isinstance(value, str) and value else None


@dataclass(frozen=True)
class LiveMetrics:
    """Values taken from SGLang's /metrics (absent ones stay None)."""

    running: float | None = None
    queued: float | None = None
    token_usage: float | None = None
    hicache_host_used: float | None = None
    hicache_host_total: float | None = None
    load_back_tokens: dict[str, float] = field(default_factory=dict)
    load_back_seconds: float | None = None
    load_backs: float | None = None
    # (pp_rank, tp_rank) -> SGLang's memory constants as that scheduler reported them
    memory: dict[tuple[int, int], RankMemory] = field(default_factory=dict)


# sglang:<name> constant gauge -> RankMemory field and unit converter
_MEMORY_GAUGES: dict[str, tuple[str, Any]] = {
    "weight_memory_usage_gb": ("weight_bytes", _gb),
    "kv_cache_memory_usage_gb": ("kv_cache_bytes", _gb),
    "startup_available_gpu_memory_gb": ("startup_available_bytes", _gb),
    "max_total_num_tokens_swa": ("swa_tokens", _count),
    "context_len": ("context_len", _count),
}


def _rank_key(labels: Mapping[str, str]) -> tuple[int, int] | None:
    try:
        return int(labels.get("pp_rank", "0") or 0), int(labels.get("tp_rank", "0") or 0)
    except ValueError:
        return None


def _memory_gauges(fams: list[Any]) -> dict[tuple[int, int], RankMemory]:
    """Per scheduler (pp_rank, tp_rank): the memory constants it emitted at start-up."""
    fields: dict[tuple[int, int], dict[str, Any]] = {}
    for fam in fams:
        short = fam.name[len("sglang:") :]
        conv = _MEMORY_GAUGES.get(short)
        if conv is None and short != "graph_memory_usage_gb":
            continue
        for s in fam.samples:
            if s.name != fam.name or s.labels.get("dp_rank", "0") not in ("0", ""):
                continue
            key = _rank_key(s.labels)
            if key is None:
                continue
            got = fields.setdefault(key, {})
            if conv is not None:
                value = conv[1](s.value)
                if value is not None:
                    got[conv[0]] = value
                continue
            phases = got.setdefault("graph_bytes", {})
            phase, b = s.labels.get("phase", ""), _gb(s.value)
            if _PHASE.fullmatch(phase) and b is not None and len(phases) < MAX_GRAPH_PHASES:
                phases[phase] = b
    return {k: RankMemory(**v) for k, v in fields.items()}


def parse_sglang_metrics(text: str) -> LiveMetrics:
    """Sum per-DP-rank gauges (tp_rank 0 reports for its DP group), take max of usage."""
    sums: dict[str, float] = {}
    usage: float | None = None
    lb_tokens: dict[str, float] = {}
    lb_sum = lb_count = None
    fams = list(text_string_to_metric_families(text))
    for fam in fams:
        name = fam.name
        if not name.startswith("sglang:"):
            continue
        short = name[len("sglang:") :].removesuffix("_total")
        for s in fam.samples:
            if s.labels.get("tp_rank", "0") not in ("0", ""):
                continue  # every TP rank repeats the scheduler's numbers
            if (
                short
                in (
                    "num_running_reqs",
                    "num_queue_reqs",
                    "hicache_host_used_tokens",
                    "hicache_host_total_tokens",
                )
                and s.name == name
            ):
                sums[short] = sums.get(short, 0.0) + s.value
            elif short == "token_usage" and s.name == name:
                usage = s.value if usage is None else max(usage, s.value)
            elif short == "load_back_tokens" and s.name.endswith("_total"):
                pool = s.labels.get("pool", "kv")
                if not _PHASE.fullmatch(pool) or (
                    pool not in lb_tokens and len(lb_tokens) >= MAX_LOAD_BACK_POOLS
                ):
                    pool = "other"  # a label value: a short name from a bounded set
                lb_tokens[pool] = lb_tokens.get(pool, 0.0) + s.value
            elif short == "load_back_duration_seconds":
                if s.name.endswith("_sum"):
                    lb_sum = (lb_sum or 0.0) + s.value
                elif s.name.endswith("_count"):
                    lb_count = (lb_count or 0.0) + s.value
    return LiveMetrics(
        running=sums.get("num_running_reqs"),
        queued=sums.get("num_queue_reqs"),
        token_usage=usage,
        hicache_host_used=sums.get("hicache_host_used_tokens"),
        hicache_host_total=sums.get("hicache_host_total_tokens"),
        load_back_tokens=lb_tokens,
        load_back_seconds=lb_sum,
        load_backs=lb_count,
        memory=_memory_gauges(fams),
    )


class PollError(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


class SglangSource:
    """Polls SGLang; keeps the latest ServerFacts and LiveMetrics."""

    def __init__(
        self,
        base_url: str,
        poll_interval: float = 5.0,
        timeout: float = 2.0,
        scrape_metrics: bool = True,
        on_change: Callable[[], None] | None = None,
        max_info_bytes: int = bounded.SERVER_INFO_MAX_BYTES,
        max_metrics_bytes: int = bounded.METRICS_MAX_BYTES,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.max_info_bytes = max_info_bytes
        self.max_metrics_bytes = max_metrics_bytes
        self.poll_interval = poll_interval
        self.timeout = timeout
        self.scrape_metrics = scrape_metrics
        self.health = SourceHealth("sglang")
        self.health.errors = dict.fromkeys(ERROR_REASONS, 0)
        self.facts: ServerFacts | None = None
        self.live: LiveMetrics | None = None
        self.tool_call_parser: str | None = None  # from the last good /server_info
        self._info_path = "/server_info"
        self._on_change = on_change or (lambda: None)
        self._session: aiohttp.ClientSession | None = None

    async def run(self, stop: asyncio.Event) -> None:
        try:
            while not stop.is_set():
                await self.poll_once()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=self.poll_interval)
        finally:
            await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout),
                connector=aiohttp.TCPConnector(limit=4),
            )
        return self._session

    async def _get(self, path: str, limit: int) -> tuple[int, bytes]:
        """Status and body of ``GET path``; a body over ``limit`` bytes is not kept."""
        try:
            async with self._client().get(self.base_url + path) as resp:
                if resp.status != 200:
                    return resp.status, b""  # only 200 bodies are read: no cost for errors
                return resp.status, await bounded.read_capped(resp, limit)
        except bounded.BodyRejected as exc:
            raise PollError(exc.reason, f"GET {path}: {exc}") from None
        except asyncio.TimeoutError:
            raise PollError("timeout", f"GET {path} exceeded {self.timeout}s") from None
        except aiohttp.ClientError as exc:
            raise PollError("unreachable", f"GET {path}: {type(exc).__name__}") from None

    async def _server_info(self) -> ServerFacts:
        status, body = await self._get(self._info_path, self.max_info_bytes)
        if status == 404 and self._info_path == "/server_info":
            self._info_path = "/get_server_info"  # older servers only have the alias
            status, body = await self._get(self._info_path, self.max_info_bytes)
        if status != 200:
            raise PollError("http_status", f"GET {self._info_path} returned {status}")
        try:
            data = bounded.loads_bounded(body, self.max_info_bytes)
        except bounded.BodyRejected as exc:
            raise PollError(exc.reason, f"GET {self._info_path}: {exc}") from None
        except ValueError:  # UnicodeDecodeError included
            raise PollError("bad_json", f"GET {self._info_path} returned non-JSON") from None
        try:
            facts = parse_server_info(data)
        except ShapeError as exc:
            raise PollError("bad_shape", str(exc)) from None
        self.tool_call_parser = tool_call_parser_of(data)
        return facts

    async def poll_once(self) -> None:
        t0 = time.perf_counter()
        try:
            facts = await self._server_info()
        except PollError as exc:
            if self.health.up or self.health.cycles == 0:
                log.warning("SGLang source down: %s: %s", exc.reason, exc)
            self.health.failure(exc.reason, str(exc), time.perf_counter() - t0)
            self.live = None  # stale live numbers must not look healthy
            self._on_change()
            return
        self.facts = facts
        if self.scrape_metrics:
            await self._poll_metrics()
        self.health.success(time.perf_counter() - t0)
        self._on_change()

    async def _poll_metrics(self) -> None:
        try:
            status, body = await self._get("/metrics", self.max_metrics_bytes)
            if status != 200:
                raise PollError("metrics_unavailable", f"GET /metrics returned {status}")
            # Parsing a large exposition is CPU work: keep it off the event loop.
            self.live = await asyncio.to_thread(
                parse_sglang_metrics, body.decode("utf-8", "replace")
            )
        except PollError as exc:
            # an oversized /metrics keeps its own reason; everything else is "unavailable"
            reason = exc.reason if exc.reason == bounded.TOO_LARGE else "metrics_unavailable"
            self._metrics_failed(reason, f"{exc.reason}: {exc}")
        except Exception as exc:  # the text parser raises ValueError and friends on garbage
            self._metrics_failed(
                "metrics_unavailable", f"unparseable /metrics: {type(exc).__name__}"
            )

    def _metrics_failed(self, reason: str, detail: str) -> None:
        self.health.count_error(reason, detail)
        self.live = None

    def memory_by_rank(self) -> dict[int, RankMemory]:
        """Global rank (pp_rank * tp_size + tp_rank) -> SGLang's memory figures for it.

        Only each stage's TP rank 0 reports unless SGLang runs with
        --enable-metrics-for-all-schedulers; its figures stand for the stage's other TP ranks
        (TP shards hold equal weights, pools and graphs). /metrics first, field by field
        /server_info internal_states (DP worker 0: stage 0) where /metrics lacks it.
        """
        f = self.facts
        if f is None or not self.health.up:
            return {}
        reported = self.live.memory if self.live is not None else {}
        out: dict[int, RankMemory] = {}
        for rank in range(f.tp_size * f.pp_size):
            stage, tp = divmod(rank, f.tp_size)
            mine = reported.get((stage, tp)) or reported.get((stage, 0))
            fallback = f.memory if stage == 0 else None
            if mine is None and fallback is None:
                continue
            out[rank] = (mine or RankMemory()).merged(fallback)
        return out

    def _memory_families(self) -> Iterable[Metric]:
        by_rank = self.memory_by_rank()
        present: set[str] = set()
        weight, graph = m.SGLANG_WEIGHT_BYTES.family(), m.SGLANG_GRAPH_BYTES.family()
        kv, avail = m.SGLANG_KV_REPORTED_BYTES.family(), m.SGLANG_STARTUP_AVAILABLE_BYTES.family()
        for rank, mem in sorted(by_rank.items()):
            r = str(rank)
            present |= mem.present()
            for fam, value in (
                (weight, mem.weight_bytes),
                (kv, mem.kv_cache_bytes),
                (avail, mem.startup_available_bytes),
            ):
                if value is not None:
                    fam.add_metric([r], float(value))
            for phase, b in sorted((mem.graph_bytes or {}).items()):
                graph.add_metric([r, phase], float(b))
        yield from (weight, graph, kv, avail)
        fields = m.SGLANG_MEMORY_FIELD.family()
        for name in MEMORY_FIELDS:
            fields.add_metric([name], 1.0 if name in present else 0.0)
        yield fields

    # --- exposition ----------------------------------------------------------------------------
    def collect(self) -> Iterable[Metric]:
        h = self.health  # exported as dsv4_source_*{source="sglang"} by the sidecar
        f = self.facts
        if f is None or not h.up:
            return
        yield m.SGLANG_INFO.info({"version": f.version, "model": f.model})
        if f.max_total_num_tokens is not None:
            yield m.SGLANG_MAX_TOTAL_TOKENS.one(f.max_total_num_tokens)
        if f.mem_fraction_static is not None:
            yield m.SGLANG_MEM_FRACTION.one(f.mem_fraction_static)
        yield from self._memory_families()
        live = self.live
        if live is None:
            return
        # SGLang's own series are read from SGLang's /metrics (docs/sglang.md); re-exported
        # only what triage needs from the sidecar alone.
        for spec, value in (
            (m.SGLANG_RUNNING, live.running),
            (m.HICACHE_LOAD_BACKS, live.load_backs),
        ):
            if value is not None:
                yield spec.one(value)
