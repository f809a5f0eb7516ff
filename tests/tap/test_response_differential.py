"""Response-side differential (issue 31, item 4): hostile upstream answers, the tap vs nginx.

Every case of :mod:`tests.tap.response_cases` is what a misbehaving SGLang answers to one
request (a HEAD answered with a body, a second response glued on or sent late, 1xx floods,
endless heads, broken chunked bodies, framing conflicts). The same scripted upstream sits
behind Debian's nginx (the request-side differential's configuration, upstream keep-alive
pool included) and behind the standalone tap, in the same run. Per case a client sends the
case's request, reads its answer, then sends a follow-up ``GET`` on the same connection; two
victims then each send a ``GET`` on a new connection. The upstream answers follow-ups and
victims with an echo of their own url, and every planted response echoes ``/stolen``.

For every case, the tap must never be worse than nginx, and some things are absolute:

1. no client (the case's own follow-up or a victim on another connection) ever parses a
   response that is not the echo of its own request (``/stolen`` or another's url), unless
   nginx let the same through on the case's own connection (the late second response, which
   no proxy can tell from the next answer once the next request is out);
2. victims are always answered exactly;
3. the tap forwards no more interim (1xx) responses than it documents
   (``exchange.MAX_INTERIM``) and no body after a HEAD response head;
4. an endless response head is cut: the upstream's writes stop (the tap stopped reading)
   well before the 16 MiB the scripted upstream is willing to send.

Nothing here asserts on timing: waits are bounded by an idle read (``IDLE``) that only
limits what is observed.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import subprocess
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from exporter.samplers.tap.exchange import MAX_INTERIM
from tests.support import require
from tests.tap.response_cases import ENDLESS, LATE, RespCase, build_response_corpus
from tests.tap.test_framing_differential import (
    _stop,
    parse_responses,
    start_nginx,
    start_tap,
)

pytestmark = pytest.mark.e2e

IDLE = 1.5  # a client stops reading after this long without a byte (bounds, never verdicts)
LATE_S = 0.2  # the scripted upstream's pause before a late write
ENDLESS_CAP = 16 << 20  # bytes the upstream writes into an endless head before giving up
CASE = re.compile(rb"^(?:GET|HEAD) /r(\d{4})/")


class ScriptedUpstream:
    """Answers ``/rNNNN/case`` with case NNNN's script, anything else with an echo of its url
    (Content-Length framed, keep-alive). Records how many bytes each endless case wrote."""

    def __init__(self, cases: list[RespCase]) -> None:
        self.cases = {c.id: c for c in cases}
        self.endless_written: dict[int, int] = {}
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                m = CASE.match(head)
                if m is None:
                    url = head.split(b" ", 2)[1]
                    body = b'{"url":"%s"}' % url
                    writer.write(
                        b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
                    )
                    await writer.drain()
                    continue
                case = self.cases[int(m.group(1))]
                if await self._play(case, writer):
                    return
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def _play(self, case: RespCase, writer: asyncio.StreamWriter) -> bool:
        """Write the case's script; True when the connection is to be closed after it."""
        writes = list(case.writes)
        while writes:
            piece = writes.pop(0)
            if piece == LATE:
                await asyncio.sleep(LATE_S)  # scripted behaviour of the upstream, not a wait
                continue
            if piece == ENDLESS:
                chunk, written = writes.pop(0), 0
                while written < ENDLESS_CAP:
                    writer.write(chunk)
                    written += len(chunk)
                    try:
                        await asyncio.wait_for(writer.drain(), IDLE)
                    except (asyncio.TimeoutError, ConnectionError, OSError):
                        break
                self.endless_written[case.id] = written
                return True
            writer.write(piece)
            await writer.drain()
        return case.name.startswith("close_")


@dataclass
class CaseResult:
    first: bytes = b""  # what the case's client got before its follow-up
    follow: bytes = b""  # what it got after sending the follow-up
    victims: list[str | None] = field(default_factory=list)  # None: exactly its own echo


async def _read_idle(reader: asyncio.StreamReader) -> bytes:
    data = b""
    while True:
        try:
            piece = await asyncio.wait_for(reader.read(65536), IDLE)
        except (asyncio.TimeoutError, ConnectionError, OSError):
            return data
        if not piece:
            return data
        data += piece


