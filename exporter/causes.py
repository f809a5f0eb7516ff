"""Why an outbound request failed, in words an on-call can act on.

`repro` printed ``errors 5`` and nothing else; "connection refused" appeared nowhere. The
causes are finer than :data:`exporter.outbound.REASONS` (which label error counters and stay
as they are) and as bounded: a fixed vocabulary, never an address, a URL or a body, so they
can go into reports and tickets as they are. Pure (no aiohttp): a saved report is read with
this vocabulary without the HTTP client.
"""

from __future__ import annotations

CONNECTION_REFUSED = "connection refused"
CAUSES = (
    CONNECTION_REFUSED,
    "connection reset",
    "name not resolved",
    "TLS error",
    "server disconnected",
    "connection error",
    "timeout",
    "body too large",
    "body nested too deep",
)
# An answer that came back but could not be read: not JSON (or nested too deep to parse).
NON_JSON = "non-JSON body"


def http_status(status: int) -> str:
    """``HTTP 503``: an answer with a status that is not success (100-599, else ``HTTP ?``)."""
    return f"HTTP {status}" if 100 <= status <= 599 else "HTTP ?"
