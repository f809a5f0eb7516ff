"""The simulated SGLang (or vLLM) HTTP server (labelled a simulator in every answer).

Speaks SGLang's /server_info, /get_server_info, /health, /health_generate, /v1/models and
/metrics (``sglang:`` names and labels as the real server), so the sidecar and the tests run
against real HTTP. ``POST /_sim/control`` injects faults (slow answers, garbage, HTTP errors)
and background load for fault tests and the demo; ``GET /_sim/gpus`` serves the simulated
GPUs' ground truth to the sidecar's ``fake`` GPU backend (``exporter.sim.gpus``). With
``engine: vllm`` it poses as vLLM instead (:mod:`exporter.sim.vllm`): ``/version`` (the
``vllm_version`` release), vLLM's ``/v1/models``, ``vllm:`` metrics, that release's parser
applied to the same simulated model.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from exporter.samplers.buckets import bucket_label
from exporter.sim.deployment import SimDeployment
from exporter.sim.generation import Completion, complete, corruption_probability
from exporter.sim.probe_writer import SimProbe, deployment_memory
from exporter.sim.settings import SimSettings
from exporter.sim.vllm import VllmMetrics
from exporter.sim.vllm import message as vllm_message

FAULTS = ("none", "garbage", "http_500", "bad_shape", "metrics_garbage")
# vLLM mode: above this many running requests each new one preempts a running sequence (the
# --max-num-seqs 32 of vllm#50576), so vllm:num_preemptions rises with concurrency.
PREEMPT_ABOVE = 32
# sglang:time_to_first_token_seconds' buckets (SGLang's metrics collector).
TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 120, 160)


@dataclass
class SimState:
    running: int = 0  # in-flight requests served by this simulator
    background: int = 0  # extra running requests reported (demo / tests)
    queued: int = 0
    fault: str = "none"
    delay: float = 0.0
    load_back_tokens: float = 0.0
    load_backs: int = 0
    load_back_seconds: float = 0.0
    requests_total: int = 0
    preemptions: int = 0  # vLLM mode: requests served above PREEMPT_ABOVE running
    prompt_tokens: int = 0
    generation_tokens: int = 0
    # sglang:time_to_first_token_seconds: cumulative count per TTFT_BUCKETS bound, count, sum
    ttft_buckets: list[int] = field(default_factory=lambda: [0] * len(TTFT_BUCKETS))
    ttft_count: int = 0
    ttft_sum: float = 0.0

    def observe_ttft(self, seconds: float) -> None:
        for i, bound in enumerate(TTFT_BUCKETS):
            if seconds <= bound:
                self.ttft_buckets[i] += 1
        self.ttft_count += 1
        self.ttft_sum += seconds

    # ground truth for tests: bucket label -> [requests with tools, degenerate]
    truth: dict[str, list[int]] = field(default_factory=dict)
    phenotypes: dict[str, int] = field(default_factory=dict)

    @property
    def reported_running(self) -> int:
        return self.running + self.background


class _SglangMetrics:
    """Renders the sglang: families a real server exposes, from the simulator's state."""

    def __init__(self, dep: SimDeployment, state: SimState) -> None:
        self.dep, self.state = dep, state

    def collect(self):
        s, st = self.dep.settings, self.state
        labels = ["model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank"]
        tokens = self.dep.max_total_num_tokens
        used = min(tokens, st.reported_running * 12_000)
        gauges = {
            "sglang:num_running_reqs": st.reported_running,
            "sglang:num_queue_reqs": st.queued,
            "sglang:max_total_num_tokens": tokens,
            "sglang:num_used_tokens": used,
            "sglang:token_usage": used / tokens if tokens else 0.0,
            "sglang:gen_throughput": 40.0 * st.reported_running,
        }
        if s.hicache == "on":
            gauges["sglang:hicache_host_total_tokens"] = tokens * 2
            gauges["sglang:hicache_host_used_tokens"] = min(tokens * 2, st.load_back_tokens * 4)
        for pp in range(s.pp_size):
            # Only TP rank 0 of each stage reports the scheduler's numbers, as in SGLang.
            values = [self.dep.model_path, "unified", "0", str(pp), "0"]
            for name, v in {**gauges, **self.dep.memory_gauges(pp)}.items():
                g = GaugeMetricFamily(name, f"{name} (simulator)", labels=labels)
                g.add_metric(values, float(v))
                yield g
            if self.dep.has_memory_gauges:
                g = GaugeMetricFamily(
                    "sglang:graph_memory_usage_gb",
                    "Memory used by captured device graphs in GB (simulator)",
                    labels=[*labels, "phase"],
                )
                for phase, gb in self.dep.graph_phases().items():
                    g.add_metric([*values, phase], gb)
                yield g
        if s.hicache == "on":
            c = CounterMetricFamily(
                "sglang:load_back_tokens",
                "Tokens loaded back (simulator)",
                labels=[*labels, "pool"],
            )
            for pool, share in (("kv", 1.0), ("deepseek_v4_c4_indexer", 0.25)):
                c.add_metric(
                    [self.dep.model_path, "unified", "0", "0", "0", pool],
                    st.load_back_tokens * share,
                )
            yield c
            h = HistogramMetricFamily(
                "sglang:load_back_duration_seconds", "Load-back duration (simulator)", labels=labels
            )
            h.add_metric(
                [self.dep.model_path, "unified", "0", "0", "0"],
                buckets=[
                    ("0.01", 0.0),
                    ("0.1", float(st.load_backs)),
                    ("+Inf", float(st.load_backs)),
                ],
                sum_value=st.load_back_seconds,
            )
            yield h
        yield self._ttft(labels)

    def _ttft(self, labels: list[str]) -> HistogramMetricFamily:
        """sglang:time_to_first_token_seconds (TP rank 0 of the first stage, as SGLang)."""
        st = self.state
        h = HistogramMetricFamily(
            "sglang:time_to_first_token_seconds",
            "Histogram of time to first token in seconds (simulator)",
            labels=labels,
        )
        buckets = [
            (repr(float(b)), float(n)) for b, n in zip(TTFT_BUCKETS, st.ttft_buckets, strict=True)
        ]
        h.add_metric(
            [self.dep.model_path, "unified", "0", "0", "0"],
            buckets=[*buckets, ("+Inf", float(st.ttft_count))],
            sum_value=st.ttft_sum,
        )
        return h


