"""`dsv4-sidecar tap` in its own process beside `dsv4-sidecar serve`, both through the real CLI.

The OpenAI client talks to the tap in front of the simulated SGLang; every sampled exchange is
posted to the sidecar's ingest and graded there (the sidecar's counts match the simulator's
ground truth). The tap's drop counter moves for each way a sample can fail to reach the sidecar:
a wrong token (read before every post, so a rotated Secret is picked up) and a stopped sidecar,
while the tap keeps serving its clients.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from exporter.sim.server import create_sim_app
from exporter.sim.settings import SimSettings
from tests.support import (
    ServerThread,
    free_port,
    openai_chats,
    sample_value,
    serve_argv,
    wait_for,
)

pytestmark = pytest.mark.e2e
TOKEN = "tap-to-sidecar-0123456789"


def tap_argv(server_url: str, port: int, metrics_port: int, sidecar_url: str, *extra: str):
    """``dsv4-sidecar tap`` as the tests start it (loopback, errors only on stderr)."""
    return [
        sys.executable, "-m", "exporter", "tap", "--host", "127.0.0.1", "--port", str(port),
        "--metrics-port", str(metrics_port), "--server-url", server_url,
        "--sidecar-url", sidecar_url, "--log-level", "error", *extra,
    ]  # fmt: skip


def _graded_from_tap(api: str) -> float:
    text = httpx.get(api + "/metrics", timeout=5).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("dsv4_dsml_samples_total{") and 'source="tap"' in line
    )


async def _drive(base_url: str, n: int) -> list[bool]:
    return await openai_chats(base_url, n, 8)


def test_tap_process_feeds_the_sidecar_and_counts_what_it_cannot(
    tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    # each container mounts the Secret on its own; only the tap's copy goes wrong below
    served, token = tmp_path / "sidecar-token", tmp_path / "tap-token"
    served.write_text(TOKEN + "\n")
    token.write_text(TOKEN + "\n")
    api_port, tap_port, tap_metrics = free_port(), free_port(), free_port()
    api = f"http://127.0.0.1:{api_port}"
    tap = f"http://127.0.0.1:{tap_port}"
    sim_app = create_sim_app(SimSettings(index_k_dtype="bf16", hicache="on", ttft_ms=2, seed=5))
    with ServerThread(sim_app) as sim:
        serve = subprocess.Popen(
            serve_argv(sim.url, "--port", str(api_port), "--ingest-token-file", str(served)),
            stderr=(tmp_path / "serve.stderr").open("wb"),
        )
        procs.append(serve)
        procs.append(
            subprocess.Popen(
                tap_argv(
                    sim.url,
                    tap_port,
                    tap_metrics,
                    api,
                    "--tap-sample-rate",
                    "1",
                    "--ingest-token-file",
                    str(token),
                ),
                stderr=(tmp_path / "tap.stderr").open("wb"),
            )
        )
        wait_for(lambda: httpx.get(api + "/healthz").status_code == 200, timeout=60)
        wait_for(lambda: httpx.get(f"http://127.0.0.1:{tap_metrics}/metrics"), timeout=60)

        def tap_value(name: str, **labels: str) -> float | None:
            text = httpx.get(f"http://127.0.0.1:{tap_metrics}/metrics", timeout=5).text
            return sample_value(text, name, **labels)

        # every answer reaches its client, and every sampled one the sidecar's grader
        n = 24
        assert all(asyncio.run(_drive(tap, n)))
        wait_for(lambda: _graded_from_tap(api) == n, timeout=60)
        truth = httpx.get(sim.url + "/_sim/stats", timeout=5).json()
        assert truth["requests_total"] == n
        assert tap_value("dsv4_tap_sampled_total") == n
        assert tap_value("dsv4_tap_samples_dropped_total", reason="sidecar_refused") == 0

        # a token the sidecar does not know (the tap reads it before each post): refused and
        # counted, clients unaffected
        token.write_text("not-the-token\n")
        assert all(asyncio.run(_drive(tap, 4)))
        wait_for(lambda: tap_value("dsv4_tap_samples_dropped_total", reason="sidecar_refused") == 4)
        token.write_text(TOKEN + "\n")

        # the sidecar stopped: the tap keeps serving and counts each sample it cannot hand over
        serve.terminate()
        serve.wait(timeout=30)
        assert tap_value("dsv4_tap_samples_dropped_total", reason="sidecar_unavailable") == 0
        assert all(asyncio.run(_drive(tap, 6)))
        wait_for(
            lambda: tap_value("dsv4_tap_samples_dropped_total", reason="sidecar_unavailable") == 6
        )
        assert httpx.get(sim.url + "/_sim/stats", timeout=5).json()["requests_total"] == n + 10


@pytest.mark.parametrize(
    "body",
    [
        b"no metadata line at all",
        b"[1, 2]\n{}",
        b'{"request_bytes": 99, "response_bytes": 0, "streaming": false, "concurrency": 1}\n{}',
        b'{"request_bytes": 2, "streaming": false, "concurrency": 1}\n{}',
        b'{"request_bytes": 2, "response_bytes": 0, "streaming": "no", "concurrency": 1}\n{}',
        b'{"request_bytes": 2, "response_bytes": 0, "streaming": false, "concurrency": -1}\n{}',
        b'{"request_bytes": 2, "response_bytes": 0, "streaming": false, "concurrency": 1, '
        b'"request_id": 7}\n{}',
        # a good record, then a broken one: the whole body is refused
        b'{"request_bytes": 2, "response_bytes": 0, "streaming": false, "concurrency": 1}\n{}'
        b"trailing junk",
    ],
)
def test_ingest_refuses_a_malformed_exchange(body: bytes) -> None:
    """What the tap posts is framed by its metadata lines; anything else is refused whole."""
    from exporter.app import create_app
    from exporter.config_loader import load_settings
    from exporter.samplers.tap import handover

    app = create_app(load_settings({"host": "127.0.0.1", "gpu_backend": "fake", "canary": False}))
    with ServerThread(app) as sc:
        ct = {"Content-Type": handover.CONTENT_TYPE}
        r = httpx.post(sc.url + "/api/v1/samples", content=body, headers=ct, timeout=10)
        assert (r.status_code, r.json()["reason"]) == (400, "not_a_sample"), r.text
        # the same endpoint takes a well-formed one and grades it
        answer = b'{"choices": [{"message": {"content": "hi"}}]}'
        good = b"".join(handover.encode([_exchange(b'{"messages": []}', answer)] * 3))
        r = httpx.post(sc.url + "/api/v1/samples", content=good, headers=ct, timeout=10)
        assert r.status_code == 200 and r.json()["accepted"] == 3
        wait_for(lambda: _graded_from_tap(sc.url) == 3)


def _exchange(request: bytes, response: bytes):
    from exporter.samplers.tap import CapturedExchange

    return CapturedExchange.whole(
        request,
        response,
        status=200,
        content_type="application/json",
        streaming=False,
        concurrency=1,
        request_id="r-1",
        method="POST",
        path="/v1/chat/completions",
        complete=True,
        started_at=0.0,
        duration_seconds=0.0,
    )


def test_the_queue_to_the_sidecar_is_bounded_in_count_and_bytes() -> None:
    """Past tap_queue exchanges or tap_queue_bytes bytes waiting, a sample is refused
    (counted as queue_full by the tap); what is not for grading is refused first."""
    from exporter.samplers.tap.forward import SidecarForwarder
    from exporter.samplers.tap.stats import TapStats

    small = _exchange(b"{}", b"x" * 100)
    by_count = SidecarForwarder("http://127.0.0.1:9", TapStats(), max_items=2, max_bytes=1 << 20)
    assert [by_count.handoff(small) for _ in range(3)] == [None, None, "queue_full"]
    by_bytes = SidecarForwarder("http://127.0.0.1:9", TapStats(), max_items=99, max_bytes=250)
    assert [by_bytes.handoff(small) for _ in range(3)] == [None, None, "queue_full"]
    assert by_bytes.pending_bytes == 2 * 102
    assert by_count.handoff(replace(small, status=500)) == "not_ok"
    assert by_count.handoff(replace(small, complete=False)) == "incomplete"


def test_a_huge_answer_from_the_sidecar_is_read_bounded_and_counted_refused() -> None:
    """A ``sidecar_url`` that answers 200 with a 1 GiB body (not the sidecar) costs the tap at
    most ANSWER_MAX_BYTES of it: the batch counts as refused as soon as those arrived. (Read
    whole, the post would wait for the rest, which this server never sends.)"""
    from exporter.samplers.tap.forward import ANSWER_MAX_BYTES, SidecarForwarder
    from exporter.samplers.tap.stats import TapStats

    async def scenario() -> dict[str, int]:
        import aiohttp

        async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n")
            writer.write(b"Content-Length: %d\r\n\r\n" % (1 << 30))
            writer.write(b" " * (ANSWER_MAX_BYTES + 1))
            await reader.read()  # hold the connection until the tap hangs up

        server = await asyncio.start_server(answer, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        forwarder = SidecarForwarder(
            f"http://127.0.0.1:{port}", TapStats(), max_items=9, max_bytes=1 << 20
        )
        async with server, aiohttp.ClientSession() as session:
            post = forwarder._post(session, [_exchange(b"{}", b"x" * 100)])
            return await asyncio.wait_for(post, timeout=60)  # a hang guard, not a timing

    assert asyncio.run(scenario()) == {"sidecar_refused": 1}


def test_a_sampled_answer_reaches_the_post_in_its_pieces_never_joined() -> None:
    """Joining a sampled 7 MB answer on the tap's loop page-faulted a fresh 7 MB block each time
    (other users' p99 +5-66 ms). The capture keeps the forwarded pieces (the same objects), the
    post writes them in bounded writes, and the sidecar decodes the exchange it was sent."""
    import hashlib

    from exporter.samplers.tap import handover
    from exporter.samplers.tap.forward import WRITE_SLICE, _writes
    from exporter.samplers.tap.sampling import Capture, CaptureBudget, build_sample

    events = [b'data: {"n": %d, "pad": "%s"}\n\n' % (i, b"x" * (i % 97)) for i in range(40_000)]
    large = [bytes(range(256)) * 4096 + b"tail"]  # one read over WRITE_SLICE: sliced as views
    capture = Capture(hashlib.blake2b(), 64 << 20, CaptureBudget(64 << 20))
    capture.add_request(b'{"stream": true}')
    for piece in events + large + events[:3]:
        capture.add_response(piece)
    capture.chosen = True
    sample = build_sample(
        capture,
        status=200,
        content_type=b"text/event-stream",
        request_id_header=None,
        concurrency=1,
        method=b"POST",
        path=b"/v1/chat/completions",
        complete=True,
        started_at=0.0,
        started_perf=0.0,
    )
    kept = events + large + events[:3]
    assert all(a is b for a, b in zip(sample.response_pieces, kept, strict=True))
    assert sample.response_bytes == sum(map(len, kept))
    writes = list(_writes(handover.encode([sample, sample])))
    assert all(0 < len(w) <= WRITE_SLICE for w in writes)
    assert any(isinstance(w, memoryview) for w in writes)  # the large read, not copied
    # few writes: runs of small pieces are joined (one write per event would be 80,000+)
    assert len(writes) <= 2 * (sample.response_bytes // WRITE_SLICE + 4)
    body = b"".join(bytes(w) for w in writes)
    [one, two] = handover.decode(body)
    assert one.response_body == two.response_body == b"".join(kept)
    assert one.request_body == b'{"stream": true}' and one.streaming


def test_byte_bounds_count_each_kept_piece_so_tiny_chunks_cannot_inflate_memory() -> None:
    """An upstream sending 1-byte chunks makes a piece per byte (about 40 bytes of memory
    each). The capture budget and the queue to the sidecar charge each piece's header, so a
    bound in bytes stays a bound on memory: what fits as one piece is refused as 1-byte ones."""
    import hashlib

    from exporter.samplers.tap.forward import SidecarForwarder
    from exporter.samplers.tap.sampling import PIECE_OVERHEAD, Capture, CaptureBudget
    from exporter.samplers.tap.stats import TapStats

    payload = 10_000
    whole = Capture(hashlib.blake2b(), 1 << 20, CaptureBudget(2 * payload))
    whole.add_response(b"x" * payload)
    assert not whole.overflow and whole.response_size == payload
    tiny = Capture(hashlib.blake2b(), 1 << 20, CaptureBudget(2 * payload))
    for _ in range(payload):
        tiny.add_response(b"x")
    assert tiny.overflow == "capture_budget"  # 10 KB of payload, ~400 KB of objects

    one = _exchange(b"{}", b"x" * payload)
    many = replace(one, response_pieces=(b"x",) * payload)
    bound = 4 * payload  # room for the payload, not for 10,000 piece headers
    fwd = SidecarForwarder("http://127.0.0.1:9", TapStats(), max_items=99, max_bytes=bound)
    assert fwd.handoff(one) is None
    assert fwd.handoff(many) == "queue_full"
    assert fwd.pending_bytes == 2 + payload
    assert PIECE_OVERHEAD * payload > bound
