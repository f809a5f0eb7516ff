"""The SGLang source: a thin poller over the two pure parsers.

Each cycle reads ``/server_info`` (``/get_server_info`` on releases that only have the alias)
and, when enabled, SGLang's own ``/metrics``, through the shared
:class:`~exporter.sources.poller.HttpPoller` (bounded bodies, timeouts, no redirects, parsing
off the event loop). A failed ``/server_info`` marks the source down; a failed ``/metrics`` only
drops the live numbers (counted as ``metrics_unavailable`` or ``too_large``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client.core import Metric

from exporter.metrics import catalog as m
from exporter.sources import bounded
from exporter.sources import reasons as source_reasons
from exporter.sources.poller import HttpPoller, PollError
from exporter.sources.sglang.memory import MEMORY_FIELDS, RankMemory
from exporter.sources.sglang.metrics_text import LiveMetrics, parse_sglang_metrics
from exporter.sources.sglang.server_info import (
    ServerFacts,
    ShapeError,
    parse_server_info,
    tool_call_parser_of,
)

# Every reason it counts, the HTTP ones included (declared in exporter/sources/reasons.py).
ERROR_REASONS = source_reasons.names("sglang")


class SglangSource(HttpPoller):
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
        super().__init__(
            "sglang",
            base_url,
            poll_interval=poll_interval,
            timeout=timeout,
            reasons=ERROR_REASONS,
            on_change=on_change,
            max_body_bytes=max(max_info_bytes, max_metrics_bytes),
        )
        self.max_info_bytes = max_info_bytes
        self.max_metrics_bytes = max_metrics_bytes
        self.scrape_metrics = scrape_metrics
        self.facts: ServerFacts | None = None
        self.live: LiveMetrics | None = None
        self.tool_call_parser: str | None = None  # from the last good /server_info
        self._info_path = "/server_info"

    async def poll(self) -> None:
        self.facts = await self._server_info()
        if self.scrape_metrics:
            await self._poll_metrics()

    def went_down(self) -> None:
        self.live = None  # stale live numbers must not look healthy

    async def _server_info(self) -> ServerFacts:
        try:
            data = await self.get_json(self._info_path, self.max_info_bytes)
        except PollError as exc:
            if exc.reason != "http_status" or self._info_path != "/server_info":
                raise
            self._info_path = "/get_server_info"  # older servers only have the alias
            data = await self.get_json(self._info_path, self.max_info_bytes)
        try:
            facts = await self.offload(parse_server_info, data)
        except ShapeError as exc:
            raise PollError("bad_shape", str(exc)) from None
        self.tool_call_parser = tool_call_parser_of(data)
        return facts

    async def _poll_metrics(self) -> None:
        try:
            reply = await self.get("/metrics", self.max_metrics_bytes)
            if reply.status != 200:
                raise PollError("metrics_unavailable", f"GET /metrics returned {reply.status}")
            self.live = await self.offload(_parse_text, reply.body)
            self.health.drop_samples(self.live.dropped_samples)
        except PollError as exc:
            # an oversized /metrics keeps its own reason; everything else is "unavailable"
            reason = exc.reason if exc.reason == bounded.TOO_LARGE else "metrics_unavailable"
            self._metrics_failed(reason, f"{exc.reason}: {exc}")
        except ValueError as exc:  # the text parser's answer to garbage; anything else is a bug
            self._metrics_failed(
                "metrics_unavailable", f"unparseable /metrics: {type(exc).__name__}"
            )

    def _metrics_failed(self, reason: str, detail: str) -> None:
        self.health.count_error(reason, detail)
        self.live = None

    def served_model(self) -> str | None:
        """The name clients send as ``model``, from the last good /server_info."""
        return self.facts.served_model_name if self.facts else None

    def running(self) -> int | None:
        """Concurrency right now as SGLang reports it (sglang:num_running_reqs)."""
        live = self.live
        return int(live.running) if live is not None and live.running is not None else None

    def footprint_facts(self) -> ServerFacts | None:
        """What the footprint model prices: the facts of an up server, else None."""
        return self.facts if self.health.up else None

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


def _parse_text(body: bytes) -> LiveMetrics:
    return parse_sglang_metrics(body.decode("utf-8", "replace"))
