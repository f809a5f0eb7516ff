"""The one HTTP client for everything the project sends out: sources, canary, repro, loadgen
and triage.

Every request the project makes goes to a URL an operator gave, and every answer is untrusted:
an endless body drove ``repro`` to 3 GB in 7 s, and urllib followed a redirect to another host
with the samples bearer token still attached. So the policy lives here, once:

- **bodies are capped** (``limit``, one of the named caps in :mod:`exporter.sources.bounded`);
  a declared ``Content-Length`` over it is refused unread, an undeclared one is cut at the cap;
- **every request has a total timeout**;
- **redirects are answers, not instructions**: off by default (a 3xx comes back as its status);
  when a caller allows some, a hop to another origin (scheme, host, port) drops the
  ``Authorization`` header, so credentials never reach a host the operator did not name;
- **no proxy from the environment**: the sidecar talks to exactly the URLs it was given.

Failures raise :class:`OutboundError` with a bounded ``reason`` (:data:`REASONS`), which callers
map to their own error-counter label values; the message never holds a body.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from exporter.causes import CAUSES, CONNECTION_REFUSED
from exporter.sources import bounded

UNREACHABLE = "unreachable"
TIMEOUT = "timeout"
REASONS = (UNREACHABLE, TIMEOUT, *bounded.REASONS)
_CAUSE_OF_REASON = {
    UNREACHABLE: "connection error",
    TIMEOUT: "timeout",
    bounded.TOO_LARGE: "body too large",
    bounded.TOO_DEEP: "body nested too deep",
}
# A non-2xx answer's body is kept only this far: enough for an error message, never a dump.
ERROR_BODY_MAX_BYTES = 4 << 10
_REDIRECTS = frozenset((301, 302, 303, 307, 308))


class OutboundError(Exception):
    """A request that got no usable answer; ``reason`` is one of :data:`REASONS`."""

    def __init__(self, reason: str, detail: str, cause: str | None = None) -> None:
        super().__init__(detail)
        self.reason = reason
        self.cause = cause if cause in CAUSES else _CAUSE_OF_REASON.get(reason, "connection error")


def connection_cause(exc: BaseException) -> str:
    """One of :data:`CAUSES` for an exception raised while connecting or reading; walks the
    exception's OS error (aiohttp wraps ``ConnectionRefusedError`` and ``socket.gaierror``)."""
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "server disconnected"
    seen: BaseException | None = exc
    for _ in range(4):  # the wrapped OS error is at most a few levels down
        if seen is None:
            break
        if isinstance(seen, ConnectionRefusedError):
            return CONNECTION_REFUSED
        if isinstance(seen, ConnectionResetError):
            return "connection reset"
        if isinstance(seen, socket.gaierror):
            return "name not resolved"
        if isinstance(seen, (ssl.SSLError, aiohttp.ClientSSLError)):
            return "TLS error"
        seen = getattr(seen, "os_error", None) or seen.__cause__ or getattr(seen, "reason", None)
        if not isinstance(seen, BaseException):
            break
    return "connection error"


@dataclass(frozen=True)
class Reply:
    """An answer: its status, headers and body (a non-2xx body cut at ERROR_BODY_MAX_BYTES)."""

    status: int
    body: bytes
    url: str
    headers: Mapping[str, str] = field(default_factory=dict)

    def json(self, max_depth: int = bounded.MAX_JSON_DEPTH) -> Any:
        """The body as JSON, depth-bounded; ``ValueError`` when it is not JSON."""
        return bounded.loads_bounded(self.body, max(len(self.body), 1), max_depth)


def origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) with the scheme's default port filled in."""
    u = urllib.parse.urlsplit(url)
    port = u.port or {"http": 80, "https": 443}.get(u.scheme)
    return u.scheme, (u.hostname or "").lower(), port


