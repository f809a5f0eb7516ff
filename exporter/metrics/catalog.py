"""Every metric the sidecar exports, in one place.

Each :class:`MetricSpec` names a metric once; collectors build fresh families from it at
scrape time (``spec.family()``), and ``docs/metrics.md`` is generated from this module, so a
name cannot be exported without being documented. Names follow the Prometheus conventions:
one ``dsv4_`` prefix, base units, counters end in ``_total``, identity in ``*_info``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)

Kind = Literal["gauge", "counter", "histogram", "info"]


@dataclass(frozen=True)
class MetricSpec:
    """One exported metric: name (as scraped), kind, help, label names, and where it comes from."""

    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...] = ()
    area: str = ""
    buckets: tuple[float, ...] = field(default=())

    def __post_init__(self) -> None:
        if not self.name.startswith("dsv4_"):
            raise ValueError(f"{self.name}: every exported name starts with dsv4_")
        if self.kind == "counter" and not self.name.endswith("_total"):
            raise ValueError(f"{self.name}: counters end in _total")
        if self.kind == "info" and not self.name.endswith("_info"):
            raise ValueError(f"{self.name}: info metrics end in _info")

    @property
    def family_name(self) -> str:
        """The name prometheus_client's family classes take (suffix added back on render)."""
        if self.kind == "counter":
            return self.name.removesuffix("_total")
        if self.kind == "info":
            return self.name.removesuffix("_info")
        return self.name

    def family(self, labels: Sequence[str] | None = None) -> Metric:
        """A fresh, empty family for this spec; ``add_metric`` label values in spec order."""
        names = list(self.labels if labels is None else labels)
        if self.kind == "gauge":
            return GaugeMetricFamily(self.family_name, self.help, labels=names)
        if self.kind == "counter":
            return CounterMetricFamily(self.family_name, self.help, labels=names)
        if self.kind == "histogram":
            return HistogramMetricFamily(self.family_name, self.help, labels=names)
        return InfoMetricFamily(self.family_name, self.help, labels=[])

    def info(self, values: dict[str, str]) -> Metric:
        """An ``*_info`` series of value 1 carrying identity labels (rendered as a gauge in the
        text format and as an info metric in OpenMetrics, by prometheus_client)."""
        fam = InfoMetricFamily(self.family_name, self.help)
        fam.add_metric([], {k: str(values.get(k, "")) for k in self.labels})
        return fam


CATALOG: dict[str, MetricSpec] = {}


def _m(
    name: str,
    kind: Kind,
    help: str,
    labels: Sequence[str] = (),
    area: str = "",
    buckets: Sequence[float] = (),
) -> MetricSpec:
    if name in CATALOG:
        raise ValueError(f"duplicate metric {name}")
    spec = MetricSpec(name, kind, help, tuple(labels), area, tuple(buckets))
    CATALOG[name] = spec
    return spec


# --- sidecar self --------------------------------------------------------------------------
BUILD_INFO = _m(
    "dsv4_sidecar_build_info",
    "info",
    "Sidecar version and Python version (value 1).",
    ("version", "python"),
    "sidecar",
)
SOURCE_UP = _m(
    "dsv4_source_up",
    "gauge",
    "1 when the named source's last poll succeeded, 0 when it is down (see its errors).",
    ("source",),
    "sidecar",
)

# --- tap -----------------------------------------------------------------------------------
# The pass-through tap (exporter/samplers/tap): label values are fixed sets defined in
# exporter/samplers/tap/stats.py and zero-initialised at start, so a dead path still shows.
TAP_REQUESTS = _m(
    "dsv4_tap_requests_total",
    "counter",
    "Requests the tap finished, by `code`: `1xx`..`5xx` = status class forwarded from SGLang "
    "(also when the body was later cut short); `400_bad_request` = malformed client request "
    "answered by the tap; `502_upstream_unreachable` = connecting to SGLang failed; "
    "`502_upstream_failed` = SGLang closed or broke the connection before a response head; "
    "`client_closed` = the client left before any response head.",
    ("code",),
    "tap",
)
TAP_ABORTED = _m(
    "dsv4_tap_aborted_total",
    "counter",
    "Requests that ended without a complete response, by `reason`: `upstream_reset` (SGLang "
    "closed mid-body; the client got the bytes so far, then a closed connection) or "
    "`client_disconnect` (client left; the upstream request was cancelled at once).",
    ("reason",),
    "tap",
)
TAP_INFLIGHT = _m(
    "dsv4_tap_inflight_requests",
    "gauge",
    "Requests inside the tap now (head received, response not finished); the value each "
    "sample records as its concurrency.",
    (),
    "tap",
)
TAP_ADDED_LATENCY = _m(
    "dsv4_tap_added_latency_seconds",
    "histogram",
    "Latency the tap adds per proxied request, measured in-process: (start of the client read "
    "completing the request head -> head written to SGLang, including any connect) + (start of "
    "the SGLang read completing the response head -> head written to the client). Excludes "
    "kernel and event-loop queueing before the tap's callbacks run and per-chunk forwarding "
    "(see docs/tap.md); responses the tap generates itself are not observed.",
    (),
    "tap",
    (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 1.0),
)
TAP_SAMPLED = _m(
    "dsv4_tap_sampled_total",
    "counter",
    "Responses selected by the sampler (deterministic request hash) and handed to the grading "
    "queue; selected responses that were dropped are in dsv4_tap_samples_dropped_total.",
    (),
    "tap",
)
TAP_SAMPLES_DROPPED = _m(
    "dsv4_tap_samples_dropped_total",
    "counter",
    "Selected responses not handed to grading, by `reason`: `queue_full` (consumer behind) or "
    "`too_large` (request + response over the tap's max_sample_bytes).",
    ("reason",),
    "tap",
)
TAP_SAMPLING_ERRORS = _m(
    "dsv4_tap_sampling_errors_total",
    "counter",
    "Errors in the sampling side path, by `stage`: `capture` (building a sample) or `consumer` "
    "(the grading callback raised). Never affects a response.",
    ("stage",),
    "tap",
)
TAP_UPSTREAM_CONNECTIONS = _m(
    "dsv4_tap_upstream_connections_total",
    "counter",
    "Connections the tap opened to SGLang; growing much faster than requests means the "
    "keep-alive pool is not reused.",
    (),
    "tap",
)
