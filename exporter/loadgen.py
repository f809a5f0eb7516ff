"""Concurrent multi-turn tool-calling sessions against an OpenAI-compatible endpoint.

Used by `demo` (load through the tap, ramping concurrency) and `repro` (graded A/B runs).
Each session keeps ``concurrency`` requests in flight in total: it asks a tool task, and when
the answer is a tool call it sends a fabricated tool result and asks for the final answer, as
agents do, so conversations grow over a few turns. Request loops are bounded by count and
time, every request has a timeout, and the only target is the URL given.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from exporter import causes, outbound
from exporter.samplers.prompts import load_prompts
from exporter.sources import bounded

MAX_TURNS = 3


@dataclass
class Exchange:
    """One request/response, handed to the caller's hook."""

    concurrency: int
    request: dict[str, Any]
    status: int
    response: Any  # parsed JSON object, or list of SSE chunk objects when streaming
    latency: float
    # why there is no response: an outbound cause ("connection refused"), "HTTP 503" or
    # "non-JSON body"; bounded words, never a URL or a body (`repro` counts them)
    error: str | None = None


@dataclass
class LevelStats:
    concurrency: int
    sent: int = 0
    ok: int = 0
    errors: int = 0
    latencies: list[float] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)
    ended: float | None = None


Hook = Callable[[Exchange], Awaitable[None] | None]


def _parse_sse(raw: bytes) -> list[dict[str, Any]]:
    chunks = []
    for event in raw.split(b"\n\n"):
        for line in event.split(b"\n"):
            if line.startswith(b"data:"):
                data = line[5:].strip()
                if data and data != b"[DONE]":
                    try:
                        chunks.append(bounded.loads_bounded(data, len(data)))
                    except ValueError:
                        chunks.append({"_unparseable": data.decode("utf-8", "replace")})
    return chunks


class LoadGenerator:
    def __init__(
        self,
        base_url: str,
        model: str = "default",
        stream: bool = False,
        timeout: float = 120.0,
        prompts: list[dict[str, Any]] | None = None,
        headers: dict[str, str] | None = None,
        max_tokens: int = 1024,
    ) -> None:
        self.url = base_url.rstrip("/") + "/v1/chat/completions"
        self.model = model
        self.stream = stream
        self.timeout = timeout
        self.prompts = prompts or load_prompts()
        self.headers = headers or {}
        self.max_tokens = max_tokens
        self.inflight = 0
        self._n = 0

    async def run_level(
        self,
        concurrency: int,
        requests: int | None = None,
        duration: float | None = None,
        hook: Hook | None = None,
        stop: asyncio.Event | None = None,
    ) -> LevelStats:
        """Keep ``concurrency`` sessions busy until ``requests`` were sent or ``duration``
        passed (at least one bound is required)."""
        if requests is None and duration is None:
            raise ValueError("bound the level by requests or duration")
        stats = LevelStats(concurrency)
        deadline = time.monotonic() + duration if duration is not None else float("inf")
        stop = stop or asyncio.Event()
        budget = [requests if requests is not None else 1 << 62]
        async with outbound.Outbound(
            timeout=self.timeout, limit=bounded.ANSWER_MAX_BYTES, connections=concurrency + 8
        ) as session:

            async def session_loop(idx: int) -> None:
                while not stop.is_set() and time.monotonic() < deadline and budget[0] > 0:
                    await self._conversation(session, idx, stats, budget, deadline, hook, stop)

            await asyncio.gather(*(session_loop(i) for i in range(concurrency)))
        stats.ended = time.monotonic()
        return stats

    async def _conversation(self, session, idx, stats, budget, deadline, hook, stop) -> None:
        self._n += 1
        prompt = self.prompts[(self._n + idx) % len(self.prompts)]
        messages = list(prompt["messages"])
        for _turn in range(MAX_TURNS):
            if stop.is_set() or time.monotonic() >= deadline or budget[0] <= 0:
                return
            budget[0] -= 1
            exchange = await self._send(session, messages, prompt.get("tools"), stats)
            if hook is not None:
                maybe = hook(exchange)
                if asyncio.iscoroutine(maybe):
                    await maybe
            calls = _tool_calls(exchange.response)
            if exchange.error or not calls:
                return
            results = [
                {
                    "role": "tool",
                    "tool_call_id": c.get("id", "call"),
                    "content": json.dumps({"ok": True, "result": "42 items"}),
                }
                for c in calls
            ]
            messages = [
                *messages,
                {"role": "assistant", "content": None, "tool_calls": calls},
                *results,
            ]

    async def _send(self, session, messages, tools, stats: LevelStats) -> Exchange:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": 0,
            "max_tokens": self.max_tokens,
            "stream": self.stream,
        }
        if tools:
            body["tools"] = tools
        self.inflight += 1
        concurrency = self.inflight
        stats.sent += 1
        t0 = time.perf_counter()
        try:
            reply = await session.post_json(self.url, body, headers=self.headers)
            status, raw = reply.status, reply.body
        except outbound.OutboundError as exc:
            stats.errors += 1
            return Exchange(concurrency, body, 0, None, time.perf_counter() - t0, exc.cause)
        finally:
            self.inflight -= 1
        latency = time.perf_counter() - t0
        if status != 200:
            stats.errors += 1
            return Exchange(concurrency, body, status, None, latency, causes.http_status(status))
        try:
            response: Any = _parse_sse(raw) if self.stream else bounded.loads_bounded(raw, len(raw))
        except ValueError:  # not JSON, or bounded.BodyRejected (nested too deep)
            stats.errors += 1
            return Exchange(concurrency, body, status, None, latency, causes.NON_JSON)
        stats.ok += 1
        stats.latencies.append(latency)
        return Exchange(concurrency, body, status, response, latency)


def _tool_calls(response: Any) -> list[dict[str, Any]]:
    """Tool calls of a completion object or reassembled from SSE chunks."""
    if isinstance(response, dict):
        try:
            return list(response["choices"][0]["message"].get("tool_calls") or [])
        except (KeyError, IndexError, TypeError, AttributeError):
            return []
    if isinstance(response, list):
        calls: dict[int, dict[str, Any]] = {}
        for chunk in response:
            try:
                deltas = chunk["choices"][0]["delta"].get("tool_calls") or []
            except (KeyError, IndexError, TypeError, AttributeError):
                continue
            for d in deltas:
                c = calls.setdefault(
                    d.get("index", 0),
                    {
                        "id": d.get("id"),
                        "type": "function",
                        "function": {"name": "", "arguments": ""},
                    },
                )
                fn = d.get("function") or {}
                c["function"]["name"] += fn.get("name") or ""
                c["function"]["arguments"] += fn.get("arguments") or ""
                c["id"] = c["id"] or d.get("id")
        return [calls[i] for i in sorted(calls)]
    return []
