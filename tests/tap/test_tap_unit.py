"""Tap building blocks without sockets: sampling decision, header rules, framing, counters."""

from __future__ import annotations

import json
import math

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from exporter.metrics.catalog import CATALOG
from exporter.samplers.tap import Sampler, Tap, TapConfig, relay
from exporter.samplers.tap import http as taphttp
from exporter.samplers.tap.exchange import _request_headers, _response_headers
from exporter.samplers.tap.sampling import Capture, CaptureBudget, find_request_id
from exporter.samplers.tap.stats import (
    ABORT_REASONS,
    DROP_REASONS,
    ERROR_STAGES,
    REQUEST_CODES,
    Histogram,
    status_code_label,
)

PATHS = ("/v1/chat/completions", "/generate")


def _bodies(n: int) -> list[bytes]:
    return [
        json.dumps({"messages": [{"content": f"q{i}"}], "stream": i % 2 == 0}).encode()
        for i in range(n)
    ]


def test_sampled_fraction_matches_rate_within_sampling_error() -> None:
    n, rate = 4000, 0.1
    sampler = Sampler(rate, seed=0, paths=PATHS)
    chosen = sum(sampler.decide(b"/v1/chat/completions", b) for b in _bodies(n))
    sd = math.sqrt(n * rate * (1 - rate))
    assert abs(chosen - n * rate) < 4 * sd, chosen


def test_sampling_is_deterministic_and_keyed_by_seed() -> None:
    bodies = _bodies(500)
    a = [Sampler(0.3, 7, PATHS).decide(b"/generate", b) for b in bodies]
    b = [Sampler(0.3, 7, PATHS).decide(b"/generate", b) for b in bodies]
    c = [Sampler(0.3, 8, PATHS).decide(b"/generate", b) for b in bodies]
    assert a == b
    assert a != c
    # the path is part of the hash too
    d = [Sampler(0.3, 7, PATHS).decide(b"/v1/chat/completions", b) for b in bodies]
    assert a != d


def test_incremental_hash_equals_whole_body_decision() -> None:
    """The tap hashes body pieces as they arrive; the decision must not depend on the split."""
    sampler = Sampler(0.5, 3, PATHS)
    for body in _bodies(200):
        capture = Capture(
            sampler.hasher(b"/generate"), limit=1 << 20, budget=CaptureBudget(1 << 30)
        )
        for i in range(0, len(body), 7):
            capture.add_request(body[i : i + 7])
        assert sampler.chosen(capture.hasher) == sampler.decide(b"/generate", body)
        assert b"".join(capture.request) == body


def test_rate_edges_and_candidates() -> None:
    body = b'{"x": 1}'
    assert not Sampler(0.0, 0, PATHS).decide(b"/generate", body)
    assert all(Sampler(1.0, 0, PATHS).decide(b"/generate", b) for b in _bodies(100))
    s = Sampler(0.5, 0, PATHS)
    assert s.is_candidate(b"POST", b"/v1/chat/completions")
    assert s.is_candidate(b"POST", b"/generate?x=1")
    assert not s.is_candidate(b"GET", b"/v1/chat/completions")
    assert not s.is_candidate(b"POST", b"/v1/models")
    assert not Sampler(0.0, 0, PATHS).is_candidate(b"POST", b"/generate")


def test_capture_drops_everything_past_the_size_limit() -> None:
    capture = Capture(
        Sampler(1.0, 0, PATHS).hasher(b"/generate"), limit=10, budget=CaptureBudget(1 << 30)
    )
    capture.add_request(b"12345")
    capture.add_response(b"678")
    assert not capture.overflow
    capture.add_response(b"9abc")
    assert capture.overflow and capture.request == [] and capture.response == []


def test_request_headers_drop_hop_by_hop_and_connection_named() -> None:
    raw = [
        (b"Host", b"x"),
        (b"Connection", b"keep-alive, X-Drop"),
        (b"Keep-Alive", b"timeout=5"),
        (b"X-Drop", b"1"),
        (b"TE", b"trailers"),
        (b"Upgrade", b"websocket"),
        (b"Proxy-Connection", b"keep-alive"),
        (b"Authorization", b"Bearer secret"),
        (b"X-Request-Id", b"rid-1"),
        (b"Expect", b"100-continue"),
        (b"Content-Length", b"3"),
    ]
    out, chunked, rid, expect = _request_headers(raw)
    assert out == [
        (b"Host", b"x"),
        (b"Authorization", b"Bearer secret"),
        (b"X-Request-Id", b"rid-1"),
        (b"Content-Length", b"3"),
    ]
    assert (chunked, rid, expect) == (False, b"rid-1", True)
    out, chunked, _, _ = _request_headers([(b"Transfer-Encoding", b"chunked"), (b"A", b"b")])
    assert chunked and out == [(b"A", b"b")]


def test_response_headers_keep_length_drop_framing() -> None:
    raw = [
        (b"Content-Type", b"text/event-stream"),
        (b"Transfer-Encoding", b"chunked"),
        (b"Content-Length", b"10"),  # invalid together with chunked: chunked wins
        (b"X-Request-Id", b"abc"),
        (b"Connection", b"close"),
    ]
    out, has_length, chunked, ctype, rid, only = _response_headers(raw)
    assert out == [(b"Content-Type", b"text/event-stream"), (b"X-Request-Id", b"abc")]
    assert (has_length, chunked, ctype, rid) == (False, True, b"text/event-stream", b"abc")
    assert not only  # with a Content-Length beside it the C relay leaves the body to llhttp
    out, has_length, chunked, _, _, only = _response_headers([(b"Content-Length", b"10")])
    assert has_length and not chunked and not only and out == [(b"Content-Length", b"10")]


