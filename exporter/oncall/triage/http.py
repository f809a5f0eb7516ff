"""Plain HTTP GETs for triage: the sidecar's API and Prometheus' HTTP API.

Synchronous stdlib HTTP on purpose: triage makes a few dozen requests once, each with a
timeout, and a failure of one becomes a note in the report instead of an exception.
Only the URLs the operator gave are contacted (exporter.outbound: no redirects, no proxy).
"""

from __future__ import annotations

import base64
import json
import math
import re
import ssl
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from exporter import outbound
from exporter.sources import bounded

MAX_BODY = bounded.TRIAGE_ANSWER_MAX_BYTES  # a larger answer is refused, not parsed


@dataclass(frozen=True)
class SidecarAuth:
    """How to reach a sidecar served behind its web config file (docs/deploy.md): basic auth
    (user, password) and/or the CA that signed its certificate. Never printed (``repr`` hides
    the password): it ends up in no report, note or log."""

    basic: tuple[str, str] | None = field(default=None, repr=False)
    ca_file: Path | None = None

    def basic_header(self) -> str:
        assert self.basic is not None
        user, password = self.basic
        return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")

    def ssl_context(self) -> ssl.SSLContext | None:
        return ssl.create_default_context(cafile=str(self.ca_file)) if self.ca_file else None


class FetchError(Exception):
    """A request failed; the message is fit for the report's notes."""


def get(
    url: str,
    *,
    params: dict[str, Any] | None = None,
    timeout: float = 10.0,
    token: str | None = None,
    auth: SidecarAuth | None = None,
    limit: int = MAX_BODY,
) -> tuple[int, bytes]:
    """``GET url`` under the project's outbound policy (exporter.outbound): no proxy from the
    environment, no redirects (a 3xx comes back as its status; urllib would follow one to any
    host with the samples bearer token attached), the body capped at MAX_BODY. ``token`` is
    the samples bearer token; ``auth`` the sidecar's web config credentials (basic auth, a
    private CA), which the bearer token replaces where both would use Authorization."""
    if params:
        url = url + "?" + urllib.parse.urlencode(params)
    headers = {"Accept": "application/json, text/plain"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    elif auth is not None and auth.basic is not None:
        headers["Authorization"] = auth.basic_header()
    context = auth.ssl_context() if auth is not None else None
    try:
        reply = outbound.get_sync(
            url, limit=limit, timeout=timeout, headers=headers, ssl_context=context
        )
    except outbound.OutboundError as exc:
        raise FetchError(str(exc)) from None
    return reply.status, reply.body


def get_json(url: str, **kw: Any) -> tuple[int, Any]:
    status, body = get(url, **kw)
    try:
        return status, json.loads(body)
    except (ValueError, RecursionError):
        raise FetchError(f"GET {url.split('?')[0]}: HTTP {status}, not JSON") from None


def parse_exposition(text: str, prefix: str = "dsv4_") -> list[tuple[str, dict[str, str], float]]:
    """(name, labels, value) of every sample of the families named ``prefix...`` in a
    Prometheus text exposition: other lines are dropped before parsing, so a page full of
    someone else's metrics costs no memory beyond its text."""
    keep = (prefix, f"# HELP {prefix}", f"# TYPE {prefix}", f"# UNIT {prefix}", "# EOF")
    text = "\n".join(line for line in text.splitlines() if line.startswith(keep))
    out = []
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.append((s.name, dict(s.labels), float(s.value)))
    return out


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(spec: str) -> float:
    """Prometheus-style duration ("90s", "30m", "1h30m") or plain seconds, in seconds."""
    spec = spec.strip()
    try:
        value = float(spec)
    except ValueError:
        pos, total = 0, 0.0
        for m in _DURATION.finditer(spec):
            if m.start() != pos:
                break
            total += float(m.group(1)) * _UNITS[m.group(2)]
            pos = m.end()
        if pos != len(spec) or pos == 0:
            raise ValueError(f"not a duration: {spec!r} (use e.g. 90s, 30m, 1h)") from None
        value = total
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"duration must be positive, got {spec!r}")
    return value


def prom_duration(seconds: float) -> str:
    """Seconds as a PromQL range literal (whole seconds, at least 1s)."""
    return f"{max(1, round(seconds))}s"


class Prometheus:
    """Instant and range queries against Prometheus' HTTP API (v1)."""

    def __init__(self, url: str, timeout: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout

    def _query(self, path: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        status, doc = get_json(self.url + path, params=params, timeout=self.timeout)
        if status != 200 or not isinstance(doc, dict) or doc.get("status") != "success":
            error = doc.get("error") if isinstance(doc, dict) else None
            raise FetchError(f"Prometheus {path} {params.get('query')!r}: HTTP {status} {error}")
        data = doc.get("data")
        if not isinstance(data, dict):
            return []
        result = data.get("result")
        if data.get("resultType") == "scalar":
            return [{"metric": {}, "value": result}]
        # series of the documented shape only: labels a map of strings (an answer is untrusted)
        return [
            item
            for item in (result if isinstance(result, list) else [])
            if isinstance(item, dict)
            and isinstance(item.get("metric", {}), dict)
            and all(isinstance(v, str) for v in item.get("metric", {}).values())
        ]

    def instant(self, query: str, at: float) -> list[tuple[dict[str, str], float]]:
        """(labels, value) per series; NaN values are dropped (no data is not zero)."""
        out = []
        for item in self._query("/api/v1/query", {"query": query, "time": at}):
            value = _number(item.get("value"))
            if value is not None:
                out.append((dict(item.get("metric") or {}), value))
        return out

    def range(
        self, query: str, start: float, end: float, step: float
    ) -> list[tuple[dict[str, str], list[tuple[float, float]]]]:
        out = []
        params = {"query": query, "start": start, "end": end, "step": step}
        for item in self._query("/api/v1/query_range", params):
            points = []
            values = item.get("values")
            for pair in values if isinstance(values, list) else []:
                value = _number(pair)
                if value is not None:
                    points.append((float(pair[0]), value))
            out.append((dict(item.get("metric") or {}), points))
        return out


def _number(pair: Any) -> float | None:
    try:
        value = float(pair[1])
        float(pair[0])  # a point's time, read by range()
    except (TypeError, ValueError, IndexError, KeyError):
        return None
    return value if math.isfinite(value) else None
