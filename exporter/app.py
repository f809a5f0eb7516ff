"""The HTTP edge: FastAPI routes over a :class:`~exporter.sidecar.Sidecar`. Thin by design."""

from __future__ import annotations

import asyncio
import gc
import hmac
import html
import re
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from exporter import __version__, api_docs
from exporter.config import SidecarSettings
from exporter.metrics.exposition import Exposition
from exporter.samplers import decode
from exporter.samplers.ingest import IngestError, parse_buffer
from exporter.samplers.tap import handover
from exporter.sidecar import Sidecar
from exporter.sources.nvml import NvmlLibrary
from exporter.units import GIB

INGEST_READ_SECONDS = 30
"""A POST body must arrive within this time: a slow sender cannot hold an ingest slot."""


def create_app(
    settings: SidecarSettings,
    sidecar: Sidecar | None = None,
    nvml: NvmlLibrary | None = None,
    env: dict[str, str] | None = None,
) -> FastAPI:
    """The HTTP edge over a :class:`Sidecar` (built here unless given); ``nvml`` and ``env``
    reach the Sidecar (a GPU library stand-in, the environment SGLang's facts are read from)."""
    sc = sidecar or Sidecar(settings, nvml=nvml, env=env)

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        await sc.start()
        # Long-lived objects from start-up never need collecting; freezing them keeps
        # generation-2 GC pauses out of scrape latency (docs/architecture.md, measurements).
        gc.freeze()
        try:
            yield
        finally:
            await sc.stop()

    app = FastAPI(
        title="dsv4-sidecar",
        version=__version__,
        lifespan=lifespan,
        # Swagger UI and ReDoc load their assets from a CDN (blank offline): /docs is
        # exporter.api_docs's self-contained page instead.
        docs_url=None,
        redoc_url=None,
    )
    app.state.sidecar = sc
    app.add_middleware(MetricsEndpoint, exposition=sc.exposition)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        """Process liveness only: never depends on NVML or SGLang."""
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        """Ready once every enabled source has completed one cycle (up or down)."""
        ready, status = sc.readiness()
        return JSONResponse({"ready": ready, "sources": status}, status_code=200 if ready else 503)

    @app.get("/api/v1/footprint")
    async def footprint() -> dict[str, Any]:
        """KV-pool plan, allocation and over-commit per rank, with the facts they rest on."""
        return sc.footprint.as_json()

    ingest_slots = asyncio.Semaphore(settings.ingest_concurrency)
    open_without_token = settings.ingest_open_without_token()

    @app.post("/api/v1/samples")
    async def ingest(request: Request) -> JSONResponse:
        """Grade samples from gateways or clients (single, list, or {"samples": [...]})."""
        token = await asyncio.to_thread(settings.ingest_token_value)
        if token:
            if not _bearer_ok(request, token):
                return _unauthorized()
        elif not open_without_token:
            return JSONResponse(
                {
                    "error": "ingest without a token answers only when the sidecar listens on "
                    "loopback",
                    "reason": "token_required",
                    "hint": "set ingest_token_file (a mounted Secret; or DSV4_SIDECAR_INGEST_TOKEN)"
                    " and send it as a bearer token, or listen on 127.0.0.1",
                },
                status_code=403,
            )
        if ingest_slots.locked():
            # Each body in flight can hold ingest_max_bytes plus its decoded copy: a bound on
            # how many are read at once is a bound on memory.
            return JSONResponse(
                {"error": "too many samples being read; retry", "reason": "busy"},
                status_code=429,
                headers={"Retry-After": "1"},
            )
        # The tap's own process posts raw exchanges (exporter.samplers.tap.handover): a
        # metadata line comes on top of a sample of up to ingest_max_bytes.
        exchange = _media_type(request) == handover.CONTENT_TYPE
        limit = settings.ingest_max_bytes + (handover.MAX_META_BYTES if exchange else 0)
        async with ingest_slots:
            try:
                raw = await asyncio.wait_for(_read_limited(request, limit), INGEST_READ_SECONDS)
            except asyncio.TimeoutError:
                return JSONResponse(
                    {
                        "error": f"body not received within {INGEST_READ_SECONDS} s",
                        "reason": "too_slow",
                    },
                    status_code=408,
                )
            if raw is None:
                return JSONResponse(
                    {
                        "error": f"body exceeds {settings.ingest_max_bytes} bytes",
                        "reason": "too_large",
                    },
                    status_code=413,
                )
            if exchange:
                return await _ingest_exchange(sc, raw)
            try:
                parsed = await asyncio.to_thread(parse_buffer, raw)
            except IngestError as exc:
                return JSONResponse({"error": str(exc), "reason": exc.reason}, exc.status)
        accepted = sum(sc.pipeline.submit(s) for s in parsed.samples)
        status = 200 if parsed.samples else 400
        return JSONResponse(
            {
                "accepted": accepted,
                "dropped": len(parsed.samples) - accepted,
                "rejected": [r.to_json() for r in parsed.rejected],
            },
            status_code=status,
        )

    @app.get("/api/v1/samples", response_model=None)
    async def samples(
        request: Request, limit: int = 50, verdict: str | None = None
    ) -> JSONResponse | dict[str, Any]:
        """Recent degenerate/suspect samples (redacted, truncated); bearer token required."""
        # A mounted Secret can rotate: read it per request, in a thread, not on the loop.
        token = await asyncio.to_thread(settings.samples_token_value)
        if token is None:
            return JSONResponse(
                {
                    "error": "the samples endpoint is off",
                    "hint": "set DSV4_SIDECAR_SAMPLES_TOKEN or samples_token_file to enable it",
                },
                status_code=404,
            )
        if not _bearer_ok(request, token):
            return _unauthorized()
        return {"samples": sc.pipeline.store.recent(max(1, min(limit, 1000)), verdict)}

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def landing() -> str:
        return _landing(sc)

    api_docs.register(app, extra=(("GET", "/metrics", "Prometheus exposition"),))
    return app


