"""End to end through the tap: byte-exact responses at concurrency, the OpenAI client's view,
and which responses get sampled."""

from __future__ import annotations

import asyncio
import hashlib
import math
from typing import Any

import pytest
from openai import AsyncOpenAI

from exporter.samplers.tap import CapturedExchange, Sampler
from tests.tap.fake_upstream import expected_body
from tests.tap.support import (
    FAST,
    RawConnection,
    RawResponse,
    chat_body,
    counter,
    one_request,
    run,
    settle,
    tap_env,
)

pytestmark = pytest.mark.e2e

N_REQUESTS = 320
CONCURRENCY = 64
RATE = 0.25


def _workload() -> list[tuple[str, bytes]]:
    """Streaming and non-streaming chat completions and /generate calls, all distinct."""
    out = []
    for i in range(N_REQUESTS):
        path = "/generate" if i % 4 == 3 else "/v1/chat/completions"
        out.append((path, chat_body(i, stream=i % 2 == 0, path=path, **FAST)))
    return out


async def _drive(port: int, work: list[tuple[str, bytes]]) -> list[RawResponse]:
    """CONCURRENCY keep-alive connections, each sending its share of requests in turn."""
    results: list[RawResponse | None] = [None] * len(work)

    async def worker(k: int) -> None:
        conn = await RawConnection.open(port)
        try:
            for i in range(k, len(work), CONCURRENCY):
                path, body = work[i]
                headers = [("Content-Type", "application/json"), ("Authorization", "Bearer t")]
                results[i] = await conn.request("POST", path, body, headers)
        finally:
            await conn.close()

    await asyncio.gather(*(worker(k) for k in range(CONCURRENCY)))
    return [r for r in results if r is not None]


@pytest.mark.parametrize("use_uvloop", [False, True], ids=["asyncio", "uvloop"])
def test_byte_identical_to_direct_at_64_concurrency_and_sampled_by_hash(use_uvloop: bool) -> None:
    work = _workload()

    async def scenario() -> None:
        async with tap_env(sample_rate=RATE, queue_size=N_REQUESTS) as (fake, tap, samples):
            direct = await _drive(int(fake.url.rsplit(":", 1)[1]), work)
            tapped = await _drive(tap.port or 0, work)
            assert len(direct) == len(tapped) == N_REQUESTS
            for (path, body), d, t in zip(work, direct, tapped, strict=True):
                want = hashlib.sha256(expected_body(path, body)).hexdigest()
                assert hashlib.sha256(d.body).hexdigest() == want
                assert hashlib.sha256(t.body).hexdigest() == want
                assert t.complete and t.status == d.status == 200
                assert t.end_to_end() == d.end_to_end()  # incl. Content-Length when present
                streaming = b'stream": true' in body
                assert (t.header("Transfer-Encoding") == b"chunked") == streaming
            # connections were reused: far fewer upstream connections than requests
            assert counter(tap, "dsv4_tap_upstream_connections_total") <= CONCURRENCY + 8
            assert counter(tap, "dsv4_tap_requests_total", code="2xx") == N_REQUESTS

            # exactly the requests the hash selects were sampled, each with its exact response
            sampler = Sampler(RATE, 0, ("/v1/chat/completions", "/generate"))
            chosen = {body for path, body in work if sampler.decide(path.encode(), body)}
            assert await settle(lambda: len(samples) == len(chosen))
            assert {s.request_body for s in samples} == chosen
            sd = math.sqrt(N_REQUESTS * RATE * (1 - RATE))
            assert abs(len(chosen) - N_REQUESTS * RATE) < 4 * sd
            assert counter(tap, "dsv4_tap_sampled_total") == len(chosen)
            for s in samples:
                assert s.response_body == expected_body(s.path, s.request_body)
                assert s.status == 200 and s.complete and s.method == "POST"
                assert s.streaming == (b'stream": true' in s.request_body)
                assert s.content_type == (
                    "text/event-stream" if s.streaming else "application/json"
                )
                assert 1 <= s.concurrency <= CONCURRENCY
                assert s.request_id and len(s.request_id) >= 24
                assert s.duration_seconds > 0
            assert max(s.concurrency for s in samples) > 1

    run(scenario(), timeout=60, uvloop=use_uvloop)


def test_same_decisions_on_two_taps_with_the_same_seed() -> None:
    bodies = [chat_body(i, stream=False, first_ms=0) for i in range(60)]

    async def sampled_with(seed: int) -> set[bytes]:
        async with tap_env(sample_rate=0.5, sample_seed=seed) as (_, tap, samples):
            conn = await RawConnection.open(tap.port or 0)
            for body in bodies:
                await conn.request("POST", "/v1/chat/completions", body)
            await conn.close()
            await settle(lambda: counter(tap, "dsv4_tap_sampled_total") == len(samples))
            return {s.request_body for s in samples}

    async def scenario() -> None:
        a, b, c = await sampled_with(11), await sampled_with(11), await sampled_with(12)
        assert a == b and 0 < len(a) < len(bodies)
        assert a != c

    run(scenario())


def _dump(obj: Any) -> Any:
    return obj.model_dump(exclude_none=False)


