"""The tap's upstream pool against SGLang's own server stack (uvicorn + httptools, issue 22).

Two failures the issue found, each reproduced against a real uvicorn upstream:

- A slow reader left a *paused* SGLang connection in the pool (the write that completed its
  response pushed the client's buffer over the high-water mark, which pauses reading from
  SGLang, and the connection was released all the same); the next unrelated request on it
  waited forever. Now a connection is pooled only when :meth:`UpstreamConnection.reusable`
  holds, which these tests check for every pooled connection.
- A POST whose pooled connection SGLang closed without answering (a worker crash) was replayed
  on a fresh connection: the request that crashed a worker ran twice. Now it gets 502.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from exporter.samplers.tap import Tap, TapConfig
from tests.support import spawn_listening
from tests.tap.support import RawConnection, counter, run, settle

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def uvicorn_upstream(tmp_path: Path, workers: int) -> Iterator[tuple[int, Path]]:
    """``tests.tap.crashing_upstream`` under ``uvicorn --workers N`` (httptools, as SGLang)."""
    log = tmp_path / "crash.log"
    log.touch()

    def start(port: int) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "tests.tap.crashing_upstream:app",
                "--host=127.0.0.1",
                f"--port={port}",
                f"--workers={workers}",
                "--http=httptools",
                "--log-level=warning",
                "--no-access-log",
            ],
            cwd=REPO,
            env={**os.environ, "CRASH_LOG": str(log)},
        )

    def up(port: int) -> bool:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"GET /ok HTTP/1.1\r\nHost: u\r\nConnection: close\r\n\r\n")
            return s.recv(64).startswith(b"HTTP/1.1 200")

    proc, (port,) = spawn_listening(start, up, timeout=30)
    try:
        yield port, log
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.asynccontextmanager
async def tap_before(port: int, **config: object) -> AsyncIterator[Tap]:
    tap = Tap(TapConfig(upstream=f"http://127.0.0.1:{port}", **config))  # type: ignore[arg-type]
    await tap.start()
    try:
        yield tap
    finally:
        await tap.stop(grace=0.5)


def _pool_is_clean(tap: Tap) -> bool:
    return all(conn.reusable() for conn in tap._core.pool._idle)


async def _slow_reader(tap: Tap, size: int) -> socket.socket:
    """A client that asks for ``size`` bytes and reads none of them.

    Both kernel buffers on its path are made small (its receive buffer, and the send buffer
    of the tap's socket to it, as on a congested link), so what the tap writes stays in the
    tap's own transport buffer and crosses the high-water mark at a size the test controls,
    instead of at whatever the kernel's buffer autotuning allows (about 2.7 MiB here)."""
    loop = asyncio.get_running_loop()
    before = set(tap._core.clients)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await loop.sock_connect(sock, ("127.0.0.1", tap.port or 0))
    assert await settle(lambda: len(tap._core.clients - before) == 1)
    (client,) = tap._core.clients - before
    assert client.transport is not None
    tap_side = client.transport.get_extra_info("socket")
    tap_side.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    await loop.sock_sendall(sock, f"GET /big?n={size} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
    return sock


def test_a_slow_reader_never_leaves_a_paused_connection_in_the_pool(tmp_path: Path) -> None:
    """The issue's case: 3 of 20 later requests hung (one for 30 s) behind slow readers."""

    async def scenario(port: int) -> None:
        async with tap_before(port) as tap:
            tport = tap.port or 0
            readers = []
            # response sizes from under the high-water mark (64 KiB) to past one upstream read
            # (256 KiB): for some of them the write that completes the response is the one that
            # crosses the mark and pauses reading from SGLang
            for size in range(32 << 10, 384 << 10, 16 << 10):
                readers.append(await _slow_reader(tap, size))
                # each reader's response is complete on SGLang's side before the next one
                conn = await RawConnection.open(tport)
                ok = await asyncio.wait_for(conn.request("GET", "/ok/warm"), 10)
                await conn.close()
                assert ok.status == 200
                assert _pool_is_clean(tap)
            for n in range(20):  # the next requests must never pick a stuck connection
                conn = await RawConnection.open(tport)
                got = await asyncio.wait_for(conn.request("GET", f"/ok/{n}"), 10)
                await conn.close()
                assert got.status == 200 and f"/ok/{n}".encode() in got.body
                assert _pool_is_clean(tap)
            for sock in readers:
                sock.close()

    with uvicorn_upstream(tmp_path, workers=1) as (port, _):
        run(scenario(port), timeout=120)


def test_a_post_whose_connection_died_unanswered_is_not_sent_twice(tmp_path: Path) -> None:
    """A POST that crashed a worker gets 502 and reaches SGLang once; a GET is still replayed
    when its pooled connection turns out to be closed."""

    async def scenario(port: int, log: Path) -> None:
        async with tap_before(port) as tap:
            tport = tap.port or 0
            conn = await RawConnection.open(tport)
            warm = await asyncio.wait_for(conn.request("GET", "/ok/warm"), 10)
            assert warm.status == 200  # a pooled connection now exists
            await conn.close()
            conn = await RawConnection.open(tport)
            got = await asyncio.wait_for(conn.request("POST", "/crash", b'{"x": 1}'), 20)
            await conn.close()
            assert got.status == 502
            assert counter(tap, "dsv4_tap_requests_total", code="502_upstream_failed") == 1
            lines = log.read_text().splitlines()
            assert len(lines) == 1, f"the POST reached SGLang {len(lines)} times"

    with uvicorn_upstream(tmp_path, workers=2) as (port, log):
        run(scenario(port, log), timeout=60)
