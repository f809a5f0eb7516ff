"""A stand-in for SGLang's HTTP API, for the tap's tests and benchmark (and manual demos).

Raw asyncio + llhttp, so that at 256 concurrent streams the upstream is not the bottleneck.
Responses are a pure function of the request (no clocks, no randomness), so a body fetched
through the tap can be compared byte for byte with one fetched directly, or with
:func:`expected_body`. Behaviour is steered by an optional ``"fake"`` object in the JSON
request body (the OpenAI client sends it with ``extra_body={"fake": {...}}``):

- ``chunks`` (32), ``first_ms`` (20), ``every_ms`` (10): SSE timing: the head at once, the
  first event after first_ms, then one every every_ms, then ``data: [DONE]``. Non-streaming
  responses are sent after first_ms.
- ``status``: answer with this status and an OpenAI-style JSON error (429 adds Retry-After).
- ``reset_after``: send this many events (or half the JSON body) then reset the connection.
- ``close_delimited``: no Content-Length or chunking; the body ends when the connection closes.
- ``tag``: a name under which a client disconnect mid-response is recorded in ``disconnects``.

``GET /health``, ``GET /v1/models`` answer small JSON; ``/echo`` (any method) answers a JSON
description of the request it received (method, url, headers, body length and SHA-256).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import time
from dataclasses import dataclass, field
from typing import Any

from httptools import HttpParserError, HttpRequestParser

CREATED = 1_700_000_000
_WORDS = (
    "the",
    "model",
    "answers",
    "with",
    "tokens",
    "streamed",
    "over",
    "server-sent",
    "events",
    "through",
    "a",
    "tap",
)


@dataclass(frozen=True)
class FakeSpec:
    """What one request asks the fake for (from its body)."""

    path: str
    stream: bool
    model: str
    chunks: int = 32
    first_ms: float = 20.0
    every_ms: float = 10.0
    status: int = 200
    reset_after: int | None = None
    close_delimited: bool = False
    tag: str | None = None
    seed: bytes = b""


def parse_spec(path: str, body: bytes) -> FakeSpec:
    try:
        req = json.loads(body) if body else {}
    except ValueError:
        req = {}
    if not isinstance(req, dict):
        req = {}
    fake: dict[str, Any] = req.get("fake") or {}
    reset = fake.get("reset_after")
    return FakeSpec(
        path=path.split("?", 1)[0],
        stream=bool(req.get("stream", False)),
        model=str(req.get("model", "deepseek-v4")),
        chunks=int(fake.get("chunks", 32)),
        first_ms=float(fake.get("first_ms", 20.0)),
        every_ms=float(fake.get("every_ms", 10.0)),
        status=int(fake.get("status", 200)),
        reset_after=None if reset is None else int(reset),
        close_delimited=bool(fake.get("close_delimited", False)),
        tag=fake.get("tag"),
        seed=hashlib.sha256(body).digest(),
    )


def _words(seed: bytes, i: int) -> str:
    """A deterministic ~25-character piece of text for event ``i``."""
    picks = [_WORDS[seed[(i * 3 + k) % len(seed)] % len(_WORDS)] for k in range(3)]
    return f"{' '.join(picks)} {i:03d} "


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def stream_events(spec: FakeSpec) -> list[bytes]:
    """Every SSE event of a streaming response, ``data: [DONE]`` included."""
    rid = spec.seed.hex()[:24]
    events = []
    for i in range(spec.chunks):
        last = i == spec.chunks - 1
        if spec.path == "/generate":
            obj: dict[str, Any] = {
                "text": "".join(_words(spec.seed, j) for j in range(i + 1))[-96:],
                "meta_info": {"id": rid, "completion_tokens": i + 1},
            }
        else:
            obj = {
                "id": f"chatcmpl-{rid}",
                "object": "chat.completion.chunk",
                "created": CREATED,
                "model": spec.model,
                "choices": [
                    {
                        "index": 0,
                        "delta": {"content": _words(spec.seed, i)},
                        "logprobs": None,
                        "finish_reason": "stop" if last else None,
                    }
                ],
            }
        events.append(b"data: " + _dumps(obj) + b"\n\n")
    events.append(b"data: [DONE]\n\n")
    return events


def json_body(spec: FakeSpec) -> bytes:
    """The body of a non-streaming response."""
    rid = spec.seed.hex()[:24]
    text = "".join(_words(spec.seed, i) for i in range(spec.chunks))
    if spec.path == "/generate":
        return _dumps({"text": text, "meta_info": {"id": rid, "completion_tokens": spec.chunks}})
    return _dumps(
        {
            "id": f"chatcmpl-{rid}",
            "object": "chat.completion",
            "created": CREATED,
            "model": spec.model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "logprobs": None,
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 11, "completion_tokens": spec.chunks, "total_tokens": 43},
        }
    )


def error_body(status: int) -> bytes:
    kind = {429: "RateLimitError", 400: "BadRequestError"}.get(status, "InternalServerError")
    return _dumps({"object": "error", "message": f"fake {status}", "type": kind, "code": status})


def expected_body(path: str, body: bytes) -> bytes:
    """The exact response body the fake sends for a successful request (for byte checks)."""
    spec = parse_spec(path, body)
    return b"".join(stream_events(spec)) if spec.stream else json_body(spec)


_REASONS = {200: b"OK", 404: b"Not Found", 429: b"Too Many Requests", 500: b"Internal Server Error"}


def _head(status: int, headers: list[tuple[bytes, bytes]]) -> bytes:
    lines = [b"HTTP/1.1 %d %s\r\n" % (status, _REASONS.get(status, b"Status"))]
    lines += [name + b": " + value + b"\r\n" for name, value in headers]
    return b"".join(lines) + b"\r\n"


@dataclass
class FakeStats:
    requests: int = 0
    connections: int = 0
    disconnects: dict[str, float] = field(default_factory=dict)
    idle_closes: int = 0  # keep-alive connections this upstream closed for idleness
    last_headers: list[tuple[str, str]] = field(default_factory=list)


class _FakeConnection(asyncio.Protocol):
    def __init__(self, server: FakeUpstream) -> None:
        self.server = server
        self.stats = server.stats
        self.transport: asyncio.Transport | None = None
        self.parser = HttpRequestParser(self)
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []
        self.timer: asyncio.TimerHandle | None = None
        self.tag: str | None = None
        self.busy = False
        self.keep_alive = True
        self.idle_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop transports are not asyncio.Transport subclasses: no isinstance check
        self.transport = transport  # type: ignore[assignment]
        self.stats.connections += 1
        self.server.conns.add(self)
        self._arm_idle()

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.conns.discard(self)
        if self.idle_timer is not None:
            self.idle_timer.cancel()
        if self.busy:
            if self.tag is not None:
                self.stats.disconnects[self.tag] = time.monotonic()
            if self.timer is not None:
                self.timer.cancel()

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except HttpParserError:
            self.transport.abort()  # type: ignore[union-attr]

    def on_message_begin(self) -> None:
        self.url = b""
        self.headers = []
        self.body = []
        if self.idle_timer is not None:
            self.idle_timer.cancel()
            self.idle_timer = None

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.stats.requests += 1
        self.busy = True
        self.keep_alive = self.parser.should_keep_alive()
        method = self.parser.get_method()
        url = self.url.decode("latin-1")
        body = b"".join(self.body)
        self.stats.last_headers = [
            (n.decode("latin-1"), v.decode("latin-1")) for n, v in self.headers
        ]
        path = url.split("?", 1)[0]
        if path == "/echo":
            self._send_now(200, b"application/json", self._echo(method, url, body), method)
        elif path in ("/health", "/v1/models") and method in (b"GET", b"HEAD"):
            payload = _dumps({"object": "list", "data": [{"id": "deepseek-v4"}]})
            self._send_now(200, b"application/json", payload, method)
        elif path in ("/v1/chat/completions", "/v1/completions", "/generate"):
            self._generate(parse_spec(url, body))
        else:
            self._send_now(404, b"application/json", error_body(404), method)

    # --- responses ---------------------------------------------------------------------------

    def _echo(self, method: bytes, url: str, body: bytes) -> bytes:
        return _dumps(
            {
                "method": method.decode(),
                "url": url,
                "headers": self.stats.last_headers,
                "body_len": len(body),
                "body_sha256": hashlib.sha256(body).hexdigest(),
            }
        )

    def _send_now(self, status: int, ctype: bytes, payload: bytes, method: bytes = b"POST") -> None:
        headers = [(b"Content-Type", ctype), (b"Content-Length", str(len(payload)).encode())]
        self.transport.write(_head(status, headers) + (b"" if method == b"HEAD" else payload))  # type: ignore[union-attr]
        self._done()

    def _generate(self, spec: FakeSpec) -> None:
        self.tag = spec.tag
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        if spec.status != 200:
            headers = [(b"Content-Type", b"application/json"), (b"X-Fake-Error", b"yes")]
            payload = error_body(spec.status)
            if spec.status == 429:
                headers.append((b"Retry-After", b"7"))
            headers.append((b"Content-Length", str(len(payload)).encode()))
            self.transport.write(_head(spec.status, headers) + payload)  # type: ignore[union-attr]
            self._done()
            return
        if not spec.stream:
            self.timer = loop.call_at(t0 + spec.first_ms / 1000, self._send_json, spec)
            return
        headers = [(b"Content-Type", b"text/event-stream"), (b"Cache-Control", b"no-cache")]
        if not spec.close_delimited:
            headers.append((b"Transfer-Encoding", b"chunked"))
        self.transport.write(_head(200, headers))  # type: ignore[union-attr]
        events = stream_events(spec)
        self.timer = loop.call_at(t0 + spec.first_ms / 1000, self._tick, spec, events, 0, t0)

    def _send_json(self, spec: FakeSpec) -> None:
        payload = json_body(spec)
        headers = [(b"Content-Type", b"application/json")]
        if not spec.close_delimited:
            headers.append((b"Content-Length", str(len(payload)).encode()))
        head = _head(200, headers)
        if spec.reset_after is not None:
            self.transport.write(head + payload[: len(payload) // 2])  # type: ignore[union-attr]
            self.busy = False
            self.transport.abort()  # type: ignore[union-attr]
            return
        self.transport.write(head + payload)  # type: ignore[union-attr]
        if spec.close_delimited:
            self.busy = False
            self.transport.close()  # type: ignore[union-attr]
            return
        self._done()

    def _tick(self, spec: FakeSpec, events: list[bytes], i: int, t0: float) -> None:
        transport = self.transport
        assert transport is not None
        if spec.reset_after is not None and i >= spec.reset_after:
            self.busy = False
            transport.abort()
            return
        last = i == spec.chunks - 1
        todo = events[i:] if last else [events[i]]
        if spec.close_delimited:
            transport.write(b"".join(todo))
        else:
            transport.write(b"".join(b"%x\r\n%b\r\n" % (len(e), e) for e in todo))
        if not last:
            at = t0 + (spec.first_ms + (i + 1) * spec.every_ms) / 1000
            self.timer = asyncio.get_running_loop().call_at(at, self._tick, spec, events, i + 1, t0)
            return
        if spec.close_delimited:
            self.busy = False
            transport.close()
            return
        transport.write(b"0\r\n\r\n")
        self._done()

    def _done(self) -> None:
        self.busy = False
        self.timer = None
        if not self.keep_alive:
            self.transport.close()  # type: ignore[union-attr]
        else:
            self._arm_idle()

    def _arm_idle(self) -> None:
        timeout = self.server.idle_timeout
        if timeout is not None:
            self.idle_timer = asyncio.get_running_loop().call_later(timeout, self._idle_close)

    def _idle_close(self) -> None:
        if not self.busy and self.transport is not None:
            self.stats.idle_closes += 1
            self.transport.close()


class FakeUpstream:
    """Listen on ``host:port`` (``start`` returns the bound port); ``stats`` records what it saw.

    ``idle_timeout`` closes keep-alive connections idle that long, like uvicorn's 5 s default.
    """

    def __init__(self, idle_timeout: float | None = None) -> None:
        self.idle_timeout = idle_timeout
        self.stats = FakeStats()
        self.conns: set[_FakeConnection] = set()
        self._server: asyncio.Server | None = None

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _FakeConnection(self), host, port, backlog=2048, reuse_address=True
        )
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for conn in list(self.conns):
            if conn.transport is not None:
                conn.transport.abort()
        await asyncio.sleep(0)
        await self._server.wait_closed()
        self._server = None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Run the fake SGLang upstream (uvloop).")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--print-port", action="store_true")
    args = ap.parse_args(argv)
    import uvloop

    async def serve() -> None:
        fake = FakeUpstream()
        port = await fake.start("127.0.0.1", args.port)
        if args.print_port:
            print(port, flush=True)
        await asyncio.Event().wait()

    uvloop.run(serve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