@pytest.mark.parametrize(
    ("codings", "only"),
    [
        ([b"chunked"], True),
        ([b" Chunked "], True),
        ([b"gzip, chunked"], False),  # a coding under the chunks: llhttp's framing, no relay
        ([b"gzip"], False),  # close-delimited for a response (RFC 9112 §6.3)
        ([b"chunked", b"chunked"], False),
        ([b"chunked;x=1"], False),
    ],
)
def test_only_a_lone_chunked_coding_is_relayed(codings: list[bytes], only: bool) -> None:
    raw = [(b"Transfer-Encoding", c) for c in codings]
    assert _response_headers(raw)[5] is only


def test_heads_and_framing() -> None:
    head = taphttp.request_head(b"POST", b"/v1/x?a=1", [(b"A", b"1")], chunked=True)
    assert head == b"POST /v1/x?a=1 HTTP/1.1\r\nA: 1\r\nTransfer-Encoding: chunked\r\n\r\n"
    head = taphttp.response_head(200, b"OK", [(b"B", b"2")], chunked=False, close=True)
    assert head == b"HTTP/1.1 200 OK\r\nB: 2\r\nConnection: close\r\n\r\n"
    assert taphttp.chunk(b"x" * 26) == b"1a\r\n" + b"x" * 26 + b"\r\n"
    assert taphttp.connection_tokens(b"close, X-A ,keep-alive") == {b"x-a"}


def test_error_response_is_short_json_with_length() -> None:
    raw = taphttp.error_response(502, "Bad Gateway", "upstream unreachable", "upstream", False)
    head, body = raw.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 502 Bad Gateway\r\n")
    assert f"Content-Length: {len(body)}".encode() in head
    assert json.loads(body)["error"] == {
        "message": "upstream unreachable",
        "type": "upstream",
        "code": 502,
    }


def test_request_id_from_header_or_body() -> None:
    assert find_request_id(b"rid-9", b'{"id":"chatcmpl-1"}') == "rid-9"
    assert find_request_id(None, b'data: {"id":"chatcmpl-abc","x":1}\n\n') == "chatcmpl-abc"
    assert find_request_id(None, b'{"text":"t","meta_info":{"id":"f00d"}}') == "f00d"
    assert find_request_id(None, b'{"no": "id"}') is None


def test_histogram_is_cumulative_with_inf_equal_to_count() -> None:
    h = Histogram((0.001, 0.01, 0.1))
    for v in (0.0005, 0.001, 0.005, 0.5, 2.0):
        h.observe(v)
    assert h.buckets() == [("0.001", 2), ("0.01", 3), ("0.1", 3), ("+Inf", 5)]
    assert h.total == pytest.approx(2.5065)


def test_status_labels_are_bounded() -> None:
    labels = [status_code_label(s) for s in (101, 200, 204, 304, 429, 500, 503, 999)]
    assert labels == ["1xx", "2xx", "2xx", "3xx", "4xx", "5xx", "5xx", "5xx"]


def test_config_validation() -> None:
    with pytest.raises(ValueError):
        TapConfig(upstream="https://x:1")
    with pytest.raises(ValueError):
        TapConfig(sample_rate=1.5)
    with pytest.raises(ValueError):
        TapConfig(queue_size=0)
    cfg = TapConfig(upstream="http://sglang:30000/ignored")
    assert (cfg.upstream_host, cfg.upstream_port) == ("sglang", 30000)


def test_collector_exports_every_tap_metric_zero_initialised() -> None:
    tap = Tap(TapConfig())
    registry = CollectorRegistry()
    registry.register(tap)
    text = generate_latest(registry).decode()
    tap_specs = [s for s in CATALOG.values() if s.area == "tap"]
    assert {s.name for s in tap_specs} >= {
        "dsv4_tap_requests_total",
        "dsv4_tap_inflight_requests",
        "dsv4_tap_added_latency_seconds",
        "dsv4_tap_sampled_total",
        "dsv4_tap_sampling_errors_total",
    }
    for spec in tap_specs:
        kind = "gauge" if spec.kind == "info" else spec.kind  # the text format has no info
        assert f"# TYPE {spec.name} {kind}" in text, spec.name
    assert f'dsv4_tap_build_info{{relay="{relay.KERNEL}"}} 1.0' in text
    for code in REQUEST_CODES:
        assert f'dsv4_tap_requests_total{{code="{code}"}} 0.0' in text
    for reason in ABORT_REASONS:
        assert f'dsv4_tap_aborted_total{{reason="{reason}"}} 0.0' in text
    for reason in DROP_REASONS:
        assert f'dsv4_tap_samples_dropped_total{{reason="{reason}"}} 0.0' in text
    for stage in ERROR_STAGES:
        assert f'dsv4_tap_sampling_errors_total{{stage="{stage}"}} 0.0' in text
    assert 'dsv4_tap_added_latency_seconds_bucket{le="+Inf"} 0.0' in text