async def _victim(port: int, url: bytes) -> str | None:
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError as exc:
        return f"connect: {exc}"
    try:
        writer.write(b"GET " + url + b" HTTP/1.1\r\nHost: victim\r\nConnection: close\r\n\r\n")
        raw = await _read_idle(reader)
    finally:
        writer.transport.abort()
    responses, problem = parse_responses(raw)
    if problem is not None or len(responses) != 1:
        return f"{len(responses)} responses ({problem}): {raw[:300]!r}"
    if responses[0].echo_url() != url:
        return f"got {responses[0].status} {responses[0].body[:200]!r}"
    return None


async def _drive(port: int, case: RespCase) -> CaseResult:
    result = CaseResult()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(b"%s /r%04d/case HTTP/1.1\r\nHost: t\r\n\r\n" % (case.method, case.id))
        result.first = await _read_idle(reader)
        if not reader.at_eof():
            with contextlib.suppress(ConnectionError, OSError):
                writer.write(b"GET /f%04d/follow HTTP/1.1\r\nHost: t\r\n\r\n" % case.id)
                result.follow = await _read_idle(reader)
    finally:
        writer.transport.abort()
    for n in range(2):
        result.victims.append(await _victim(port, b"/v%04d/%d" % (case.id, n)))
    return result


def _scan_heads(raw: bytes) -> tuple[list[int], int]:
    """Status codes of the response heads at the start of ``raw`` (1xx heads, then one final
    head), read without llhttp so that a HEAD response's head is found without a body, and
    the offset just past them."""
    codes: list[int] = []
    pos = 0
    while raw.startswith(b"HTTP/1.", pos):
        end = raw.find(b"\r\n\r\n", pos)
        if end < 0:
            break
        try:
            code = int(raw[pos + 9 : pos + 12])
        except ValueError:
            break
        codes.append(code)
        pos = end + 4
        if code >= 200:
            break
    return codes, pos


def _heads(raw: bytes) -> list[int]:
    return _scan_heads(raw)[0]


def _after_heads(raw: bytes) -> bytes:
    return raw[_scan_heads(raw)[1] :]


@dataclass
class Verdict:
    """What went wrong for one client in one case (empty: nothing)."""

    foreign: list[str]  # a response that is not the echo of the client's own request
    interim: int  # 1xx heads the client got
    head_body: bool  # bytes after a HEAD response's head, before the follow-up

    @property
    def bad(self) -> bool:
        return bool(self.foreign) or self.head_body


def judge(case: RespCase, result: CaseResult) -> Verdict:
    foreign: list[str] = []
    heads = _heads(result.first)
    interim = sum(1 for c in heads if c < 200)
    head_body = False
    if case.method == b"HEAD":
        head_body = bool(_after_heads(result.first)) if heads and heads[-1] >= 200 else False
        stream = result.follow
        own = {b"/f%04d/follow" % case.id}
    else:
        stream = result.first + result.follow
        own = {b"/f%04d/follow" % case.id}
    responses, _problem = parse_responses(stream)
    for resp in responses:
        url = resp.echo_url()
        if url is not None and url not in own:
            foreign.append(url.decode("latin-1"))
        elif resp.body and b"stolen" in resp.body:
            foreign.append("/stolen (inside a body)")
    if case.method == b"HEAD" and b"/stolen" in result.follow and "/stolen" not in foreign:
        foreign.append("/stolen (after HEAD)")
    return Verdict(foreign, interim, head_body)


@dataclass
class Outcome:
    cases: list[RespCase]
    results: dict[str, dict[int, CaseResult]]
    endless: dict[str, dict[int, int]]


@contextlib.asynccontextmanager
async def _proxies(
    tmp: Path, nginx: str, cases: list[RespCase]
) -> AsyncIterator[dict[str, tuple[int, ScriptedUpstream]]]:
    ups = {name: ScriptedUpstream(cases) for name in ("nginx", "tap")}
    ports = {name: await up.start() for name, up in ups.items()}
    procs: list[subprocess.Popen[bytes]] = []
    try:
        nginx_port = await start_nginx(nginx, ports["nginx"], tmp, procs)
        tap_port = await start_tap(ports["tap"], tmp, procs)
        yield {"nginx": (nginx_port, ups["nginx"]), "tap": (tap_port, ups["tap"])}
    finally:
        for proc in procs:
            await asyncio.to_thread(_stop, proc)
        for up in ups.values():
            await up.stop()


