"""Canary prober: a few deterministic tool-call requests to SGLang, graded like real traffic.

Requests are spread over the interval with jitter, never more than ``concurrency`` in flight,
with temperature 0 so a change in output is the server's doing. They identify themselves
(``user: dsv4-sidecar-canary``, ``X-Request-Id: dsv4-canary-N``, ``X-DSV4-Canary: 1``) so that
gateways and dashboards can exclude them from latency SLOs. The prompts are a small built-in
set of realistic tool tasks, replaceable with a JSON file of ``{messages, tools}`` objects.

Answers are read with a size cap and decoded with a depth bound (``too_large`` / ``too_deep``
results), and every probe is counted under one of ``RESULTS`` whatever goes wrong: a probe that
raised for any other reason counts as ``error`` and is logged once per exception type, so the
canary can neither die silently nor stop counting.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import Metric

from exporter import outbound
from exporter.metrics import catalog as m
from exporter.samplers.decode import GradingRequest, ResponseOutput
from exporter.samplers.grading import GradingPipeline
from exporter.samplers.prompts import load_prompts
from exporter.sources import bounded
from exporter.sources import reasons as source_reasons
from exporter.sources.base import SourceHealth

log = logging.getLogger(__name__)

# "success", then what a probe fails with (declared in exporter/sources/reasons.py)
RESULTS = ("success", *source_reasons.own("canary"))
CANARY_USER = "dsv4-sidecar-canary"


@dataclass(frozen=True)
class LongProfile:
    """The long-generation canary (issue 26): prompts that ask for a long free-form answer and
    then a tool call, where DeepSeek-V4 corruption lives (sglang#33397: 6 of 11 long answers
    against 0 of 19 short ones). ``interval`` is already raised to respect the token budget
    (:func:`long_interval`)."""

    prompts: list[dict[str, Any]]
    concurrency: int
    max_tokens: int
    interval: float


def long_interval(
    interval: float, concurrency: int, max_tokens: int, tokens_per_hour: int
) -> float:
    """The long profile's interval: the configured one, raised until ``concurrency`` requests
    per interval of at most ``max_tokens`` output tokens each stay within ``tokens_per_hour``."""
    return max(interval, 3600.0 * concurrency * max_tokens / max(1, tokens_per_hour))


class CanaryProber:
    def __init__(
        self,
        base_url: str,
        pipeline: GradingPipeline,
        interval: float = 30.0,
        concurrency: int = 2,
        timeout: float = 60.0,
        prompts: list[dict[str, Any]] | None = None,
        model: Callable[[], str | None] = lambda: None,
        concurrency_now: Callable[[], int | None] = lambda: None,
        max_tokens: int = 1024,
        on_change: Callable[[], None] | None = None,
        seed: int | None = None,
        max_answer_bytes: int = bounded.CANARY_MAX_BYTES,
        long: LongProfile | None = None,
    ) -> None:
        self.max_answer_bytes = max_answer_bytes
        self._logged: set[str] = set()
        self.url = base_url.rstrip("/") + "/v1/chat/completions"
        self.pipeline = pipeline
        self.interval = interval
        self.concurrency = max(1, concurrency)
        self.timeout = timeout
        self.prompts = prompts or load_prompts()
        self.model = model
        self.concurrency_now = concurrency_now
        self.max_tokens = max_tokens
        self.health = SourceHealth("canary", gates_readiness=False)
        self.results = dict.fromkeys(RESULTS, 0)
        self.latency_buckets = dict.fromkeys(m.CANARY_LATENCY.buckets, 0)
        self.latency_sum = 0.0
        self.latency_count = 0
        self._sem = asyncio.Semaphore(self.concurrency)
        self._rng = random.Random(seed)
        self._n = 0
        self._on_change = on_change or (lambda: None)
        self.http = outbound.Outbound(
            timeout=timeout,
            limit=max_answer_bytes,
            connections=self.concurrency + (long.concurrency if long else 0),
        )
        self.long = long
        self._long_sem = asyncio.Semaphore(long.concurrency if long else 1)
        self._long_n = 0

    async def run(self, stop: asyncio.Event) -> None:
        tasks: set[asyncio.Task] = set()
        try:
            loops = [self._loop(stop, tasks, self.interval / self.concurrency, self._sem, False)]
            if self.long is not None:
                per_request = self.long.interval / self.long.concurrency
                loops.append(self._loop(stop, tasks, per_request, self._long_sem, True))
            await asyncio.gather(*loops)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.http.close()

    async def _loop(
        self,
        stop: asyncio.Event,
        tasks: set[asyncio.Task],
        per_request: float,
        sem: asyncio.Semaphore,
        long: bool,
    ) -> None:
        while not stop.is_set():
            # Spread one request per slot over the interval, jittered +-20%.
            delay = per_request * self._rng.uniform(0.8, 1.2)
            if not sem.locked():
                t = asyncio.create_task(self._probe_counted(long))
                tasks.add(t)
                t.add_done_callback(tasks.discard)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=delay)

    async def _probe_counted(self, long: bool = False) -> str:
        """``probe_once`` that cannot raise: an unexpected exception is counted as ``error``
        and logged once per type (a task's exception is never left unretrieved)."""
        try:
            return await self.probe_once(long=long)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            kind = type(exc).__name__
            if kind not in self._logged:
                self._logged.add(kind)
                log.error("canary probe raised %s (logged once per type)", kind, exc_info=exc)
            return self._record("error", f"probe raised {kind}")

    async def probe_once(self, *, long: bool = False) -> str:
        """Send one canary request (of the long-generation profile when ``long``); returns
        the result label."""
        profile = self.long if long else None
        async with self._long_sem if profile else self._sem:
            if profile is not None:
                self._long_n += 1
                prompt = profile.prompts[(self._long_n - 1) % len(profile.prompts)]
                rid, max_tokens = f"dsv4-canary-long-{self._long_n}", profile.max_tokens
            else:
                self._n += 1
                prompt = self.prompts[(self._n - 1) % len(self.prompts)]
                rid, max_tokens = f"dsv4-canary-{self._n}", self.max_tokens
            body: dict[str, Any] = {
                "model": self.model() or "default",
                "messages": prompt["messages"],
                "temperature": 0,
                "max_tokens": max_tokens,
                "stream": False,
                "user": CANARY_USER,
            }
            if prompt.get("tools"):
                body["tools"] = prompt["tools"]
            headers = {"X-Request-Id": rid, "X-DSV4-Canary": "1"}
            concurrency = self.concurrency_now()
            t0 = time.perf_counter()
            try:
                reply = await self.http.post_json(self.url, body, headers=headers)
            except outbound.OutboundError as exc:
                reason = exc.reason if exc.reason in RESULTS else "error"  # unreachable
                detail = f"no answer within {self.timeout}s" if reason == "timeout" else str(exc)
                return self._record(reason, detail)
            status, payload = reply.status, reply.body
            elapsed = time.perf_counter() - t0
            if status != 200:
                return self._record("http_error", f"HTTP {status}")
            try:
                response = bounded.loads_bounded(payload, self.max_answer_bytes)
            except bounded.BodyRejected as exc:
                return self._record(exc.reason, str(exc))
            except ValueError:
                return self._record("http_error", "HTTP 200 with a non-JSON body")
            self._observe_latency(elapsed)
            self.pipeline.submit(
                GradingRequest(
                    source="canary",
                    output=ResponseOutput(response),
                    concurrency=concurrency,
                    request_id=rid,
                    tools=prompt.get("tools"),
                    size=len(payload) * 2,  # decoded strings and containers, roughly
                )
            )
            return self._record("success", "")

    def _record(self, result: str, detail: str) -> str:
        self.results[result] += 1
        if result == "success":
            self.health.success(0.0)
        else:
            self.health.failure(result, detail)
        self._on_change()
        return result

    def _observe_latency(self, seconds: float) -> None:
        self.latency_sum += seconds
        self.latency_count += 1
        for b in self.latency_buckets:
            if seconds <= b:
                self.latency_buckets[b] += 1

    def collect(self) -> Iterable[Metric]:
        fam = m.CANARY_REQUESTS.family()
        for result, n in self.results.items():
            fam.add_metric([result], float(n))
        yield fam
        h = m.CANARY_LATENCY.family()
        buckets = [(str(b), float(n)) for b, n in self.latency_buckets.items()]
        buckets.append(("+Inf", float(self.latency_count)))
        h.add_metric([], buckets, self.latency_sum)
        yield h
