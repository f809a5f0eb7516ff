"""The API port bounds request heads (issue 24): 4 unfinished 250 MB header blocks held 1 GB
of the sidecar's memory with uvicorn's httptools protocol, which has no limit of its own."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from exporter.http_limits import MAX_HEAD_BYTES, MAX_HEADERS, BoundedHttpToolsProtocol
from tests.support import ServerThread


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    async def hello(request: Request) -> PlainTextResponse:
        return PlainTextResponse(f"{len(request.headers)} headers")

    app = Starlette(routes=[Route("/", hello)])
    with ServerThread(app, lifespan="off", http=BoundedHttpToolsProtocol) as srv:
        yield srv.port


def _exchange(port: int, pieces: list[bytes]) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        try:
            for piece in pieces:
                s.sendall(piece)
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused and closed mid-send: read what it answered
        out = b""
        while True:
            try:
                data = s.recv(65536)
            except ConnectionResetError:
                return out
            if not data:
                return out
            out += data


def test_an_endless_header_value_is_refused_at_the_cap(port: int) -> None:
    head = b"GET / HTTP/1.1\r\nHost: t\r\nX-Big: "
    answer = _exchange(port, [head] + [b"a" * (16 << 10)] * 64)  # 1 MiB, never ended
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert b"too large" in answer


def test_too_many_headers_are_refused(port: int) -> None:
    lines = b"".join(b"X-H%d: v\r\n" % i for i in range(MAX_HEADERS + 1))
    answer = _exchange(port, [b"GET / HTTP/1.1\r\nHost: t\r\n" + lines + b"\r\n"])
    assert answer.startswith(b"HTTP/1.1 400 ")


def test_heads_within_the_bounds_are_served(port: int) -> None:
    lines = b"".join(b"X-H%d: v\r\n" % i for i in range(MAX_HEADERS - 3))  # + 3 below
    pad = b"X-Pad: " + b"p" * (MAX_HEAD_BYTES // 2) + b"\r\n"
    request = b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n" + lines + pad + b"\r\n"
    # sent in small pieces, so the head spans many reads
    pieces = [request[i : i + 4096] for i in range(0, len(request), 4096)]
    answer = _exchange(port, pieces)
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]