def _media_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";", 1)[0].strip().lower()


async def _ingest_exchange(sc: Sidecar, raw: bytearray) -> JSONResponse:
    """Exchanges from the tap's own process, graded as the in-process tap's are (their
    bodies are decoded in the grading process, not here)."""
    try:
        exchanges = await asyncio.to_thread(handover.decode, raw)
    except handover.HandoverError as exc:
        return JSONResponse({"error": str(exc), "reason": exc.reason}, status_code=400)
    finally:
        raw.clear()
    accepted = sum(sc.pipeline.submit(decode.from_exchange(x)) for x in exchanges)
    return JSONResponse(
        {"accepted": accepted, "dropped": len(exchanges) - accepted, "rejected": []}
    )


# RFC 6750 section 2.1: credentials = "Bearer" 1*SP b64token; the scheme is
# case-insensitive (RFC 7235 section 2.1). Nothing looser: no other separator, no quotes.
_BEARER = re.compile(r"[Bb][Ee][Aa][Rr][Ee][Rr] +([A-Za-z0-9\-._~+/]+=*)")


def _bearer_ok(request: Request, token: str) -> bool:
    """Constant-time comparison of the presented bearer token (never logged)."""
    match = _BEARER.fullmatch(request.headers.get("authorization", ""))
    if match is None:
        return False
    return hmac.compare_digest(match.group(1).encode(), token.encode())


def _unauthorized() -> JSONResponse:
    return JSONResponse(
        {"error": "missing or wrong bearer token"},
        status_code=401,
        headers={"WWW-Authenticate": 'Bearer realm="dsv4-sidecar"'},
    )


async def _read_limited(request: Request, limit: int) -> bytearray | None:
    """Read the body into one buffer (no joined copy), giving up (None) once it exceeds
    ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        return None
    body = bytearray()
    async for chunk in request.stream():
        if len(body) + len(chunk) > limit:
            return None
        body += chunk
    return body


class MetricsEndpoint:
    """Answers GET /metrics in pure ASGI, ahead of FastAPI's routing and validation, so a
    cached scrape costs about what serving a static body costs (docs/architecture.md,
    "Measurements behind the design")."""

    def __init__(self, app: ASGIApp, exposition: Exposition) -> None:
        self.app = app
        self.exposition = exposition

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != "/metrics":
            await self.app(scope, receive, send)
            return
        if scope["method"] not in ("GET", "HEAD"):
            await send(
                {
                    "type": "http.response.start",
                    "status": 405,
                    "headers": [(b"allow", b"GET, HEAD")],
                }
            )
            await send({"type": "http.response.body", "body": b""})
            return
        accept = encoding = None
        for key, value in scope["headers"]:
            if key == b"accept":
                accept = value.decode("latin-1")
            elif key == b"accept-encoding":
                encoding = value.decode("latin-1")
        om, gz = self.exposition.negotiate(accept, encoding)
        body = await self.exposition.body(om, gz)
        headers = [
            (b"content-type", self.exposition.content_type(om).encode()),
            (b"content-length", str(len(body)).encode()),
        ]
        if gz:
            headers.append((b"content-encoding", b"gzip"))
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send(
            {"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else body}
        )


def _landing(sc: Sidecar) -> str:
    _, status = sc.readiness()
    rows = "".join(
        f"<tr><td>{html.escape(name)}</td><td>{'up' if s['up'] else 'down'}</td>"
        f"<td>{html.escape(str(s['last_error'] or ''))}</td></tr>"
        for name, s in status.items()
    )
    fp = sc.footprint
    over = ""
    if fp.ranks:
        worst = max(fp.ranks, key=lambda r: r.footprint.overcommit_bytes)
        over = (
            f"<p>Worst rank over-commit: rank {worst.rank}, "
            f"{worst.footprint.overcommit_bytes / GIB:.2f} GiB "
            f"({html.escape(fp.deployment.configurator if fp.deployment else '')} configurator, "
            f"{html.escape(fp.deployment.index_k_dtype if fp.deployment else '')} index-K).</p>"
        )
    sim = " (simulated GPUs)" if sc.settings.gpu_backend == "fake" else ""
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>dsv4-sidecar</title>
<style>body{{font-family:sans-serif;max-width:52em;margin:2em auto}}td{{padding:.2em .8em}}</style>
</head><body><h1>dsv4-sidecar {html.escape(__version__)}</h1>
<p>Watching SGLang at <code>{html.escape(sc.settings.server_url)}</code> and
{html.escape(sc.settings.gpu_backend)} GPUs{sim}: GPU memory per rank, KV-pool plan vs
allocation (over-commit), SGLang load.</p>{over}
<table><tr><th>source</th><th>state</th><th>last error</th></tr>{rows}</table>
<ul><li><a href="/metrics">/metrics</a> (Prometheus; OpenMetrics when asked)</li>
<li><a href="/readyz">/readyz</a> per-source status</li><li><a href="/healthz">/healthz</a></li>
<li><a href="/api/v1/footprint">/api/v1/footprint</a> plan / allocation / over-commit per rank</li>
<li>POST /api/v1/samples grades outputs; GET /api/v1/samples lists bad ones (bearer token)</li>
<li><a href="/docs">/docs</a> API</li></ul></body></html>"""
