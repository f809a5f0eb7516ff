"""Differential framing suite (issue 22, item 5): the tap against nginx, on a generated corpus.

Every case of :mod:`tests.tap.framing_cases` (about 600 request framings) is written on raw
sockets through three proxies in the same run, each in front of its own
:class:`~tests.tap.logging_upstream.LoggingUpstream` (which records every byte it receives):

* **nginx** from Debian, a plain reverse proxy (``proxy_http_version 1.1``, ``Connection ""``,
  an upstream ``keepalive`` pool, ``client_max_body_size 0`` and header buffers that cover the
  tap's 64 KiB head limit; everything else nginx's defaults, request buffering included);
* the **standalone tap**, ``python -m exporter.samplers.tap --upstream URL --print-port``
  (uvloop, default TapConfig);
* the **sidecar's tap**, ``dsv4-sidecar serve --tap-port N`` with the logging upstream as its
  SGLang URL (``--gpu-backend fake --canary false``, as tests/sampling run it, but as the real
  CLI subprocess). Its SGLang pollers also reach that upstream (``/server_info``, ``/metrics``,
  ...): they get the echo answer, the sources read "down", which does not touch the tap; their
  requests carry no case tag and their connections are ignored.

For every case, against nginx as the reference:

1. the complete requests (method, url, body: proxies re-frame headers, so headers are not
   compared) that reached the upstream through the tap equal those that reached it through
   nginx, or are a prefix of them, possibly empty (the tap may be stricter, never looser: no
   request nginx treats as one reaches SGLang as two, none nginx refuses reaches it at all);
2. every response the case's client gets answers one of its own requests (the echoed url
   carries its tag) or is the proxy's own error answer, and parses as HTTP/1.1;
3. after each case two victims, each on a new connection to the same proxy, send
   ``GET /v{tag}/{n}`` and must get exactly the response echoing their own url, nothing glued
   after it (the original bug: a smuggled response delivered to the next client on a pooled
   upstream connection).

The upstream's evidence is not what it answered but its raw bytes, re-parsed strictly per
connection (llhttp, as SGLang's uvicorn uses) after the run. Cases end deterministically where
they can (a final ``Connection: close`` sentinel, or the proxy closing); a case left waiting
(a body that never ends) is cut after a bounded idle wait, which only limits what is checked
for it, never decides a verdict. Nothing here asserts on timing.

References used for the case shapes and the expected framing:

* RFC 9112 (HTTP/1.1): §2.2 message parsing (bare CR, leading empty lines, obs-fold at the
  start), §3 request line, §3.2 request target and Host, §6.1 Transfer-Encoding (chunked last,
  HTTP/1.0), §6.3 message body length (CL with TE, invalid or duplicate CL), §7.1 chunked
  coding (chunk size, extensions, trailers), §9.3 persistence and pipelining;
* RFC 9110 §7.6.1 Connection (options naming fields; hop-by-hop removal);
* James Kettle (PortSwigger Research), "HTTP Desync Attacks: Request Smuggling Reborn" (2019)
  and "HTTP/2: The Sequel is Always Worse": the CL.TE / TE.CL / TE.TE layouts and the
  Transfer-Encoding obfuscations;
* defparam's smuggler.py: the Transfer-Encoding mutation families (spacing, tabs, vertical
  tab, quoting, high bytes, line folding, duplicated headers);
* the HTTP Garden (Ben Kallus et al., differential HTTP fuzzing of origin servers and proxies):
  differential comparison of what a proxy forwards with what a reference parser accepts, and
  its bare-LF, NUL, chunk-extension and trailer cases;
* the Connection-header hop-by-hop stripping abuse (Nathan Davison, "Abusing HTTP hop-by-hop
  request headers").

No code was copied from any of them; the cases are written from their descriptions.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support import require, serve_argv, spawn_listening
from tests.tap.answers import CASE_TAG, VICTIM_TAG, answer_problems, parse_responses
from tests.tap.framing_cases import Case, build_corpus
from tests.tap.logging_upstream import LoggingUpstream, Received
from tests.tap.support import settle

pytestmark = pytest.mark.e2e

PROXIES = ("nginx", "tap", "serve")
TAPS = ("tap", "serve")
CONCURRENCY = 16  # cases in flight per proxy
VICTIMS = 2  # clients on new connections after each case
IDLE = 3.0  # a case's client stops reading after this long without a byte (bound, no verdict)
VICTIM_TIMEOUT = 10.0

NGINX_CONF = """\
worker_processes 1;
daemon off;
master_process off;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
    client_header_buffer_size 64k;
    large_client_header_buffers 8 128k;
    client_max_body_size 0;
    upstream logging {{
        server 127.0.0.1:{upstream};
        keepalive 32;
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://logging;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }}
    }}
}}
"""


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


async def start_nginx(
    nginx: str, upstream_port: int, tmp: Path, procs: list[subprocess.Popen]
) -> int:
    """nginx (NGINX_CONF) in front of ``upstream_port``, added to ``procs``; its port. nginx
    cannot report a port 0, so it takes a picked one, again on a new one if it lost it."""
    conf = tmp / "nginx.conf"

    def start(port: int) -> subprocess.Popen[bytes]:
        conf.write_text(NGINX_CONF.format(tmp=tmp, upstream=upstream_port, port=port))
        return subprocess.Popen(
            [nginx, "-p", str(tmp), "-c", str(conf), "-e", str(tmp / "error.log")],
            stdout=subprocess.DEVNULL,
            stderr=(tmp / "nginx.stderr").open("wb"),
        )

    proc, (port,) = await asyncio.to_thread(spawn_listening, start, _accepts, timeout=30)
    procs.append(proc)
    return port


async def start_tap(upstream_port: int, tmp: Path, procs: list[subprocess.Popen]) -> int:
    """The standalone tap in front of ``upstream_port``, added to ``procs``; its port."""
    tap = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "exporter.samplers.tap",
            "--upstream",
            f"http://127.0.0.1:{upstream_port}",
            "--print-port",
        ],
        stdout=subprocess.PIPE,
        stderr=(tmp / "tap.stderr").open("wb"),
    )
    procs.append(tap)
    assert tap.stdout is not None
    line = await asyncio.to_thread(tap.stdout.readline)
    if not line.strip():
        raise RuntimeError(f"the tap did not start: {(tmp / 'tap.stderr').read_text()}")
    return int(line)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@dataclass
class VictimResult:
    url: bytes
    raw: bytes
    error: str | None  # None: exactly its own 200 response and nothing after it


@dataclass
class ProxyRun:
    name: str
    upstream: LoggingUpstream
    port: int = 0
    client: dict[int, bytes] = field(default_factory=dict)  # case id -> bytes received
    victims: dict[int, list[VictimResult]] = field(default_factory=dict)
    received: list[Received] = field(default_factory=list)


async def _read_until_idle(reader: asyncio.StreamReader, until: int | None = None) -> bytes:
    """Everything until EOF or ``IDLE`` seconds without a byte; with ``until``, stop once that
    many complete responses arrived."""
    data = b""
    while True:
        if until is not None and len(parse_responses(data)[0]) >= until:
            return data
        try:
            piece = await asyncio.wait_for(reader.read(65536), IDLE)
        except (asyncio.TimeoutError, ConnectionError, OSError):
            return data
        if not piece:
            return data
        data += piece


async def drive_case(port: int, case: Case) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    data = b""
    try:
        try:
            for piece in case.writes:
                writer.write(piece)
                await writer.drain()
        except (ConnectionError, OSError):
            pass  # the proxy refused and closed before the last write: read what it said
        if case.close_after == 0:
            return b""
        data = await _read_until_idle(reader, case.close_after)
    finally:
        writer.transport.abort()
    return data


async def drive_victim(port: int, url: bytes) -> VictimResult:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    raw = b""
    error: str | None = None
    try:
        writer.write(b"GET " + url + b" HTTP/1.1\r\nHost: victim\r\n\r\n")
        await writer.drain()
        deadline = time.monotonic() + VICTIM_TIMEOUT
        while True:
            responses, problem = parse_responses(raw)
            if responses or problem is not None:
                break
            left = deadline - time.monotonic()
            if left <= 0:
                error = "no complete response"
                break
            try:
                piece = await asyncio.wait_for(reader.read(65536), left)
            except (asyncio.TimeoutError, ConnectionError, OSError) as exc:
                error = f"no complete response ({type(exc).__name__})"
                break
            if not piece:
                error = "connection closed before a complete response"
                break
            raw += piece
    finally:
        writer.transport.abort()
    if error is None:
        responses, problem = parse_responses(raw)
        if problem is not None:
            error = f"unparseable: {problem}"
        elif len(responses) != 1:
            error = f"{len(responses)} responses glued together"
        elif responses[0].status != 200 or responses[0].echo_url() != url:
            error = f"got status {responses[0].status} echoing {responses[0].echo_url()!r}"
    return VictimResult(url, raw, error)


async def _run_proxy(run: ProxyRun, cases: list[Case]) -> None:
    sem = asyncio.Semaphore(CONCURRENCY)

    async def one(case: Case) -> None:
        async with sem:
            run.client[case.id] = await drive_case(run.port, case)
            run.victims[case.id] = [
                await drive_victim(run.port, f"/v{case.tag}/{n}".encode()) for n in range(VICTIMS)
            ]

    await asyncio.gather(*(one(c) for c in cases))


@contextlib.asynccontextmanager
async def _proxies(tmp: Path, nginx: str) -> AsyncIterator[dict[str, ProxyRun]]:
    runs = {name: ProxyRun(name, LoggingUpstream()) for name in PROXIES}
    ports = {name: await run.upstream.start() for name, run in runs.items()}
    procs: list[subprocess.Popen[bytes]] = []
    try:
        runs["nginx"].port = await start_nginx(nginx, ports["nginx"], tmp, procs)
        runs["tap"].port = await start_tap(ports["tap"], tmp, procs)

        def serve(tap_port: int) -> subprocess.Popen[bytes]:
            return subprocess.Popen(
                serve_argv(
                    f"http://127.0.0.1:{ports['serve']}", "--port", "0", "--tap-port", str(tap_port)
                ),
                stdout=subprocess.DEVNULL,
                stderr=(tmp / "serve.stderr").open("wb"),
            )

        proc, (runs["serve"].port,) = await asyncio.to_thread(spawn_listening, serve, _accepts)
        procs.append(proc)
        yield runs
    finally:
        for proc in procs:
            await asyncio.to_thread(_stop, proc)
        # every proxy has exited, so every connection it had to the upstream is closed: what
        # the upstream logged is now all it will ever receive
        for run in runs.values():
            await settle(lambda run=run: run.upstream.open == 0)
            run.received = run.upstream.received()
            await run.upstream.stop()


@dataclass
class Outcome:
    cases: list[Case]
    runs: dict[str, ProxyRun]
    seconds: float

    def requests(self, proxy: str, case: Case) -> list[tuple[bytes, bytes, bytes]]:
        return [r.key for r in self.runs[proxy].received if case_of(r) == case.id]


def case_of(r: Received) -> int | None:
    """The case a request the upstream received belongs to (url tag, else X-Case)."""
    m = CASE_TAG.search(r.url)
    if m is not None:
        return int(m.group(1))
    return int(r.case) if r.case.isdigit() else None


def _run_all(tmp: Path, nginx: str) -> Outcome:
    cases = build_corpus()

    async def scenario() -> Outcome:
        t0 = time.monotonic()
        async with _proxies(tmp, nginx) as runs:
            await asyncio.gather(*(_run_proxy(run, cases) for run in runs.values()))
        return Outcome(cases, runs, time.monotonic() - t0)

    return asyncio.run(asyncio.wait_for(scenario(), 600))


@pytest.fixture(scope="module")
def outcome(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Outcome]:
    # nginx is one of the three parsers compared: without it locally a skip, in CI a failure.
    yield _run_all(tmp_path_factory.mktemp("framing"), require("nginx"))


def _show(case: Case) -> str:
    raw = case.raw
    shown = raw if len(raw) <= 600 else raw[:600] + b"...(%d bytes)" % len(raw)
    return f"case {case.id} {case.name}: {shown!r}"


def _keys(reqs: list[tuple[bytes, bytes, bytes]]) -> list[str]:
    return [f"{m.decode()} {u.decode('latin-1')} body={b[:80]!r}" for m, u, b in reqs]


# --- the assertions ---------------------------------------------------------------------------


def test_corpus_is_large_generated_and_deterministic() -> None:
    cases = build_corpus()
    assert len(cases) >= 300
    assert [c.writes for c in cases] == [c.writes for c in build_corpus()]
    assert len({c.id for c in cases}) == len(cases) == len({c.name for c in cases})
    for case in cases:  # every target a case names is its own
        tags = {int(t) for t in CASE_TAG.findall(case.raw)}
        tags |= {int(t) for t in re.findall(rb"X-Case: (\d+)", case.raw)}
        assert tags <= {case.id}, case.name
        assert not VICTIM_TAG.search(case.raw), case.name


def test_the_reference_forwards_and_the_taps_match_it_on_plain_traffic(outcome: Outcome) -> None:
    """Guards the comparison against being vacuous: on well-formed traffic (the product
    baseline, plain pipelining, split writes) all three proxies forward the same requests."""
    plain = {
        "pipe_two_gets",
        "pipe_three_mixed",
        "pipe_five_gets",
        "pipe_two_posts",
        "pipe_twenty_gets",
        "split_head_mid_line",
        "split_between_cr_lf",
        "split_before_final_crlf",
        "split_body",
        "split_second_request",
        "byte_at_a_time",
        "body_hides_request",
    }
    chosen = [c for c in outcome.cases if c.name in plain or c.id == 1]
    assert len(chosen) == len(plain) + 1
    for case in chosen:
        ref = outcome.requests("nginx", case)
        assert ref and ref[-1][1].endswith(b"/end"), _show(case)
        for proxy in TAPS:
            assert outcome.requests(proxy, case) == ref, (proxy, _show(case))


@pytest.mark.parametrize("proxy", TAPS)
def test_upstream_gets_what_nginx_forwards_or_a_prefix_never_more(
    outcome: Outcome, proxy: str
) -> None:
    looser = []
    for case in outcome.cases:
        ref = outcome.requests("nginx", case)
        got = outcome.requests(proxy, case)
        if got != ref[: len(got)]:
            looser.append(
                f"{_show(case)}\n    through {proxy}: {_keys(got)}\n    through nginx: {_keys(ref)}"
            )
    assert not looser, f"{len(looser)} case(s) looser than nginx:\n" + "\n".join(looser)


@pytest.mark.parametrize("proxy", TAPS)
def test_clients_receive_only_answers_to_their_own_requests(outcome: Outcome, proxy: str) -> None:
    bad = []
    run = outcome.runs[proxy]
    for case in outcome.cases:
        bad += [
            f"{_show(case)}\n    {p}"
            for p in answer_problems(run.client.get(case.id, b""), case.id)
        ]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("proxy", TAPS)
def test_victims_on_other_connections_get_exactly_their_own_response(
    outcome: Outcome, proxy: str
) -> None:
    bad = []
    for case in outcome.cases:
        for victim in outcome.runs[proxy].victims.get(case.id, []):
            if victim.error is not None:
                bad.append(
                    f"after {_show(case)}\n    victim {victim.url!r}: {victim.error}: "
                    f"{victim.raw[:400]!r}"
                )
    assert len(outcome.runs[proxy].victims) == len(outcome.cases)
    assert not bad, f"{len(bad)} victim(s) got a wrong answer:\n" + "\n".join(bad)


@pytest.mark.parametrize("proxy", TAPS)
def test_the_tap_sends_the_upstream_nothing_it_cannot_parse_or_attribute(
    outcome: Outcome, proxy: str
) -> None:
    """On every upstream connection that carried a case's or a victim's request, every
    request is one (smuggled garbage would show up untagged) and llhttp parses it all."""
    upstream = outcome.runs[proxy].upstream
    problems = []
    for r in outcome.runs[proxy].received:
        if case_of(r) is None and not VICTIM_TAG.search(r.url):
            carried = [x for x in outcome.runs[proxy].received if x.conn == r.conn]
            if any(case_of(x) is not None or VICTIM_TAG.search(x.url) for x in carried):
                problems.append(f"untagged {r.key!r} on {upstream.raw_of(r.conn)[:400]!r}")
    assert upstream.parse_errors == 0 and not problems, (upstream.parse_errors, problems)


def test_summary(outcome: Outcome) -> None:
    """Prints how the taps compare with nginx (run with -s); fails on nothing the tests above
    do not already check, except that every proxy was driven through every case."""
    lines = [f"{len(outcome.cases)} cases through {', '.join(PROXIES)} in {outcome.seconds:.1f} s"]
    for proxy in TAPS:
        equal = stricter = empty = looser = 0
        for case in outcome.cases:
            ref = outcome.requests("nginx", case)
            got = outcome.requests(proxy, case)
            if got == ref:
                equal += 1
            elif got != ref[: len(got)]:
                looser += 1
            elif got:
                stricter += 1
            else:
                empty += 1
        lines.append(
            f"{proxy}: equal {equal}, stricter prefix {stricter}, stricter empty {empty}, "
            f"looser {looser}"
        )
    ng = outcome.runs["nginx"]
    bad_victims = sum(v.error is not None for vs in ng.victims.values() for v in vs)
    lines.append(
        f"nginx: victims wrong {bad_victims}, upstream parse errors {ng.upstream.parse_errors}"
    )
    print("\n".join(lines))
    if os.environ.get("FRAMING_DIFF_DETAIL"):
        for case in outcome.cases:
            ref = outcome.requests("nginx", case)
            row = {p: len(outcome.requests(p, case)) for p in PROXIES}
            if row["tap"] != row["nginx"] or row["serve"] != row["nginx"]:
                print(case.id, case.name, row, _keys(ref)[:3])
    for run in outcome.runs.values():
        assert len(run.client) == len(outcome.cases), run.name