def redirect_headers(headers: Mapping[str, str], from_url: str, to_url: str) -> dict[str, str]:
    """The headers a redirect hop may carry: all of them to the same origin, none of the
    credentials (Authorization, Cookie, Proxy-Authorization) to another."""
    if origin(from_url) == origin(to_url):
        return dict(headers)
    secret = {"authorization", "cookie", "proxy-authorization"}
    return {k: v for k, v in headers.items() if k.lower() not in secret}


class Outbound:
    """An aiohttp session under the project's outbound policy (see the module docstring).

    One per poller or sampler, closed with it; ``connections`` bounds the sockets it keeps.
    """

    def __init__(
        self,
        *,
        timeout: float,
        limit: int,
        connections: int = 4,
        follow_redirects: int = 0,
    ) -> None:
        self.timeout = timeout
        self.limit = limit
        self.connections = connections
        self.follow_redirects = follow_redirects
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout),
                connector=aiohttp.TCPConnector(limit=self.connections),
                trust_env=False,
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> Outbound:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def get(
        self, url: str, *, headers: Mapping[str, str] | None = None, limit: int | None = None
    ) -> Reply:
        return await self.request("GET", url, headers=headers, limit=limit)

    async def post_json(
        self,
        url: str,
        payload: Any,
        *,
        headers: Mapping[str, str] | None = None,
        limit: int | None = None,
    ) -> Reply:
        return await self.request("POST", url, payload=payload, headers=headers, limit=limit)

    async def request(
        self,
        method: str,
        url: str,
        *,
        payload: Any = None,
        headers: Mapping[str, str] | None = None,
        limit: int | None = None,
    ) -> Reply:
        """One request (and at most ``follow_redirects`` hops); the body read up to ``limit``
        (default: this client's) for 2xx, up to ERROR_BODY_MAX_BYTES otherwise."""
        cap = self.limit if limit is None else limit
        hdrs = dict(headers or {})
        hops = 0
        while True:
            try:
                async with self._client().request(
                    method, url, json=payload, headers=hdrs, allow_redirects=False
                ) as resp:
                    status = resp.status
                    if status in _REDIRECTS and hops < self.follow_redirects:
                        target = resp.headers.get("Location")
                        if target:
                            nxt = urllib.parse.urljoin(url, target)
                            hdrs = redirect_headers(hdrs, url, nxt)
                            url, hops = nxt, hops + 1
                            if status == 303:
                                method, payload = "GET", None
                            continue
                    ok = 200 <= status < 300
                    body = await _read(resp, cap if ok else ERROR_BODY_MAX_BYTES, strict=ok)
                    return Reply(status, body, url, dict(resp.headers))
            except bounded.BodyRejected as exc:
                raise OutboundError(exc.reason, f"{method} {_safe(url)}: {exc}") from None
            except asyncio.TimeoutError:
                raise OutboundError(
                    TIMEOUT, f"{method} {_safe(url)} exceeded {self.timeout}s"
                ) from None
            except aiohttp.ClientError as exc:
                raise OutboundError(
                    UNREACHABLE,
                    f"{method} {_safe(url)}: {type(exc).__name__}",
                    connection_cause(exc),
                ) from None


async def _read(resp: aiohttp.ClientResponse, cap: int, *, strict: bool) -> bytes:
    """A 2xx body over the cap is an error (the caller wanted all of it); an error body is
    only ever context, so it is cut at the cap silently."""
    if strict:
        return await bounded.read_capped(resp, cap)
    buf = bytearray()
    async for piece in resp.content.iter_chunked(cap):
        buf += piece
        if len(buf) >= cap:
            break
    return bytes(buf[:cap])


def _safe(url: str) -> str:
    """The URL without its query (which may hold a PromQL query or a token) for messages."""
    return url.split("?", 1)[0]


