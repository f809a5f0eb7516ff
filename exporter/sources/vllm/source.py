"""The vLLM source: a thin poller over the pure parsers.

Each cycle reads ``/version`` (a failure marks the source down), ``/v1/models`` (the served
model name the canary sends; kept from the last good answer) and vLLM's own ``/metrics``
(a failure only drops the live numbers, counted as ``metrics_unavailable`` or ``too_large``),
through the shared :class:`~exporter.sources.poller.HttpPoller`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from prometheus_client.core import Metric

from exporter.metrics import catalog as m
from exporter.sources import bounded
from exporter.sources import reasons as source_reasons
from exporter.sources.poller import HttpPoller, PollError
from exporter.sources.sglang.memory import RankMemory
from exporter.sources.sglang.server_info import ServerFacts, ShapeError
from exporter.sources.vllm.metrics_text import VllmLive, parse_vllm_metrics
from exporter.sources.vllm.version import VllmFacts, parse_models, parse_version

# Every reason it counts, the HTTP ones included (declared in exporter/sources/reasons.py).
ERROR_REASONS = source_reasons.names("vllm")


class VllmSource(HttpPoller):
    """Polls vLLM; keeps the latest VllmFacts and VllmLive."""

    def __init__(
        self,
        base_url: str,
        *,
        poll_interval: float = 5.0,
        timeout: float = 2.0,
        scrape_metrics: bool = True,
        max_metrics_bytes: int = bounded.METRICS_MAX_BYTES,
        **poll: Any,
    ) -> None:
        """``poll``: what else the HTTP base takes (on_change); JSON answers are capped at
        SERVER_INFO_MAX_BYTES, /metrics at ``max_metrics_bytes``."""
        super().__init__(
            "vllm",
            base_url,
            poll_interval=poll_interval,
            timeout=timeout,
            reasons=ERROR_REASONS,
            max_body_bytes=max_metrics_bytes,
            **poll,
        )
        self.max_metrics_bytes = max_metrics_bytes
        self.scrape_metrics = scrape_metrics
        self.facts: VllmFacts | None = None
        self.live: VllmLive | None = None

    async def poll(self) -> None:
        data = await self.get_json("/version", bounded.SERVER_INFO_MAX_BYTES)
        try:
            version = parse_version(data)
        except ShapeError as exc:
            raise PollError("bad_shape", str(exc)) from None
        name, max_len = await self._models()
        self.facts = VllmFacts(version, name, max_len)
        if self.scrape_metrics:
            await self._poll_metrics()

    def went_down(self) -> None:
        self.live = None  # stale live numbers must not look healthy

    async def _models(self) -> tuple[str | None, int | None]:
        last = self.facts
        kept = (last.served_model_name, last.max_model_len) if last else (None, None)
        try:
            return parse_models(await self.get_json("/v1/models", bounded.SERVER_INFO_MAX_BYTES))
        except (PollError, ShapeError) as exc:
            self.health.count_error("models_unavailable", str(exc))
            return kept

    async def _poll_metrics(self) -> None:
        """vLLM's /metrics; a failure drops the live numbers and is counted, the source stays
        up (``too_large`` keeps its own reason, everything else is ``metrics_unavailable``).
        The last numbers stay while the fetch is in flight: a scrape then still reads them."""
        try:
            reply = await self.get("/metrics", self.max_metrics_bytes)
        except PollError as exc:
            reason = exc.reason if exc.reason == bounded.TOO_LARGE else "metrics_unavailable"
            failed = (reason, f"{exc.reason}: {exc}")
        else:
            if reply.status == 200:
                try:
                    live = await self.offload(_parse_text, reply.body)
                    self.health.drop_samples(live.dropped_samples)
                    if not live.empty:
                        self.live = live
                        return
                    failed = ("metrics_unavailable", "GET /metrics has no vllm: families")
                except ValueError as exc:  # the text parser's answer to garbage (not a bug)
                    failed = ("metrics_unavailable", f"unparseable: {type(exc).__name__}")
            else:
                failed = ("metrics_unavailable", f"GET /metrics returned {reply.status}")
        self.live = None
        self.health.count_error(*failed)

    def served_model(self) -> str | None:
        """The name clients send as ``model`` (``/v1/models``, kept from the last good one)."""
        return self.facts.served_model_name if self.facts else None

    def memory_by_rank(self) -> dict[int, RankMemory]:
        """vLLM reports no per-rank memory figures of the kind SGLang does."""
        return {}

    def footprint_facts(self) -> ServerFacts | None:
        """None: the footprint model does not price vLLM's KV cache."""
        return None

    def running(self) -> int | None:
        """Concurrency right now as vLLM reports it (vllm:num_requests_running)."""
        live = self.live
        return int(live.running) if live is not None and live.running is not None else None

    def collect(self) -> Iterable[Metric]:
        f = self.facts
        if f is None or not self.health.up:
            return
        yield m.VLLM_INFO.info({"version": f.version, "model": f.served_model_name or ""})
        live = self.live
        if live is None:
            return
        for spec, value in ((m.VLLM_RUNNING, live.running),):
            if value is not None:
                yield spec.one(value)
        cache = live.cache
        if cache is not None:
            tokens = cache.capacity_tokens
            if tokens is not None:
                yield m.VLLM_KV_TOKENS.one(tokens)
            yield m.VLLM_CACHE_CONFIG.info(
                {
                    "block_size": "" if cache.block_size is None else str(cache.block_size),
                    "num_gpu_blocks": ""
                    if cache.num_gpu_blocks is None
                    else str(cache.num_gpu_blocks),
                    "cache_dtype": cache.cache_dtype,
                }
            )


def _parse_text(body: bytes) -> VllmLive:
    return parse_vllm_metrics(body.decode("utf-8", "replace"))