def _pieces(text: str, n: int) -> list[str]:
    return [text[i : i + n] for i in range(0, len(text), n)]


def create_sim_app(settings: SimSettings) -> FastAPI:
    dep = SimDeployment(settings)
    state = SimState(background=settings.background_running)
    rng = random.Random(settings.seed)
    registry = CollectorRegistry(auto_describe=False)
    as_vllm = settings.engine == "vllm"
    if as_vllm:
        registry.register(VllmMetrics(dep.model_path, dep.max_total_num_tokens or 0, state))
    else:
        registry.register(_SglangMetrics(dep, state))
    probe: SimProbe | None = None
    if settings.probe_dir is not None:
        gated = settings.index_k_gated
        if gated is None:
            gated = settings.index_k_dtype == "fp8"
        c4 = sum(fp.stage.main.c4 for fp in dep.footprints)
        ranks = settings.tp_size * settings.pp_size
        memory = [deployment_memory(dep, r) for r in range(ranks)]
        probe = SimProbe(
            settings.probe_dir, ranks, c4, gated, settings.seed, memory, settings.nnodes
        )

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        stop = asyncio.Event()
        task = asyncio.create_task(probe.run(stop)) if probe else None
        try:
            yield
        finally:
            stop.set()
            if task:
                await task

    app = FastAPI(
        title="simulated SGLang (dsv4-sidecar simulator)",
        docs_url=None,
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.sim = state
    app.state.deployment = dep

    async def _faulted() -> Response | None:
        if state.delay:
            await asyncio.sleep(state.delay)
        if state.fault == "http_500":
            return JSONResponse({"error": "simulated internal error"}, status_code=500)
        if state.fault == "garbage":
            return PlainTextResponse("<html>502 Bad Gateway (simulated garbage)</html>")
        return None

    async def server_info() -> Response:
        faulted = await _faulted()
        if faulted is not None:
            return faulted
        if state.fault == "bad_shape":
            return JSONResponse({"simulator": True, "version": dep.version})
        return JSONResponse(dep.server_info(state.reported_running))

    if not as_vllm:  # vLLM has no /server_info (outside its dev mode)
        app.add_api_route("/server_info", server_info, methods=["GET"])
        app.add_api_route("/get_server_info", server_info, methods=["GET"])

    async def version() -> Response:
        faulted = await _faulted()
        if faulted is None and state.fault == "bad_shape":
            return JSONResponse({"simulator": True})
        return faulted or JSONResponse({"version": settings.vllm_version})

    if as_vllm:
        app.add_api_route("/version", version, methods=["GET"])

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200)

    @app.get("/health_generate")
    async def health_generate() -> Response:
        return Response(status_code=200)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [
                {
                    "id": dep.model_path,
                    "object": "model",
                    "created": int(time.time()),
                    "owned_by": "vllm (simulator)" if as_vllm else "sglang (simulator)",
                    "root": dep.model_path,
                    "max_model_len": dep.max_total_num_tokens,
                }
            ],
        }

    @app.get("/metrics")
    async def metrics() -> Response:
        faulted = await _faulted()
        if faulted is not None:
            return faulted
        if state.fault == "metrics_garbage":
            prefix = "vllm:num_requests_running" if as_vllm else "sglang:num_running_reqs"
            return PlainTextResponse(prefix + "{ this is not exposition\n")
        return Response(generate_latest(registry), media_type="text/plain; version=0.0.4")

    def _answer(body: dict[str, Any]) -> tuple[Completion, int]:
        concurrency = state.reported_running
        tools = body.get("tools") if isinstance(body.get("tools"), list) else None
        hicache = settings.hicache == "on"
        p = 0.0
        if tools and settings.corruption == "model":
            p = corruption_probability(settings.index_k_dtype, hicache, concurrency)
        raw_messages = body.get("messages")
        messages: list[dict[str, Any]] = raw_messages if isinstance(raw_messages, list) else []
        thinking = bool((body.get("chat_template_kwargs") or {}).get("thinking", True))
        max_tokens = body.get("max_tokens")
        c = complete(
            rng,
            messages,
            tools,
            p,
            thinking=thinking,
            max_tokens=max_tokens if isinstance(max_tokens, int) and max_tokens > 0 else 1024,
            chars_per_token=settings.chars_per_token,
        )
        state.requests_total += 1
        state.prompt_tokens += 64
        state.generation_tokens += max(1, len(c.raw) // settings.chars_per_token)
        if concurrency > PREEMPT_ABOVE:
            state.preemptions += 1
        state.observe_ttft(settings.ttft_ms / 1000)
        if hicache and probe is not None:
            probe.request(concurrency)
        if hicache:
            state.load_back_tokens += 2048
            state.load_backs += 1
            state.load_back_seconds += 0.004
        if tools:
            t = state.truth.setdefault(bucket_label(concurrency), [0, 0])
            t[0] += 1
            if c.degenerate:
                t[1] += 1
                state.phenotypes[c.phenotype or "?"] = (
                    state.phenotypes.get(c.phenotype or "?", 0) + 1
                )
        return c, concurrency

    def _message(c: Completion, body: dict[str, Any]) -> dict[str, Any]:
        if as_vllm:
            tools = body.get("tools") if isinstance(body.get("tools"), list) else None
            thinking = bool((body.get("chat_template_kwargs") or {}).get("thinking", True))
            delivered, called = vllm_message(
                c.raw, thinking, tools, f"call_sim{state.requests_total}", settings.vllm_version
            )
            c.content = delivered.get("content") or ""
            c.reasoning = delivered.get("reasoning") or ""
            c.tool_calls = delivered.get("tool_calls", [])
            if called and c.finish_reason == "stop":  # a damaged block vLLM still parses
                c.finish_reason = "tool_calls"
            elif c.finish_reason == "tool_calls" and not called:
                c.finish_reason = "stop"
            return delivered
        msg: dict[str, Any] = {"role": "assistant", "content": c.content or None}
        if c.reasoning:
            msg["reasoning_content"] = c.reasoning
        if c.tool_calls:
            msg["tool_calls"] = c.tool_calls
        return msg

    async def _stream(c: Completion, rid: str, created: int) -> AsyncIterator[bytes]:
        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            obj = {
                "id": rid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": dep.model_path,
                "system_fingerprint": "dsv4-sidecar-simulator",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
            return b"data: " + json.dumps(obj, ensure_ascii=False).encode() + b"\n\n"

        n, itl = settings.chars_per_token, settings.itl_ms / 1000
        reasoning_key = "reasoning" if as_vllm else "reasoning_content"
        try:
            await asyncio.sleep(settings.ttft_ms / 1000)
            yield chunk({"role": "assistant", "content": ""})
            for piece in _pieces(c.reasoning, n):
                await asyncio.sleep(itl)
                yield chunk({reasoning_key: piece})
            for piece in _pieces(c.content, n):
                await asyncio.sleep(itl)
                yield chunk({"content": piece})
            for i, call in enumerate(c.tool_calls):
                await asyncio.sleep(itl)
                yield chunk(
                    {
                        "tool_calls": [
                            {
                                "index": i,
                                "id": call["id"],
                                "type": "function",
                                "function": {"name": call["function"]["name"], "arguments": ""},
                            }
                        ]
                    }
                )
                for piece in _pieces(call["function"]["arguments"], n):
                    await asyncio.sleep(itl)
                    yield chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
            yield chunk({}, c.finish_reason)
            yield b"data: [DONE]\n\n"
        finally:
            state.running -= 1

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        try:
            body = json.loads(await request.body())
            if not isinstance(body, dict):
                raise ValueError
        except ValueError:
            return JSONResponse(
                {
                    "object": "error",
                    "message": "request body is not a JSON object",
                    "type": "BadRequestError",
                    "code": 400,
                },
                status_code=400,
            )
        state.running += 1
        c, _concurrency = _answer(body)
        rid = f"chatcmpl-sim{state.requests_total:08d}"
        created = int(time.time())
        msg = _message(c, body)
        if body.get("stream"):
            return StreamingResponse(_stream(c, rid, created), media_type="text/event-stream")
        try:
            # The raw output already holds the reasoning, the content and the DSML block.
            tokens = max(1, len(c.raw) // settings.chars_per_token)
            await asyncio.sleep((settings.ttft_ms + settings.itl_ms * tokens / 4) / 1000)
        finally:
            state.running -= 1
        return JSONResponse(
            {
                "id": rid,
                "object": "chat.completion",
                "created": created,
                "model": dep.model_path,
                "system_fingerprint": "dsv4-sidecar-simulator",
                "choices": [{"index": 0, "message": msg, "finish_reason": c.finish_reason}],
                "usage": {
                    "prompt_tokens": 64,
                    "completion_tokens": tokens,
                    "total_tokens": 64 + tokens,
                },
            }
        )

    async def generate(request: Request) -> Response:
        """SGLang's native API: raw text (here the model's raw DSML, parser not applied)."""
        try:
            body = json.loads(await request.body())
            if not isinstance(body, dict):
                raise ValueError
        except ValueError:
            return JSONResponse(
                {"error": {"message": "request body is not a JSON object"}}, status_code=400
            )
        state.running += 1
        try:
            sampling = body.get("sampling_params") or {}
            c, _ = _answer(
                {
                    "tools": body.get("tools") or sampling.get("tools"),
                    "messages": [{"role": "user", "content": body.get("text", "")}],
                }
            )
            await asyncio.sleep(settings.ttft_ms / 1000)
        finally:
            state.running -= 1
        return JSONResponse(
            {
                "text": c.raw,
                "meta_info": {
                    "id": f"sim{state.requests_total:08d}",
                    "finish_reason": {"type": c.finish_reason},
                    "prompt_tokens": 64,
                    "completion_tokens": len(c.raw) // settings.chars_per_token,
                },
            }
        )

    if not as_vllm:  # SGLang's native API
        app.add_api_route("/generate", generate, methods=["POST"])

    @app.get("/_sim/stats")
    async def stats() -> dict[str, Any]:
        """Simulator-only ground truth: tool-call requests and degenerate answers per bucket."""
        return {
            "requests_total": state.requests_total,
            "running": state.running,
            "truth": {k: {"requests": v[0], "degenerate": v[1]} for k, v in state.truth.items()},
            "phenotypes": dict(state.phenotypes),
            "corruption": settings.corruption,
            "index_k_dtype": settings.index_k_dtype,
            "hicache": settings.hicache,
        }

    @app.get("/_sim/gpus")
    async def gpus(node_rank: int = 0) -> Response:
        """Simulator-only ground truth: the GPUs of one node (the ``fake`` GPU backend's
        NVML). Faults and delays of the SGLang endpoints do not apply: the GPUs stay up
        when the server misbehaves, as on a real node."""
        try:
            return JSONResponse(dep.node_gpus(node_rank, state.reported_running))
        except ValueError as exc:
            return JSONResponse({"error": str(exc)}, status_code=404)

    @app.post("/_sim/control")
    async def control(request: Request) -> dict[str, Any]:
        """Simulator-only: set fault, delay (s), background running requests, queued."""
        try:
            body = json.loads(await request.body() or b"{}")
        except ValueError:
            return JSONResponse({"error": "body must be JSON"}, status_code=400)  # type: ignore[return-value]
        fault = body.get("fault", state.fault)
        if fault not in FAULTS:
            return JSONResponse({"error": f"fault must be one of {FAULTS}"}, status_code=400)  # type: ignore[return-value]
        state.fault = fault
        state.delay = float(body.get("delay", state.delay))
        state.background = int(body.get("background_running", state.background))
        state.queued = int(body.get("queued", state.queued))
        return {
            "fault": state.fault,
            "delay": state.delay,
            "background_running": state.background,
            "queued": state.queued,
        }

    return app
