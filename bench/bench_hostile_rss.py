"""Worst-case RSS of the real sidecar process under each abuse class of issue 15.

Each class runs against a fresh ``dsv4-sidecar serve`` subprocess (fake GPUs, canary every
0.5 s, SGLang polled every 0.5 s, tap on and sampling everything, ingest with a token) in front
of a hostile SGLang (``tests/hostile/hostile_sglang.py``: a real uvicorn server). The peak is
the kernel's high-water mark of the process (``VmHWM``), so a spike between two samples still
counts; "after" is ``VmRSS`` two seconds after the abuse stopped (memory still held). The
result is compared with the sidecar container's memory limit in docker/k8s/deployment.yaml.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from exporter.units import GIB
from tests.hostile.hostile_sglang import HostileSglang, deep_json, hostile_probe_dir
from tests.hostile.served import (
    TOKEN,
    Sidecar,
    manifest_limit_mib,
    start_sidecar,
    status_kb,
    stop_sidecar,
)
from tests.support import ServerThread

REPO = Path(__file__).resolve().parent.parent
NOTE = (
    "Before the caps, the issue reported (not re-measured here) 2.9 GB RSS for SGLang answering "
    "1.5 GB, 5.5 GB with the canary on, and 435 MB for 10 ingest clients posting 4.7 MB. "
    "Every SGLang row is now bounded by the body caps (1 MiB /server_info, 16 MiB /metrics, "
    "4 MiB canary answers). The tap and ingest rows are bounded by the grading queue's bytes "
    "(grading_queue_bytes, 32 MiB by default, besides its 1,000-request count), the sample "
    "store's bytes (samples_max_bytes, 8 MiB) and one ingest body read at a time "
    "(ingest_concurrency 1; more get 429): what remains is transient decoding. The tap's own "
    "buffers are bounded per connection and by its connection cap (docs/tap.md, 'Memory "
    "bounds'): withheld sampled bodies share capture_budget_bytes (32 MiB), pipelined bytes "
    "wait unparsed (at most one read per connection), slow readers hold at most the high-water "
    "mark plus one SGLang read each. Re-run after changing ingest, grading or the tap."
)
MIB = 1 << 20


# --- abuse classes: each returns after the abuse; the hostile upstream is already set up ----


async def _idle(_sc: Sidecar, seconds: float) -> None:
    await asyncio.sleep(seconds)


async def _tap_bad_chunked(sc: Sidecar, rounds: int) -> None:
    host, port = sc.tap.removeprefix("http://").split(":")
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5\r\nhello\r\n"
    )

    async def one() -> None:
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(head)
        await writer.drain()
        await asyncio.sleep(0.1)
        writer.write(b"ZZZ\r\n")
        await writer.drain()
        await asyncio.wait_for(reader.read(), 10)
        writer.close()

    for _ in range(rounds):
        await asyncio.gather(*(one() for _ in range(50)), return_exceptions=True)


async def _tap_big_bodies(sc: Sidecar, clients: int, size: int, rounds: int) -> None:
    body = json.dumps(
        {"model": "m", "messages": [{"role": "user", "content": "x" * size}]}
    ).encode()
    async with httpx.AsyncClient(timeout=60) as client:
        for _ in range(rounds):
            await asyncio.gather(
                *(
                    client.post(sc.tap + "/v1/chat/completions", content=body)
                    for _ in range(clients)
                ),
                return_exceptions=True,
            )


async def _tap_idle_connections(sc: Sidecar, n: int, seconds: float) -> None:
    host, port = sc.tap.removeprefix("http://").split(":")
    conns = []
    for _ in range(n):
        try:
            conns.append(await asyncio.open_connection(host, int(port)))
        except OSError:
            break
    for _, w in conns:
        w.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n")
    await asyncio.sleep(seconds)
    for _, w in conns:
        w.close()


def _tap_addr(sc: Sidecar) -> tuple[str, int]:
    host, port = sc.tap.removeprefix("http://").split(":")
    return host, int(port)


async def _open_many(
    sc: Sidecar, n: int
) -> list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    host, port = _tap_addr(sc)
    conns = []
    for _ in range(n):
        try:
            conns.append(await asyncio.open_connection(host, port))
        except OSError:
            break
    return conns


async def _tap_withheld_bodies(sc: Sidecar, n: int, size: int, seconds: float) -> None:
    """Sampled candidate POSTs that never send their last 10 bytes (issue 22's 72 -> 309 MB)."""
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "x" * size}]})
    data = body.encode()
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n" % len(data)
    )
    conns = await _open_many(sc, n)
    for _, w in conns:
        w.write(head + data[:-10])
    await asyncio.gather(*(w.drain() for _, w in conns), return_exceptions=True)
    await asyncio.sleep(seconds)
    for _, w in conns:
        w.close()