def test_openai_client_parses_the_same_objects_through_the_tap() -> None:
    async def scenario() -> None:
        async with tap_env(sample_rate=1.0, queue_size=512) as (fake, tap, samples):
            direct = AsyncOpenAI(base_url=fake.url + "/v1", api_key="sk-direct", max_retries=0)
            tapped = AsyncOpenAI(
                base_url=f"http://127.0.0.1:{tap.port}/v1", api_key="sk-tap", max_retries=0
            )

            async def one(client: AsyncOpenAI, i: int) -> Any:
                kwargs: dict[str, Any] = {
                    "model": "deepseek-v4",
                    "messages": [{"role": "user", "content": f"openai question {i}"}],
                    "extra_body": {"fake": FAST},
                }
                if i % 2:
                    return _dump(await client.chat.completions.create(**kwargs))
                stream = await client.chat.completions.create(stream=True, **kwargs)
                return [_dump(chunk) async for chunk in stream]

            n = 96
            via_direct = await asyncio.gather(*(one(direct, i) for i in range(n)))
            via_tap = await asyncio.gather(*(one(tapped, i) for i in range(n)))
            assert via_tap == via_direct
            streamed = via_tap[0]
            assert len(streamed) == FAST["chunks"]
            assert streamed[-1]["choices"][0]["finish_reason"] == "stop"
            assert via_tap[1]["choices"][0]["message"]["content"]
            assert await settle(lambda: len(samples) == n)
            assert {s.streaming for s in samples} == {True, False}
            await direct.close()
            await tapped.close()

    run(scenario(), timeout=60)


def test_sample_fields_for_generate_and_request_id_header() -> None:
    async def scenario() -> None:
        async with tap_env(sample_rate=1.0) as (_, tap, samples):
            conn = await RawConnection.open(tap.port or 0)
            body = chat_body(1, stream=False, path="/generate", first_ms=0)
            await conn.request("POST", "/generate", body, [("X-Request-Id", "req-42")])
            body2 = chat_body(2, stream=True, path="/generate", **FAST)
            await conn.request("POST", "/generate", body2)
            await conn.request("GET", "/v1/models")  # not a candidate: never sampled
            await conn.close()
            assert await settle(lambda: len(samples) == 2)
            first, second = sorted(samples, key=lambda s: s.streaming)
            assert first.request_id == "req-42" and first.path == "/generate"
            first_id = second.response_body.split(b'"id":"')[1].split(b'"')[0].decode()
            assert second.streaming and second.request_id == first_id

    run(scenario())


def test_samples_can_be_read_from_the_queue_without_a_callback() -> None:
    async def scenario() -> None:
        from exporter.samplers.tap import Tap, TapConfig
        from tests.tap.fake_upstream import FakeUpstream

        fake = FakeUpstream()
        await fake.start()
        tap = Tap(TapConfig(upstream=fake.url, sample_rate=1.0))
        port = await tap.start()
        conn = await RawConnection.open(port)
        body = chat_body(5, stream=True, **FAST)
        resp = await conn.request("POST", "/v1/chat/completions", body)
        sample: CapturedExchange = await asyncio.wait_for(tap.samples.get(), 2)
        assert sample.response_body == resp.body == expected_body("/v1/chat/completions", body)
        await conn.close()
        await tap.stop()
        await fake.stop()

    run(scenario())


def test_embeds_in_the_sidecar_app_lifespan_on_uvicorns_loop() -> None:
    """How the app wires it: start/stop in the FastAPI lifespan, metrics from tap.collect()."""
    import contextlib

    import uvicorn
    from fastapi import FastAPI
    from prometheus_client import CollectorRegistry, generate_latest

    from exporter.samplers.tap import Tap, TapConfig
    from tests.tap.fake_upstream import FakeUpstream

    async def scenario() -> None:
        fake = FakeUpstream()
        await fake.start()
        got: list[CapturedExchange] = []
        tap = Tap(TapConfig(upstream=fake.url, sample_rate=1.0), on_sample=got.append)
        registry = CollectorRegistry()
        registry.register(tap)

        @contextlib.asynccontextmanager
        async def lifespan(app: FastAPI) -> Any:
            await tap.start("127.0.0.1", 0)
            yield
            await tap.stop(grace=1.0)

        app = FastAPI(lifespan=lifespan)
        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning")
        server = uvicorn.Server(config)
        serving = asyncio.create_task(server.serve())
        assert await settle(lambda: server.started)
        body = chat_body(3, stream=True, **FAST)
        conn = await RawConnection.open(tap.port or 0)
        resp = await conn.request("POST", "/v1/chat/completions", body)
        await conn.close()
        assert resp.body == expected_body("/v1/chat/completions", body)
        assert await settle(lambda: len(got) == 1)  # a plain callback: ran on the worker thread
        text = generate_latest(registry).decode()
        assert 'dsv4_tap_requests_total{code="2xx"} 1.0' in text
        server.should_exit = True
        await serving
        assert tap.port is None
        await fake.stop()

    run(scenario(), uvloop=True)


def test_standalone_runner_serves_metrics_and_exits_on_sigterm() -> None:
    """``python -m exporter.samplers.tap`` (what the benchmark runs) proxies and reports."""
    import signal
    import socket
    import subprocess
    import sys
    import urllib.request

    from tests.tap.fake_upstream import FakeUpstream

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        metrics_port = s.getsockname()[1]

    async def scenario() -> None:
        fake = FakeUpstream()
        await fake.start()
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            *("-m", "exporter.samplers.tap", "--upstream", fake.url, "--print-port"),
            *("--sample-rate", "1", "--metrics-port", str(metrics_port)),
            stdout=subprocess.PIPE,
        )
        try:
            assert proc.stdout is not None
            port = int(await asyncio.wait_for(proc.stdout.readline(), 20))
            body = chat_body(9, stream=True, **FAST)
            resp = await one_request(port, "POST", "/v1/chat/completions", body)
            assert resp.body == expected_body("/v1/chat/completions", body)
            url = f"http://127.0.0.1:{metrics_port}/metrics"
            text = await asyncio.to_thread(lambda: urllib.request.urlopen(url).read().decode())
            assert 'dsv4_tap_requests_total{code="2xx"} 1.0' in text
            assert "dsv4_tap_sampled_total 1.0" in text
        finally:
            proc.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(proc.wait(), 10) == 0
            await fake.stop()

    run(scenario())
