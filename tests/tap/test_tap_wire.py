"""The tap's framing rules without sockets: bytes in, bytes out (issue 36, item 3).

The tap's protocol classes run between in-memory transports (tests/tap/wire.py, as uvicorn
tests its protocols with a mock transport): no port, no subprocess, no timer, so this module
runs in seconds and belongs to ``make test-fast``. It checks:

* every rule the tap refuses a request by (``dsv4_tap_rejected_total``'s reasons): the
  request's bytes, the answer's status, the reason counted, and what reached SGLang;
* the differential suite's corpus (tests/tap/framing_cases.py, about 600 framings), with the
  invariants that need no reference proxy: a client gets only answers to its own requests,
  SGLang gets only requests it parses and can attribute, a victim on a new connection after
  each case gets exactly its own response, and on well-formed traffic everything is
  forwarded exactly as a strict llhttp parse of the client's bytes reads it.

The comparison with nginx (what the tap may forward at most) stays in
tests/tap/test_framing_differential.py, over real sockets (``e2e``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest

from exporter.samplers.tap.stats import REJECT_REASONS
from tests.tap.answers import CASE_TAG, VICTIM_TAG, answer_problems, parse_responses
from tests.tap.framing_cases import Case, build_corpus
from tests.tap.logging_upstream import parse_requests
from tests.tap.wire import Wire

H = b"Host: example\r\n"
CHUNKED_HEAD = b"POST /c HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n"


def statuses(raw: bytes) -> list[int]:
    responses, problem = parse_responses(raw)
    assert problem is None, (problem, raw)
    return [r.status for r in responses]


@dataclass(frozen=True)
class Rule:
    """One refusal: the client's reads, the statuses it gets, the reason counted, and the
    urls of the requests SGLang receives complete."""

    name: str
    writes: tuple[bytes, ...]
    statuses: tuple[int, ...]
    reason: str
    forwarded: tuple[bytes, ...] = ()
    config: dict[str, Any] = field(default_factory=dict)


RULES = [
    Rule("header_without_colon", (b"GET /x HTTP/1.1\r\n" + H + b"Bad Header\r\n\r\n",), (400,),
         "malformed_head"),
    Rule("content_length_and_chunked",
         (b"POST /x HTTP/1.1\r\n" + H + b"Content-Length: 5\r\nTransfer-Encoding: chunked"
          b"\r\n\r\n0\r\n\r\n",), (400,), "malformed_head"),
    Rule("two_content_lengths",
         (b"POST /x HTTP/1.1\r\n" + H + b"Content-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",),
         (400,), "malformed_head"),
    Rule("tab_in_content_length",
         (b"POST /x HTTP/1.1\r\n" + H + b"Content-Length:\t5\r\n\r\nhello",), (400,),
         "malformed_head"),
    Rule("head_over_the_limit",
         (b"GET /x HTTP/1.1\r\n" + H + b"X-Pad: " + b"a" * 2000 + b"\r\n\r\n",), (400,),
         "head_too_large", config={"max_header_bytes": 1024}),
    Rule("http2_request_line", (b"GET /x HTTP/2.0\r\n" + H + b"\r\n",), (400,), "bad_version"),
    Rule("http09_request_line", (b"GET /x\r\n\r\n",), (400,), "bad_version"),
    Rule("bad_percent_escape", (b"GET /%zz HTTP/1.1\r\n" + H + b"\r\n",), (400,), "bad_target"),
    Rule("dot_segments_above_root", (b"GET /a/../../x HTTP/1.1\r\n" + H + b"\r\n",), (400,),
         "bad_target"),
    Rule("no_host", (b"GET /x HTTP/1.1\r\n\r\n",), (400,), "bad_host"),
    Rule("two_hosts", (b"GET /x HTTP/1.1\r\n" + H + b"Host: other\r\n\r\n",), (400,), "bad_host"),
    Rule("http10_without_host", (b"GET /x HTTP/1.0\r\n\r\n",), (400,), "bad_host"),
    Rule("connection_names_content_length",
         (b"GET /x HTTP/1.1\r\n" + H + b"Connection: content-length\r\n\r\n",), (400,),
         "bad_connection"),
    Rule("transfer_encoding_not_chunked",
         (b"POST /x HTTP/1.1\r\n" + H + b"Transfer-Encoding: xchunked\r\n\r\n0\r\n\r\n",),
         (400,), "bad_transfer_encoding"),
    Rule("empty_coding_before_chunked",
         (b"POST /x HTTP/1.1\r\n" + H + b"Transfer-Encoding: , chunked\r\n\r\n0\r\n\r\n",),
         (400,), "bad_transfer_encoding"),
    Rule("tab_in_transfer_encoding",
         (b"POST /x HTTP/1.1\r\n" + H + b"Transfer-Encoding:\tchunked\r\n\r\n0\r\n\r\n",),
         (400,), "bad_transfer_encoding"),
    Rule("gzip_then_chunked",
         (b"POST /x HTTP/1.1\r\n" + H + b"Transfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",),
         (501,), "unsupported_transfer_coding"),
    # the head and first chunk went to SGLang; its connection is aborted, nothing completes
    Rule("bad_chunk_size_after_the_head_went_up", (CHUNKED_HEAD + b"5\r\nhello\r\n", b"ZZZ\r\n"),
         (400,), "bad_chunked_body"),
    Rule("junk_after_a_request", (b"GET /x HTTP/1.1\r\n" + H + b"\r\n\x00\x01GARBAGE\r\n\r\n",),
         (200, 400), "junk_after_request", (b"/x",)),
    Rule("request_after_a_chunked_body_in_one_read",
         (CHUNKED_HEAD + b"0\r\n\r\nGET /y HTTP/1.1\r\n" + H + b"\r\n",), (200, 400),
         "pipelined_after_chunked", (b"/c",)),
]  # fmt: skip


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.name)
def test_each_framing_rule_refuses_its_request(rule: Rule) -> None:
    async def scenario() -> None:
        wire = Wire(**rule.config)
        client = await wire.exchange(*rule.writes)
        assert statuses(bytes(client.received)) == list(rule.statuses)
        assert client.received.rstrip().endswith(b'"code":%d}}' % rule.statuses[-1])
        assert client.eof, "a refusal closes the connection"
        assert wire.rejected() == {rule.reason: 1}
        assert tuple(r.url for r in wire.upstream.received()) == rule.forwarded
        assert wire.upstream.parse_errors == 0
        assert wire.stats.inflight == 0 and wire.upstream.open == wire.core.pool.idle_count

    asyncio.run(scenario())


def test_connection_limits_answer_503() -> None:
    async def scenario() -> None:
        wire = Wire(max_connections=2, max_connections_per_client=1)
        first, _ = wire.connect("192.0.2.1")
        same, _ = wire.connect("192.0.2.1")
        other, _ = wire.connect("192.0.2.2")
        full, _ = wire.connect("192.0.2.3")
        await wire.settle()
        assert statuses(bytes(same.received)) == [503] and same.eof
        assert statuses(bytes(full.received)) == [503] and full.eof
        assert not first.received and not other.received
        assert wire.rejected() == {"too_many_client_connections": 1, "too_many_connections": 1}

    asyncio.run(scenario())


def test_a_stalled_body_is_answered_408_and_its_sglang_connection_aborted() -> None:
    """What the sweep does once client_idle_timeout passed (``body_stalled``), without the
    wait: the time rule itself is tests/hostile/test_tap_framing.py's."""

    async def scenario() -> None:
        wire = Wire()
        client, conn = wire.connect()
        client.send(b"POST /x HTTP/1.1\r\n" + H + b"Content-Length: 10\r\n\r\nhel")
        await wire.settle()
        assert wire.upstream.open == 1
        conn.body_stalled()
        await wire.settle()
        assert statuses(bytes(client.received)) == [408] and client.eof
        assert wire.rejected() == {"body_timeout": 1}
        assert wire.upstream.open == 0 and not wire.upstream.received()

    asyncio.run(scenario())