# --- synchronous (triage: a few dozen requests, once, from a CLI) ------------------------------


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """urllib's redirect handler keeps every header on any hop; redirects are followed (or
    not) by :func:`get_sync` itself, under the same origin rule as the async client."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())


def get_sync(
    url: str,
    *,
    limit: int,
    timeout: float,
    headers: Mapping[str, str] | None = None,
    follow_redirects: int = 0,
    ssl_context: ssl.SSLContext | None = None,
) -> Reply:
    """``GET url`` with the same policy as :class:`Outbound`, with the standard library.
    ``ssl_context``: how to verify an https server (a private CA); default: the system's.

    ``timeout`` bounds the whole request, as aiohttp's ``total`` does for :class:`Outbound`:
    urllib's own timeout applies to each socket operation, so a server dripping a byte a
    second kept a 2 s request going for 24 s. The request runs on a daemon thread the caller
    waits for at most ``timeout``; past it the caller gets ``timeout`` and the thread stops at
    its next read."""
    deadline = time.monotonic() + timeout
    outcome: list[Reply | BaseException] = []
    cancel = threading.Event()

    def work() -> None:
        try:
            outcome.append(
                _get_sync(url, limit, timeout, headers, follow_redirects, ssl_context, cancel)
            )
        except BaseException as exc:  # handed to the caller's thread
            outcome.append(exc)

    worker = threading.Thread(target=work, name="dsv4-outbound-get", daemon=True)
    worker.start()
    worker.join(max(0.0, deadline - time.monotonic()))
    if not outcome:
        cancel.set()
        raise OutboundError(TIMEOUT, f"GET {_safe(url)} exceeded {timeout}s")
    result = outcome[0]
    if isinstance(result, BaseException):
        raise result
    return result


def _get_sync(
    url: str,
    limit: int,
    timeout: float,
    headers: Mapping[str, str] | None,
    follow_redirects: int,
    ssl_context: ssl.SSLContext | None,
    cancel: threading.Event,
) -> Reply:
    hdrs = dict(headers or {})
    hops = 0
    opener = _OPENER
    if ssl_context is not None:
        opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}),
            _NoRedirect(),
            urllib.request.HTTPSHandler(context=ssl_context),
        )
    while True:
        req = urllib.request.Request(url, headers=hdrs)
        try:
            with opener.open(req, timeout=timeout) as resp:
                return Reply(resp.status, _read_sync(resp, limit, strict=True, cancel=cancel), url)
        except urllib.error.HTTPError as exc:
            target = exc.headers.get("Location") if exc.headers else None
            if exc.code in _REDIRECTS and target and hops < follow_redirects:
                nxt = urllib.parse.urljoin(url, target)
                hdrs, url, hops = redirect_headers(hdrs, url, nxt), nxt, hops + 1
                continue
            body = (
                _read_sync(exc, ERROR_BODY_MAX_BYTES, strict=False, cancel=cancel)
                if exc.fp
                else b""
            )
            return Reply(exc.code, body, url, dict(exc.headers or {}))
        except TimeoutError:
            raise OutboundError(TIMEOUT, f"GET {_safe(url)} exceeded {timeout}s") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            raise OutboundError(
                UNREACHABLE, f"GET {_safe(url)}: {reason}", connection_cause(exc)
            ) from None


_SYNC_CHUNK = 64 << 10


def _read_sync(resp: Any, cap: int, *, strict: bool, cancel: threading.Event) -> bytes:
    """The body in pieces (``read1``: whatever has arrived, never waiting for a full chunk),
    never more than ``cap`` + one piece, stopping when the caller gave up (``cancel``)."""
    declared = resp.headers.get("Content-Length") if resp.headers else None
    if strict and declared is not None and declared.isdigit() and int(declared) > cap:
        raise OutboundError(bounded.TOO_LARGE, f"body of {declared} bytes declared, cap is {cap}")
    read = getattr(resp, "read1", None) or resp.read
    buf = bytearray()
    while len(buf) <= cap:
        if cancel.is_set():
            raise OutboundError(TIMEOUT, "the caller's deadline passed")
        piece = read(min(_SYNC_CHUNK, cap + 1 - len(buf)))
        if not piece:
            break
        buf += piece
    if len(buf) > cap:
        if strict:
            raise OutboundError(bounded.TOO_LARGE, f"body passed the cap of {cap} bytes")
        del buf[cap:]
    return bytes(buf)
