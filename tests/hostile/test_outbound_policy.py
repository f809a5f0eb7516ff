"""The one outbound HTTP client's policy (exporter.outbound), held on real servers: redirects
are answers unless a caller allows hops, a hop to another origin never carries credentials,
bodies stop at their cap, and an error body is only ever a short excerpt. The same rules hold
for the async client (sources, canary, repro, loadgen) and the synchronous one (triage)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from exporter import outbound
from exporter.sources import bounded
from tests.support import ServerThread

Seen = list[tuple[str, str | None]]


def _recorder(seen: Seen) -> Starlette:
    async def record(request: Request) -> Response:
        seen.append((request.url.path, request.headers.get("authorization")))
        return JSONResponse({"ok": True})

    return Starlette(routes=[Route("/{p:path}", record, methods=["GET", "POST"])])


@pytest.fixture(scope="module")
def other() -> Iterator[tuple[ServerThread, Seen]]:
    """Another origin (same host, other port): what a redirect may point at."""
    seen: Seen = []
    with ServerThread(_recorder(seen)) as srv:
        yield srv, seen


@pytest.fixture(scope="module")
def origin_server(other: tuple[ServerThread, Seen]) -> Iterator[tuple[ServerThread, Seen]]:
    seen: Seen = []
    target = other[0].url

    async def away(request: Request) -> Response:
        return RedirectResponse(target + "/landed", status_code=307)

    async def home(request: Request) -> Response:
        return RedirectResponse("/landed", status_code=302)

    async def landed(request: Request) -> Response:
        seen.append((request.url.path, request.headers.get("authorization")))
        return JSONResponse({"ok": True})

    async def loop(request: Request) -> Response:
        return RedirectResponse("/loop", status_code=302)

    async def big_error(request: Request) -> Response:
        return Response(b"e" * (1 << 20), status_code=500)

    async def declared(request: Request) -> Response:
        return Response(b"x" * 4096, media_type="application/json")

    app = Starlette(
        routes=[
            Route("/away", away, methods=["GET", "POST"]),
            Route("/home", home),
            Route("/landed", landed),
            Route("/loop", loop),
            Route("/big-error", big_error),
            Route("/declared", declared),
        ]
    )
    with ServerThread(app) as srv:
        yield srv, seen


AUTH = {"Authorization": "Bearer s3cret"}


def _async_get(url: str, hops: int, limit: int = 1 << 20) -> outbound.Reply:
    async def go() -> outbound.Reply:
        async with outbound.Outbound(timeout=10, limit=limit, follow_redirects=hops) as http:
            return await http.get(url, headers=AUTH)

    return asyncio.run(go())


def _sync_get(url: str, hops: int, limit: int = 1 << 20) -> outbound.Reply:
    return outbound.get_sync(url, limit=limit, timeout=10, headers=AUTH, follow_redirects=hops)


CLIENTS = pytest.mark.parametrize("get", [_async_get, _sync_get], ids=["async", "sync"])


@CLIENTS
def test_redirects_are_answers_by_default(get, origin_server, other) -> None:
    before = len(other[1])
    reply = get(origin_server[0].url + "/away", 0)
    assert reply.status == 307
    assert len(other[1]) == before  # the other origin was never contacted


@CLIENTS
def test_a_hop_to_another_origin_drops_the_credentials(get, origin_server, other) -> None:
    reply = get(origin_server[0].url + "/away", 1)
    assert reply.status == 200 and reply.url == other[0].url + "/landed"
    assert other[1][-1] == ("/landed", None)


@CLIENTS
def test_a_hop_within_the_origin_keeps_them(get, origin_server) -> None:
    reply = get(origin_server[0].url + "/home", 1)
    assert reply.status == 200
    assert origin_server[1][-1] == ("/landed", "Bearer s3cret")


@CLIENTS
def test_hops_are_bounded(get, origin_server) -> None:
    assert get(origin_server[0].url + "/loop", 3).status == 302  # the fourth 3xx is the answer


@CLIENTS
def test_an_error_body_is_an_excerpt(get, origin_server) -> None:
    reply = get(origin_server[0].url + "/big-error", 0)
    assert reply.status == 500 and len(reply.body) == outbound.ERROR_BODY_MAX_BYTES


@CLIENTS
def test_a_declared_body_over_the_cap_is_refused(get, origin_server) -> None:
    with pytest.raises(outbound.OutboundError) as err:
        get(origin_server[0].url + "/declared", 0, limit=1024)
    assert err.value.reason == bounded.TOO_LARGE


@CLIENTS
def test_an_unreachable_host_is_a_reason_not_a_traceback(get) -> None:
    with pytest.raises(outbound.OutboundError) as err:
        get("http://127.0.0.1:9/nothing", 0)
    assert err.value.reason == outbound.UNREACHABLE
    assert "s3cret" not in str(err.value)


def test_messages_never_carry_the_query() -> None:
    with pytest.raises(outbound.OutboundError) as err:
        _sync_get("http://127.0.0.1:9/api/v1/query?query=secret_series", 0)
    assert "secret_series" not in str(err.value)
