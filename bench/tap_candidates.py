"""Alternative pass-through designs, measured beside the tap to justify its HTTP stack.

``python -m bench.tap_candidates KIND --upstream URL`` prints its port and serves until killed:

- ``aiohttp-web``: aiohttp.web server + aiohttp ClientSession (keep-alive pool sized for 1024).
- ``uvicorn-aiohttp``: uvicorn (httptools, uvloop) raw ASGI app + the same aiohttp client.
- ``bare-uvloop``: no HTTP at all: each client connection gets its own SGLang connection and
  every read is written to the other side as it came (one Python call per read). Not a proxy
  (it cannot pool, refuse or sample); the floor any uvloop-and-Python design pays per chunk,
  so the tap's CPU above it is its own per-request work (issue 31).

The first two stream the body chunk by chunk without buffering and drop hop-by-hop headers;
none samples (they are the transport floor of each design, not full taps).
"""

from __future__ import annotations

import argparse
import asyncio
import socket
from typing import Any

import aiohttp

HOP = {
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
}


def _session() -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(limit=1024, limit_per_host=0, keepalive_timeout=4.0)
    return aiohttp.ClientSession(
        connector=connector,
        auto_decompress=False,
        timeout=aiohttp.ClientTimeout(total=None),
        skip_auto_headers=("User-Agent", "Accept-Encoding", "Accept"),
    )


async def serve_aiohttp_web(upstream: str, sock: socket.socket) -> None:
    from aiohttp import web

    session = _session()

    async def handler(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP}
        async with session.request(
            request.method, upstream + request.rel_url.raw_path_qs, headers=headers, data=body
        ) as up:
            out = {k: v for k, v in up.headers.items() if k.lower() not in HOP}
            resp = web.StreamResponse(status=up.status, reason=up.reason, headers=out)
            if up.content_length is not None:
                resp.content_length = up.content_length
            await resp.prepare(request)
            async for piece in up.content.iter_any():
                await resp.write(piece)
            await resp.write_eof()
            return resp

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.SockSite(runner, sock, backlog=2048)
    await site.start()
    await asyncio.Event().wait()


def build_asgi(upstream: str) -> Any:
    session: aiohttp.ClientSession | None = None

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        nonlocal session
        if scope["type"] == "lifespan":
            while True:
                msg = await receive()
                if msg["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif msg["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if session is None:
            session = _session()
        chunks = []
        while True:
            msg = await receive()
            chunks.append(msg.get("body", b""))
            if not msg.get("more_body"):
                break
        headers = [(k.decode(), v.decode()) for k, v in scope["headers"] if k.decode() not in HOP]
        url = upstream + scope["raw_path"].decode()
        if scope["query_string"]:
            url += "?" + scope["query_string"].decode()
        async with session.request(
            scope["method"], url, headers=headers, data=b"".join(chunks)
        ) as up:
            out = [
                (k.encode(), v.encode())
                for k, v in up.headers.items()
                if k.lower() not in HOP or (k.lower() == "content-length")
            ]
            await send({"type": "http.response.start", "status": up.status, "headers": out})
            async for piece in up.content.iter_any():
                await send({"type": "http.response.body", "body": piece, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    return app


class _BareUp(asyncio.Protocol):
    """SGLang's side of one bare-uvloop pair: what it reads goes to the client as it came."""

    def __init__(self, client: _BareClient) -> None:
        self.client = client
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.client.transport.write(data)  # type: ignore[union-attr]

    def connection_lost(self, exc: Exception | None) -> None:
        if self.client.transport is not None:
            self.client.transport.close()


class _BareClient(asyncio.Protocol):
    """The client's side: connects its own SGLang connection, then writes every read to it."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.transport: asyncio.Transport | None = None
        self.up: _BareUp | None = None
        self.pending: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        _, up = await loop.create_connection(lambda: _BareUp(self), self.host, self.port)
        self.up = up
        for data in self.pending:
            up.transport.write(data)  # type: ignore[union-attr]
        self.pending.clear()

    def data_received(self, data: bytes) -> None:
        if self.up is None:
            self.pending.append(data)
        else:
            self.up.transport.write(data)  # type: ignore[union-attr]

    def connection_lost(self, exc: Exception | None) -> None:
        if self.up is not None and self.up.transport is not None:
            self.up.transport.close()


async def serve_bare(upstream: str, sock: socket.socket) -> None:
    host, _, port = upstream.removeprefix("http://").partition(":")
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _BareClient(host, int(port)), sock=sock, backlog=2048)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("kind", choices=("aiohttp-web", "uvicorn-aiohttp", "bare-uvloop"))
    ap.add_argument("--upstream", required=True)
    args = ap.parse_args(argv)
    import uvloop

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    print(sock.getsockname()[1], flush=True)
    if args.kind == "aiohttp-web":
        uvloop.run(serve_aiohttp_web(args.upstream, sock))
    elif args.kind == "bare-uvloop":
        uvloop.run(serve_bare(args.upstream, sock))
    else:
        import uvicorn

        config = uvicorn.Config(
            build_asgi(args.upstream),
            loop="uvloop",
            http="httptools",
            log_level="warning",
            access_log=False,
            backlog=2048,
        )
        uvicorn.Server(config).run(sockets=[sock])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
