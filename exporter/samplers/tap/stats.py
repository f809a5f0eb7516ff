"""The tap's own counters, kept as plain ints on the event loop and turned into metric families
only at scrape time, so the per-request cost is a few dict increments."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator

from prometheus_client.core import Metric

from exporter.metrics import catalog
from exporter.samplers.tap import relay

# Bounded label values (documented in the catalog); all start at zero.
REQUEST_CODES = (
    "1xx",
    "2xx",
    "3xx",
    "4xx",
    "5xx",
    "400_bad_request",
    "408_request_timeout",
    "501_not_implemented",
    "502_upstream_unreachable",
    "502_upstream_failed",
    "503_too_many_connections",
    "504_upstream_timeout",
    "client_closed",
)
STATUS_CLASS = {1: "1xx", 2: "2xx", 3: "3xx", 4: "4xx", 5: "5xx"}
ABORT_REASONS = ("upstream_reset", "client_disconnect", "upstream_timeout", "client_send_timeout")
# Why the tap refused a client's request itself (docs/tap.md, "Hostile input").
REJECT_REASONS = (
    "malformed_head",  # llhttp could not parse the request line or headers
    "head_too_large",  # request line + headers over max_header_bytes
    "bad_version",  # not HTTP/1.1 or HTTP/1.0 (no version, HTTP/0.9, 2.0, RTSP...)
    "bad_target",  # a path nginx refuses: bad %-escape, %00, dot segments above the root
    "bad_host",  # not exactly one Host header, or an invalid one (RFC 9112 §3.2)
    "bad_connection",  # Connection names a header the tap frames by (Content-Length...)
    "bad_transfer_encoding",  # Transfer-Encoding whose final coding is not chunked (§6.1)
    "unsupported_transfer_coding",  # a coding besides chunked (gzip, ...): 501
    "bad_chunked_body",  # body framing broke after the head went to SGLang
    "body_timeout",  # request body stalled for client_idle_timeout
    "junk_after_request",  # unparseable bytes pipelined after a complete request
    "pipelined_after_chunked",  # a request in the same read as a chunked body's end
    "too_many_connections",  # over max_connections: 503
    "too_many_client_connections",  # over max_connections_per_client from one address: 503
)
# Why an SGLang connection was closed instead of pooled, besides the ordinary reasons
# (not keep-alive, paused, unfinished): bytes past a complete response (a body after a HEAD
# response included), a response head over max_header_bytes, more 1xx than MAX_INTERIM.
UPSTREAM_DISCARD_REASONS = ("extra_bytes", "response_head_too_large", "too_many_interim")
# not_ok / incomplete: the grading hand-off takes only complete HTTP 200 answers;
# sidecar_*: the tap in its own process could not hand a sample to the sidecar (forward.py)
DROP_REASONS = (
    "queue_full",
    "too_large",
    "capture_budget",
    "not_ok",
    "incomplete",
    "sidecar_unavailable",
    "sidecar_refused",
)
ERROR_STAGES = ("capture", "consumer")


def status_code_label(status: int) -> str:
    """The ``code`` label of a forwarded status: its class, so the label set stays bounded."""
    return STATUS_CLASS.get(status // 100, "5xx")


class Histogram:
    """Cumulative-on-read histogram: one bisect and two adds per observation."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = tuple(sorted(bounds))
        self.counts = [0] * (len(self.bounds) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    def buckets(self) -> list[tuple[str, int]]:
        """(le, cumulative count) pairs ending with +Inf, as HistogramMetricFamily takes them."""
        out: list[tuple[str, int]] = []
        running = 0
        for bound, count in zip(self.bounds, self.counts, strict=False):
            running += count
            out.append((repr(float(bound)), running))
        out.append(("+Inf", running + self.counts[-1]))
        return out


class TapStats:
    """Everything the tap exports; mutated only from the event loop thread."""

    def __init__(self) -> None:
        self.requests = dict.fromkeys(REQUEST_CODES, 0)
        self.aborted = dict.fromkeys(ABORT_REASONS, 0)
        self.rejected = dict.fromkeys(REJECT_REASONS, 0)
        self.dropped = dict.fromkeys(DROP_REASONS, 0)
        self.errors = dict.fromkeys(ERROR_STAGES, 0)
        self.upstream_discarded = dict.fromkeys(UPSTREAM_DISCARD_REASONS, 0)
        self.sampled = 0
        self.inflight = 0
        self.upstream_connections = 0
        self.added_latency = Histogram(catalog.TAP_ADDED_LATENCY.buckets)

    def collect(self) -> Iterator[Metric]:
        """Fresh families from the current values (no I/O; safe to call from a scrape)."""
        for spec, values in (
            (catalog.TAP_REQUESTS, self.requests),
            (catalog.TAP_ABORTED, self.aborted),
            (catalog.TAP_REJECTED, self.rejected),
            (catalog.TAP_SAMPLES_DROPPED, self.dropped),
            (catalog.TAP_SAMPLING_ERRORS, self.errors),
            (catalog.TAP_UPSTREAM_DISCARDED, self.upstream_discarded),
        ):
            fam = spec.family()
            for label, value in list(values.items()):
                fam.add_metric([label], value)
            yield fam
        for spec, value in (
            (catalog.TAP_SAMPLED, self.sampled),
            (catalog.TAP_UPSTREAM_CONNECTIONS, self.upstream_connections),
            (catalog.TAP_INFLIGHT, self.inflight),
        ):
            fam = spec.family()
            fam.add_metric([], value)
            yield fam
        yield catalog.TAP_BUILD_INFO.info({"relay": relay.KERNEL})
        hist = catalog.TAP_ADDED_LATENCY.family()
        buckets = self.added_latency.buckets()
        hist.add_metric([], buckets, sum_value=self.added_latency.total)
        yield hist
