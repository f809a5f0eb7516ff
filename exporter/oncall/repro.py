"""The `repro` harness: graded load against one endpoint, or two arms A/B at the same load.

For each concurrency level, every arm gets ``concurrency`` multi-turn tool-calling sessions
(the load generator) at the same time, bounded by a request count and/or a duration; each
answer is graded by the DSML grader as it arrives. The result is the degenerate rate per
arm and level with a Wilson 95% interval, the reasons, a low-vs-high-concurrency trend test
per arm and, with two arms, Fisher's exact test on the pooled counts. Each arm's engine is
discovered (or given) and its answers graded in that engine's dialect (``v4@vllm`` for vLLM),
so an A/B between a vLLM and an SGLang deployment compares like with like. The arms run
simultaneously (not one after the other) so that whatever else changes during the run hits
both alike.

The report types and statistics live in :mod:`exporter.oncall.repro_report` (pure); this
module is the HTTP runner (exporter.outbound). Everything the runner learns is kept on the
runner as it happens, so an interrupted run (Ctrl-C) still yields a report of what completed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from exporter import outbound
from exporter.dsml import DEGENERATE, ERROR, grade_openai_response
from exporter.dsml.engines import qualify
from exporter.loadgen import Exchange, LoadGenerator
from exporter.oncall.repro_report import (
    DEFAULT_ALPHA,
    DEFAULT_LEVELS,
    DEFAULT_REQUESTS,
    UNGRADABLE,
    Arm,
    ArmResult,
    LevelResult,
    ReproReport,
    error_cause,
)
from exporter.oncall.samples import SampleWriter
from exporter.sources import bounded
from exporter.sources.discovery import EngineDiscovery
from exporter.sources.poller import PollError


async def discover_model(url: str, timeout: float = 5.0) -> str | None:
    """The first model id the endpoint lists at /v1/models (None when it lists none)."""
    async with outbound.Outbound(timeout=timeout, limit=bounded.SERVER_INFO_MAX_BYTES) as http:
        try:
            reply = await http.get(url.rstrip("/") + "/v1/models")
            if reply.status != 200:
                return None
            return str(reply.json()["data"][0]["id"])
        except (outbound.OutboundError, ValueError, KeyError, IndexError, TypeError):
            return None


async def discover_engine(url: str, timeout: float = 5.0) -> str | None:
    """``sglang`` or ``vllm`` (the sidecar's own discovery, one cycle), None when neither
    answers as itself: the arm is then graded in the plain dialect (SGLang's reading)."""
    seam = EngineDiscovery("auto", url, timeout=timeout)
    try:
        await seam.poll()
    except PollError:
        return None
    finally:
        await seam.close()
    return seam.engine


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
        self._grammars: list[str] = []  # per arm: the grammar qualified with its engine

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
            level.error_causes[error_cause(ex.error)] += 1
        else:
            tools = ex.request.get("tools")
            grammar = self._grammars[index] if self._grammars else self.grammar
            result = grade_openai_response(ex.response, tools=tools, grammar=grammar)
            if result.verdict == ERROR:
                level.errors += 1
                level.error_causes[UNGRADABLE] += 1
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
                        grammar=grammar,
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
                engine = arm.engine or await discover_engine(arm.url, min(5.0, self.timeout))
                arms.append(Arm(arm.label, arm.url, model or "default", engine))
            self._grammars = [qualify(self.grammar, a.engine) or self.grammar for a in arms]
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
