"""The long-generation canary profile (issue 26): long answers then a tool call, at its own small
concurrency, its output tokens per hour bounded by canary_long_tokens_per_hour."""

from __future__ import annotations

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from exporter.samplers.canary import long_interval
from exporter.samplers.prompts import load_prompts
from tests.sampling.test_sampling_e2e import _app
from tests.support import ServerThread, wait_for

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize(
    ("interval", "concurrency", "max_tokens", "budget"),
    [(600, 1, 4096, 50_000), (10, 4, 4096, 50_000), (60, 2, 16384, 1_000_000), (1, 8, 32768, 1000)],
)
def test_the_interval_keeps_tokens_per_hour_within_the_budget(
    interval: float, concurrency: int, max_tokens: int, budget: int
) -> None:
    every = long_interval(interval, concurrency, max_tokens, budget)
    assert every >= interval
    assert 3600 / every * concurrency * max_tokens <= budget * (1 + 1e-9)


def test_long_prompts_ask_for_length_then_a_call() -> None:
    prompts = load_prompts(None, "canary_long_prompts.json")
    assert len(prompts) >= 3
    for p in prompts:
        assert p["tools"], p["name"]
        asks = p["messages"][-1]["content"]
        assert any(w in asks for w in ("words", "字")), p["name"]


def test_long_profile_sends_long_prompts_with_its_max_tokens() -> None:
    seen: list[tuple[str, dict]] = []
    upstream = FastAPI()

    @upstream.post("/v1/chat/completions")
    async def chat(request: Request) -> JSONResponse:
        seen.append((request.headers.get("x-request-id", ""), await request.json()))
        return JSONResponse({"error": "busy"}, status_code=503)

    over = {
        "canary_interval": 3600,  # the short canary sends its first request only
        "canary_long": True,
        "canary_long_interval": 0.05,
        "canary_long_max_tokens": 2048,
        "canary_long_tokens_per_hour": 10**9,
    }
    with ServerThread(upstream) as up, ServerThread(_app(up.url, **over)):
        wait_for(lambda: sum(rid.startswith("dsv4-canary-long-") for rid, _ in seen) >= 3)
    long = [body for rid, body in seen if rid.startswith("dsv4-canary-long-")]
    assert {b["max_tokens"] for b in long} == {2048}
    names = {t["function"]["name"] for b in long for t in b["tools"]}
    assert names & {"save_report", "create_ticket"}
    assert all(b["user"] == "dsv4-sidecar-canary" for b in long)