def test_every_refusal_reason_has_a_case_here() -> None:
    covered = {r.reason for r in RULES}
    covered |= {"too_many_connections", "too_many_client_connections", "body_timeout"}
    assert covered == set(REJECT_REASONS)


# --- the corpus --------------------------------------------------------------------------------

PLAIN = (
    "pipe_two_gets", "pipe_three_mixed", "pipe_five_gets", "pipe_two_posts", "pipe_twenty_gets",
    "split_head_mid_line", "split_between_cr_lf", "split_before_final_crlf", "split_body",
    "split_second_request", "byte_at_a_time", "body_hides_request",
)  # fmt: skip


@dataclass
class CorpusRun:
    clients: dict[int, bytes]
    victims: dict[int, list[tuple[bytes, bytes]]]
    wire: Wire


async def _run_corpus(cases: list[Case]) -> CorpusRun:
    wire = Wire()
    clients: dict[int, bytes] = {}
    victims: dict[int, list[tuple[bytes, bytes]]] = {}
    for case in cases:
        client = await wire.exchange(*case.writes)
        client.close()
        await wire.settle()
        clients[case.id] = bytes(client.received)
        for n in range(2):
            url = b"/v%04d/%d" % (case.id, n)
            victim = await wire.exchange(b"GET " + url + b" HTTP/1.1\r\nHost: victim\r\n\r\n")
            victim.close()
            await wire.settle()
            victims.setdefault(case.id, []).append((url, bytes(victim.received)))
    return CorpusRun(clients, victims, wire)


