"""What the project sends out is bounded (issue 24): triage never follows a redirect (urllib
kept the samples bearer token on the way to whatever host it named), and loadgen / repro read
at most a capped body from an endless answer (3 GB in 7 s before; discover_model 1.5 GB)."""

from __future__ import annotations

import asyncio
import resource
from collections.abc import AsyncIterator, Iterator

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

from exporter.loadgen import LoadGenerator
from exporter.oncall.repro import discover_model
from exporter.oncall.triage import http as triage_http
from exporter.sources import bounded
from tests.support import ServerThread


@pytest.fixture(scope="module")
def elsewhere() -> Iterator[tuple[ServerThread, list[str | None]]]:
    """The host a redirect points to: records the Authorization header of every request."""
    seen: list[str | None] = []

    async def record(request: Request) -> Response:
        seen.append(request.headers.get("authorization"))
        return JSONResponse({"samples": []})

    with ServerThread(Starlette(routes=[Route("/{p:path}", record)])) as srv:
        yield srv, seen


@pytest.fixture(scope="module")
def hostile(elsewhere: tuple[ServerThread, list[str | None]]) -> Iterator[ServerThread]:
    target = elsewhere[0].url

    async def redirect(request: Request) -> Response:
        return RedirectResponse(target + "/api/v1/samples", status_code=302)

    async def endless(request: Request) -> AsyncIterator[bytes]:
        chunk = b"x" * (1 << 20)
        while not await request.is_disconnected():  # endless for the client, not the server
            yield chunk

    async def forever(request: Request) -> Response:
        return StreamingResponse(endless(request), media_type="application/json")

    app = Starlette(
        routes=[
            Route("/api/v1/samples", redirect),
            Route("/v1/models", forever),
            Route("/v1/chat/completions", forever, methods=["POST"]),
        ]
    )
    with ServerThread(app) as srv:
        yield srv


def test_triage_never_follows_a_redirect_with_the_token(
    hostile: ServerThread, elsewhere: tuple[ServerThread, list[str | None]]
) -> None:
    status, _ = triage_http.get(hostile.url + "/api/v1/samples", token="s3cret")
    assert status == 302
    assert elsewhere[1] == []  # the other host was never contacted


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def test_loadgen_stops_reading_an_endless_answer_at_the_cap(hostile: ServerThread) -> None:
    before = _peak_rss_mib()
    gen = LoadGenerator(hostile.url, timeout=60)
    errors: list[str | None] = []
    stats = asyncio.run(gen.run_level(2, requests=4, hook=lambda ex: errors.append(ex.error)))
    assert stats.sent == 4 and stats.errors == 4
    assert errors == ["body too large"] * 4  # refused at the cap (the cause repro counts)
    # each answer stops at ANSWER_MAX_BYTES + one chunk: far from the GB it used to read
    assert _peak_rss_mib() - before < 4 * bounded.ANSWER_MAX_BYTES / (1 << 20) + 64


def test_discover_model_gives_up_on_an_endless_model_list(hostile: ServerThread) -> None:
    assert asyncio.run(discover_model(hostile.url, timeout=30)) is None
