"""HTTP/1.1 framing helpers for the tap: which headers are per-hop, and the heads it writes.

The tap re-frames each hop itself (RFC 9110 §7.6.1): end-to-end headers pass byte for byte,
in order and with their original case; Connection, Keep-Alive, Transfer-Encoding and the
other hop-by-hop headers (plus any the Connection header names) are dropped and the framing
for the next hop is written by the tap.
"""

from __future__ import annotations

import json

HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-connection",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    }
)

CHUNK_END = b"0\r\n\r\n"
HEAD_END = b"\r\n\r\n"  # the empty line that ends a head (RFC 9112 §2.1)


def connection_tokens(value: bytes) -> set[bytes]:
    """Header names a Connection header declares hop-by-hop (besides close/keep-alive)."""
    tokens = {t.strip().lower() for t in value.split(b",")}
    return tokens - {b"", b"close", b"keep-alive"}


def drop_named(headers: list[tuple[bytes, bytes]], names: set[bytes]) -> list[tuple[bytes, bytes]]:
    return [(n, v) for n, v in headers if n.lower() not in names]


def request_head(
    method: bytes, url: bytes, headers: list[tuple[bytes, bytes]], chunked: bool
) -> bytes:
    """Request line and headers for SGLang: always HTTP/1.1 keep-alive."""
    parts = [method, b" ", url, b" HTTP/1.1\r\n"]
    for name, value in headers:
        parts += (name, b": ", value, b"\r\n")
    if chunked:
        parts.append(b"Transfer-Encoding: chunked\r\n")
    parts.append(b"\r\n")
    return b"".join(parts)


def response_head(
    status: int,
    reason: bytes,
    headers: list[tuple[bytes, bytes]],
    chunked: bool,
    close: bool,
) -> bytes:
    """Status line and headers for the client (HTTP/1.1; the tap's own framing appended)."""
    parts = [b"HTTP/1.1 %d %s\r\n" % (status, reason)]
    for name, value in headers:
        parts += (name, b": ", value, b"\r\n")
    if chunked:
        parts.append(b"Transfer-Encoding: chunked\r\n")
    if close:
        parts.append(b"Connection: close\r\n")
    parts.append(b"\r\n")
    return b"".join(parts)


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


def error_response(status: int, reason: str, message: str, kind: str, close: bool) -> bytes:
    """A short OpenAI-shaped JSON error the tap itself answers with (e.g. 502)."""
    body = json.dumps(
        {"error": {"message": message, "type": kind, "code": status}}, separators=(",", ":")
    ).encode()
    headers = [
        (b"Content-Type", b"application/json"),
        (b"Content-Length", str(len(body)).encode()),
    ]
    return response_head(status, reason.encode(), headers, chunked=False, close=close) + body