@pytest.fixture(scope="module")
def corpus() -> CorpusRun:
    return asyncio.run(_run_corpus(build_corpus()))


def test_clients_get_only_answers_to_their_own_requests(corpus: CorpusRun) -> None:
    bad = []
    for case in build_corpus():
        bad += [f"{case.name}: {p}" for p in answer_problems(corpus.clients[case.id], case.id)]
    assert not bad, "\n".join(bad)


def test_victims_get_exactly_their_own_response(corpus: CorpusRun) -> None:
    bad = []
    for case in build_corpus():
        for url, raw in corpus.victims[case.id]:
            responses, problem = parse_responses(raw)
            if problem is not None or len(responses) != 1 or responses[0].echo_url() != url:
                bad.append(f"after {case.name}: victim {url!r} got {raw[:300]!r}")
    assert not bad, "\n".join(bad)


def test_sglang_gets_only_requests_it_parses_and_can_attribute(corpus: CorpusRun) -> None:
    upstream = corpus.wire.upstream
    untagged = [
        r.key
        for r in upstream.received()
        if not (CASE_TAG.search(r.url) or VICTIM_TAG.search(r.url) or r.case)
    ]
    assert upstream.parse_errors == 0 and not untagged, (upstream.parse_errors, untagged)


def test_well_formed_traffic_is_forwarded_as_llhttp_reads_it(corpus: CorpusRun) -> None:
    """Guards the invariants above against a tap that forwards nothing: on well-formed
    framings (and the product's baseline, case 1) every request reaches SGLang as written."""
    chosen = [c for c in build_corpus() if c.name in PLAIN or c.id == 1]
    assert len(chosen) == len(PLAIN) + 1
    by_case: dict[int, list[tuple[bytes, bytes, bytes]]] = {}
    for r in corpus.wire.upstream.received():
        m = CASE_TAG.search(r.url)
        if m is not None:
            by_case.setdefault(int(m.group(1)), []).append(r.key)
    for case in chosen:
        written, error = parse_requests(case.raw)
        assert error is None, case.name
        assert by_case.get(case.id) == [(m, u, b) for m, u, b, _ in written], case.name
        assert written[-1][1].endswith(b"/end"), case.name
        assert statuses(corpus.clients[case.id]) == [200] * len(written), case.name


def test_nothing_is_left_in_flight_after_the_corpus(corpus: CorpusRun) -> None:
    """Every case ran to its end (settle() runs the loop until nothing is pending; no case's
    outcome depends on a wait) and released what it held."""
    assert corpus.wire.stats.inflight == 0
    assert corpus.wire.upstream.open == corpus.wire.core.pool.idle_count
