"""Plain HTTP GETs for triage: the sidecar's API and Prometheus' HTTP API.

Synchronous stdlib HTTP on purpose: triage makes a few dozen requests once, each with a
timeout, and a failure of one becomes a note in the report instead of an exception.
Only the URLs the operator gave are contacted (exporter.outbound: no redirects, no proxy).
"""

from __future__ import annotations

import json
import math
import re
import urllib.parse
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from exporter import outbound

MAX_BODY = 64 << 20  # a /metrics or query answer larger than this is refused, not parsed


class FetchError(Exception):
    """A request failed; the message is fit for the report's notes."""


def get(
    url: str,
    *,
    params: dict[str, Any] | None = None,
    timeout: float = 10.0,
    token: str | None = None,
) -> tuple[int, bytes]:
    """``GET url`` under the project's outbound policy (exporter.outbound): no proxy from the
    environment, no redirects (a 3xx comes back as its status; urllib would follow one to any
    host with the samples bearer token attached), the body capped at MAX_BODY."""
    if params:
        url = url + "?" + urllib.parse.urlencode(params)
    headers = {"Accept": "application/json, text/plain"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        reply = outbound.get_sync(url, limit=MAX_BODY, timeout=timeout, headers=headers)
    except outbound.OutboundError as exc:
        raise FetchError(str(exc)) from None
    return reply.status, reply.body


def get_json(url: str, **kw: Any) -> tuple[int, Any]:
    status, body = get(url, **kw)
    try:
        return status, json.loads(body)
    except (ValueError, RecursionError):
        raise FetchError(f"GET {url.split('?')[0]}: HTTP {status}, not JSON") from None


def parse_exposition(text: str) -> list[tuple[str, dict[str, str], float]]:
    """(name, labels, value) of every sample in a Prometheus text exposition."""
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
        data = doc.get("data") or {}
        result = data.get("result")
        if data.get("resultType") == "scalar":
            return [{"metric": {}, "value": result}]
        return result if isinstance(result, list) else []

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
            for pair in item.get("values") or []:
                value = _number(pair)
                if value is not None:
                    points.append((float(pair[0]), value))
            out.append((dict(item.get("metric") or {}), points))
        return out


def _number(pair: Any) -> float | None:
    try:
        value = float(pair[1])
    except (TypeError, ValueError, IndexError):
        return None
    return value if math.isfinite(value) else None