async def _tap_pipelined(sc: Sidecar, total: int, seconds: float) -> None:
    """One connection writing ``total`` bytes of pipelined requests (issue 22: 61k exchanges)."""
    one = b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"
    (reader, writer), *_ = await _open_many(sc, 1)
    writer.write(one * (total // len(one)))
    deadline = time.monotonic() + seconds
    with contextlib.suppress(Exception):
        while time.monotonic() < deadline:
            if not await asyncio.wait_for(reader.read(1 << 16), seconds):
                break
    writer.transport.abort()


async def _tap_slow_readers(sc: Sidecar, n: int, seconds: float) -> None:
    """``n`` clients asking for an endless answer and reading none of it."""
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
    req = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    conns = await _open_many(sc, n)
    for _, w in conns:
        w.write(req)  # never read: the StreamReader pauses, the kernel buffers fill, then the tap's
    await asyncio.sleep(seconds)
    for _, w in conns:
        w.transport.abort()


async def _tap_unfinished_heads(sc: Sidecar, n: int, seconds: float) -> None:
    """``n`` connections (past the cap: the rest get 503) each holding 60 KiB of a head."""
    conns = await _open_many(sc, n)
    part = b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * (60 << 10)
    for _, w in conns:
        w.write(part)
    await asyncio.gather(*(w.drain() for _, w in conns), return_exceptions=True)
    await asyncio.sleep(seconds)
    for _, w in conns:
        w.transport.abort()


def _dsml_text(size: int) -> str:
    call = (
        '<｜DSML｜tool_calls>\n<｜DSML｜invoke name="get_weather">\n'
        '<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n'
        "</｜DSML｜invoke>\n</｜DSML｜tool_calls>"
    )
    return ("x" * max(0, size - len(call))) + call


async def _ingest(sc: Sidecar, body: bytes, clients: int, rounds: int) -> None:
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    async with httpx.AsyncClient(timeout=120) as client:
        for _ in range(rounds):
            await asyncio.gather(
                *(
                    client.post(sc.url + "/api/v1/samples", content=body, headers=headers)
                    for _ in range(clients)
                ),
                return_exceptions=True,
            )


@dataclass
class Abuse:
    name: str
    modes: dict[str, str]
    action: Callable[[Sidecar], Coroutine[Any, Any, None]]
    env: Callable[[], dict[str, str]] = dict  # extra sidecar settings (made when it starts)


def abuses(quick: bool) -> list[Abuse]:
    secs = 4.0 if quick else 8.0
    big = json.dumps({"text": _dsml_text(int(4.7 * MIB))}).encode()
    deep = deep_json(50_000)

    def idle(sc: Sidecar) -> Coroutine[Any, Any, None]:
        return _idle(sc, secs)

    return [
        Abuse("baseline (well-behaved SGLang, canary on)", {}, lambda sc: _idle(sc, secs)),
        Abuse(
            "SGLang /server_info answers 1.5 GB",
            {"server_info": "huge"},
            lambda sc: _idle(sc, secs),
        ),
        Abuse("SGLang /metrics answers 1.5 GB", {"metrics": "huge"}, lambda sc: _idle(sc, secs)),
        Abuse("canary answers of 1.5 GB", {"chat": "huge"}, lambda sc: _idle(sc, secs)),
        Abuse(
            "SGLang + canary: 50,000-level JSON",
            {"server_info": "deep", "chat": "deep"},
            lambda sc: _idle(sc, secs),
        ),
        Abuse(
            "tap: bad chunked body after the head (50 at once)",
            {},
            lambda sc: _tap_bad_chunked(sc, 2 if quick else 6),
        ),
        # 7 MiB: just under the tap's 8 MiB sample cap, so every one is captured and queued
        Abuse(
            "tap: 16 clients x 7 MiB request bodies, all sampled",
            {},
            lambda sc: _tap_big_bodies(sc, 16, 7 * MIB, 1 if quick else 3),
        ),
        Abuse(
            "tap: 1,000 connections stalled mid-body",
            {},
            lambda sc: _tap_idle_connections(sc, 1000, secs),
        ),
        Abuse(
            "tap: 30 sampled 8 MiB bodies withholding their last 10 bytes",
            {},
            lambda sc: _tap_withheld_bodies(sc, 30, 8 * MIB - 4096, secs),
        ),
        Abuse(
            "tap: 10.5 MB of pipelined requests on one connection",
            {},
            lambda sc: _tap_pipelined(sc, int(10.5 * MIB), secs),
        ),
        Abuse(
            "tap: 512 clients (the cap) never reading an endless answer",
            {"chat": "huge"},
            lambda sc: _tap_slow_readers(sc, 512, secs),
        ),
        Abuse(
            "tap: 1,000 connections x 60 KiB unfinished heads (512 held, rest 503)",
            {},
            lambda sc: _tap_unfinished_heads(sc, 1000, secs),
        ),
        Abuse(
            "ingest: 10 clients x 4.7 MB DSML bodies",
            {},
            lambda sc: _ingest(sc, big, 10, 1 if quick else 3),
        ),
        Abuse("ingest: 50,000-level JSON", {}, lambda sc: _ingest(sc, deep, 10, 2)),
        # issue 24: valid bodies whose values are the attack
        Abuse("SGLang /server_info tp_size 10**8", {"server_info": "wide"}, idle),
        Abuse("SGLang /server_info tp_size Infinity", {"server_info": "infinite"}, idle),
        Abuse("SGLang /server_info 900 KB version", {"server_info": "long_version"}, idle),
        Abuse("SGLang /metrics 100,000 load-back pools", {"metrics": "pools"}, idle),
        Abuse("SGLang /metrics 1 MB pool name", {"metrics": "long_pool"}, idle),
        Abuse(
            "probe dir: FIFO, 10**400, 2,000 rank files",
            {},
            idle,
            lambda: {"DSV4_SIDECAR_PROBE_DIR": str(hostile_probe_dir())},
        ),
    ]


class HealthzWatch:
    """GET /healthz every 50 ms on a thread while an abuse runs: the slowest answer (ms)."""

    def __init__(self, url: str) -> None:
        self.url, self.worst, self.failed = url, 0.0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with httpx.Client(timeout=5) as client:
            while not self._stop.wait(0.05):
                t0 = time.perf_counter()
                try:
                    ok = client.get(self.url + "/healthz").status_code == 200
                except httpx.HTTPError:
                    ok = False
                self.worst = max(self.worst, (time.perf_counter() - t0) * 1000)
                self.failed += not ok

    def __enter__(self) -> HealthzWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def measure(
    hostile: HostileSglang, url: str, abuse: Abuse
) -> tuple[float, float, float, str, HealthzWatch]:
    """(RSS at start, peak, after) in MiB, how the sidecar ended, /healthz meanwhile."""
    hostile.mode = {}
    sc = start_sidecar(url, **abuse.env())
    try:
        time.sleep(1.0)
        start = status_kb(sc.proc.pid, "VmRSS") / 1024
        hostile.mode = dict(abuse.modes)
        with HealthzWatch(sc.url) as watch:
            asyncio.run(abuse.action(sc))
        hostile.mode = {}
        time.sleep(2.0)
        alive = sc.proc.poll() is None
        peak = status_kb(sc.proc.pid, "VmHWM") / 1024 if alive else float("nan")
        after = status_kb(sc.proc.pid, "VmRSS") / 1024 if alive else float("nan")
        health = "up"
        if alive:
            try:
                health = str(httpx.get(sc.url + "/healthz", timeout=5).status_code)
            except httpx.HTTPError as exc:
                health = type(exc).__name__
        else:
            health = f"exited {sc.proc.returncode}"
        return start, peak, after, health, watch
    finally:
        if sc.proc.poll() is None:
            stop_sidecar(sc)


def run(quick: bool = False) -> str:
    hostile = HostileSglang(size=3 * GIB // 2)
    limit = manifest_limit_mib()
    rows = []
    worst = slowest = 0.0
    t0 = time.monotonic()
    with ServerThread(hostile.app()) as srv:
        for abuse in abuses(quick):
            start, peak, after, health, watch = measure(hostile, srv.url, abuse)
            worst = max(worst, peak)
            slowest = max(slowest, watch.worst)
            verdict = "under" if peak < limit else "**OVER**"
            rows.append(
                f"| {abuse.name} | {start:.0f} | {peak:.0f} | {after:.0f} | {health} | "
                f"{watch.worst:.0f} | {watch.failed} | {verdict} |"
            )
            print(rows[-1], flush=True)
    lines = [
        "## Sidecar RSS under hostile input (`bench/bench_hostile_rss.py`)",
        "",
        "One fresh `dsv4-sidecar serve` process per abuse class (fake GPUs; SGLang polled and "
        "canary sent every 0.5 s; tap sampling 100%; ingest with a token) in front of a hostile "
        "SGLang. Peak = the process's `VmHWM`; after = `VmRSS` 2 s after the abuse stopped; "
        f"`/healthz` status after. The manifests' memory limit for the sidecar is **{limit} Mi** "
        f"(docker/k8s/deployment.yaml). Total bench time {time.monotonic() - t0:.0f} s"
        f"{' (quick)' if quick else ''}.",
        "",
        "| abuse | RSS at start MiB | peak MiB | after MiB | /healthz after | /healthz slowest "
        "ms during | /healthz failed during | vs limit |",
        "|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        f"Worst peak: {worst:.0f} MiB against a {limit} Mi limit. Slowest `/healthz` while "
        f"under abuse (one GET every 50 ms): {slowest:.0f} ms (issue 24 asks for < 100 ms).",
        "",
        NOTE,
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(run(quick="--quick" in sys.argv))
