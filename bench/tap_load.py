"""Closed-loop streaming load for the tap benchmark: N keep-alive connections, each sending one
streaming chat completion after another, timing every SSE event as it arrives.

Raw asyncio + llhttp, so the client costs a few µs per event and does not blur the proxies'
differences. Each worker starts at a random offset within one request's duration, so event
times are spread as with independent users rather than arriving in lock-step bursts.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import random
import time
from dataclasses import dataclass, field

from httptools import HttpResponseParser

from tests.tap.fake_upstream import expected_body

PATH = "/v1/chat/completions"
BODIES = 256
_perf = time.perf_counter


def request_bodies(n: int = BODIES) -> list[tuple[bytes, bytes]]:
    """(request bytes, expected response SHA-256) for n distinct streaming requests."""
    out = []
    for i in range(n):
        body = json.dumps(
            {
                "model": "deepseek-v4",
                "messages": [{"role": "user", "content": f"question {i}: how do taps work?"}],
                "stream": True,
                "max_tokens": 32,
            }
        ).encode()
        head = (
            f"POST {PATH} HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
            f"Authorization: Bearer bench-secret\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode()
        out.append((head + body, hashlib.sha256(expected_body(PATH, body)).digest()))
    return out


@dataclass
class PhaseResult:
    ttfb: list[float] = field(default_factory=list)
    gaps: list[float] = field(default_factory=list)
    events: int = 0
    requests: int = 0
    mismatches: int = 0
    errors: int = 0
    window: float = 0.0


class _Worker(asyncio.Protocol):
    def __init__(self, phase: _Phase, index: int) -> None:
        self.phase = phase
        self.index = index
        self.iteration = 0
        self.transport: asyncio.Transport | None = None
        self.parser = HttpResponseParser(self)
        self.sha = hashlib.sha256()
        self.t_send = 0.0
        self.last = 0.0
        self.first = True
        self.expected = b""
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop transports are not asyncio.Transport subclasses: no isinstance check
        self.transport = transport  # type: ignore[assignment]

    def send(self) -> None:
        raw, self.expected = self.phase.bodies[(self.index * 7 + self.iteration) % BODIES]
        self.iteration += 1
        self.sha = hashlib.sha256()
        self.first = True
        self.t_send = _perf()
        self.transport.write(raw)  # type: ignore[union-attr]

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except Exception:
            self.phase.result.errors += 1
            self.transport.close()  # type: ignore[union-attr]

    def on_body(self, piece: bytes) -> None:
        now = _perf()
        phase = self.phase
        self.sha.update(piece)
        n = piece.count(b"\n\n")
        in_window = phase.t_begin <= now < phase.t_end
        if self.first:
            self.first = False
            # A connection's first request also pays the proxy's upstream connect (nginx keeps
            # its pool for 60 s between phases, the tap for 4 s): steady state only.
            if self.iteration > 1 and phase.t_begin <= self.t_send < phase.t_end:
                phase.result.ttfb.append(now - self.t_send)
        elif in_window:
            phase.result.gaps.append(now - self.last)
            if n > 1:
                phase.result.gaps.extend([0.0] * (n - 1))
        if in_window:
            phase.result.events += n
        self.last = now

    def on_message_complete(self) -> None:
        phase = self.phase
        phase.result.requests += 1
        if self.sha.digest() != self.expected:
            phase.result.mismatches += 1
        if _perf() < phase.t_end:
            self.send()
        elif not self.done.done():
            self.done.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.phase.result.errors += 1
            self.done.set_result(None)


class _Phase:
    def __init__(self, bodies: list[tuple[bytes, bytes]], t_begin: float, t_end: float) -> None:
        self.bodies = bodies
        self.t_begin = t_begin
        self.t_end = t_end
        self.result = PhaseResult(window=t_end - t_begin)


async def run_phase(
    port: int,
    concurrency: int,
    bodies: list[tuple[bytes, bytes]],
    *,
    warmup: float,
    window: float,
    request_seconds: float = 0.33,
    seed: int = 0,
) -> PhaseResult:
    """Drive ``concurrency`` streams against 127.0.0.1:port; measure during ``window``."""
    loop = asyncio.get_running_loop()
    now = _perf()
    phase = _Phase(bodies, now + warmup, now + warmup + window)
    workers: list[_Worker] = []
    for i in range(concurrency):
        _, worker = await loop.create_connection(
            functools.partial(_Worker, phase, i), "127.0.0.1", port
        )
        workers.append(worker)
    rng = random.Random(seed)
    for worker in workers:
        loop.call_later(rng.uniform(0, request_seconds), worker.send)
    try:
        await asyncio.wait_for(
            asyncio.gather(*(w.done for w in workers)), warmup + window + request_seconds + 5
        )
    except asyncio.TimeoutError:
        phase.result.errors += sum(1 for w in workers if not w.done.done())
    for worker in workers:
        if worker.transport is not None:
            worker.transport.close()
    return phase.result