def _run_all(tmp: Path, nginx: str) -> Outcome:
    cases = build_response_corpus()

    async def scenario() -> Outcome:
        results: dict[str, dict[int, CaseResult]] = {"nginx": {}, "tap": {}}
        async with _proxies(tmp, nginx, cases) as proxies:
            sem = asyncio.Semaphore(8)

            async def one(proxy: str, port: int, case: RespCase) -> None:
                async with sem:
                    results[proxy][case.id] = await _drive(port, case)

            # A late second response poisons whichever request takes the idle connection in
            # the pause (any proxy: it cannot tell it from that request's answer), so the
            # late cases run one at a time, after the rest, each alone on its proxy.
            late = [c for c in cases if LATE in c.writes]
            await asyncio.gather(
                *(
                    one(p, port, c)
                    for p, (port, _) in proxies.items()
                    for c in cases
                    if c not in late
                )
            )
            for case in late:
                await asyncio.gather(*(one(p, port, case) for p, (port, _) in proxies.items()))
            endless = {p: dict(up.endless_written) for p, (_, up) in proxies.items()}
        return Outcome(cases, results, endless)

    return asyncio.run(asyncio.wait_for(scenario(), 300))


@pytest.fixture(scope="module")
def outcome(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Outcome]:
    # nginx is the reference: without it locally a skip, in CI a failure (tests/support.py)
    yield _run_all(tmp_path_factory.mktemp("respdiff"), require("nginx"))


def test_corpus_is_generated_and_covers_each_family() -> None:
    cases = build_response_corpus()
    names = [c.name for c in cases]
    assert len(set(names)) == len(names) >= 50
    for family in ("head_", "second_", "continue_", "endless_", "chunked_", "s204", "s304"):
        assert any(n.startswith(family) for n in names), family


def test_no_client_of_the_tap_gets_a_foreign_response_unless_nginx_does_too(
    outcome: Outcome,
) -> None:
    worse = []
    for case in outcome.cases:
        tap = judge(case, outcome.results["tap"][case.id])
        ref = judge(case, outcome.results["nginx"][case.id])
        if tap.foreign and not ref.foreign:
            worse.append(f"{case.id} {case.name}: tap gave {tap.foreign}; nginx gave none")
    assert not worse, "\n".join(worse)


def test_victims_on_other_connections_always_get_their_own_answer(outcome: Outcome) -> None:
    bad = [
        f"{case.id} {case.name} via {proxy}: {err}"
        for proxy in ("tap", "nginx")
        for case in outcome.cases
        for err in outcome.results[proxy][case.id].victims
        if err is not None and proxy == "tap"
    ]
    assert not bad, "\n".join(bad)


def test_no_body_after_a_head_response_and_bounded_interim(outcome: Outcome) -> None:
    bad = []
    for case in outcome.cases:
        v = judge(case, outcome.results["tap"][case.id])
        if v.head_body:
            bad.append(f"{case.id} {case.name}: bytes after the HEAD response head")
        if v.interim > MAX_INTERIM:
            bad.append(f"{case.id} {case.name}: {v.interim} interim responses forwarded")
    assert not bad, "\n".join(bad)


def test_endless_heads_are_cut(outcome: Outcome) -> None:
    for case in outcome.cases:
        if case.endless:
            written = outcome.endless["tap"].get(case.id, 0)
            assert written < ENDLESS_CAP, (case.name, written)
            # the client got a 502 or nothing, never a head the tap could not have framed
            first = outcome.results["tap"][case.id].first
            assert not first or first.startswith(b"HTTP/1.1 502") or _heads(first)[-1:] != [200], (
                case.name,
                first[:200],
            )


def test_summary(outcome: Outcome) -> None:
    """Prints the per-case comparison (run with -s); asserts only that every case ran."""
    for case in outcome.cases:
        row = {}
        for proxy in ("nginx", "tap"):
            r = outcome.results[proxy][case.id]
            v = judge(case, r)
            row[proxy] = (
                _heads(r.first)[-1:] or "-",
                f"1xx={v.interim}",
                "FOREIGN" if v.foreign else "",
                "HEADBODY" if v.head_body else "",
                sum(e is not None for e in r.victims),
            )
        print(case.id, case.name, row)
    for proxy in ("nginx", "tap"):
        assert len(outcome.results[proxy]) == len(outcome.cases)
