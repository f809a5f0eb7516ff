"""Tap isolation (issue 31, item 1): other users' latency while one client pulls 7 MB answers.

The sidecar (``dsv4-sidecar serve --tap-port``, default sample rate, the grader in the
pipeline) runs in front of the fake SGLang. One client pulls non-streamed ~7 MB chat
completions through it back to back (a different body each time, so the keyed sampling picks
its share of them and the grader gets 7 MB samples); ``USERS`` other users meanwhile send small
chat completions in a loop. The same load runs against the fake directly, in interleaved
phases. Reported: the other users' latency p50 / p99 through the tap and direct, and how many
samples the grader took during the tap phases (so a quiet grader cannot pass for isolation).
Before issue 31, grading one 7 MB sample held the sidecar's GIL 38-54 ms and the other users'
p50 went from 2.5 ms (direct) to 145 ms.

``python -m bench.bench_tap_isolation [--quick]``; figures go to bench/RESULTS.md by hand,
with the machine's load noted (it is shared).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import uvloop

from bench.bench_tap import _free_port, _nginx, _python, _wait_port
from tests.tap.support import RawConnection

BIG_BYTES = 7_000_000
USERS = 8
# BENCH_TAP_SAMPLE_RATE=0 isolates the proxying cost from grading (default: the sidecar's)
SAMPLE_RATE = os.environ.get("BENCH_TAP_SAMPLE_RATE", "")
PATH = "/v1/chat/completions"
_WORDS = [
    "the",
    "model",
    "answers",
    "with",
    "tokens",
    "streamed",
    "over",
    "server",
    "sent",
    "events",
    "through",
    "a",
    "tap",
]


def _answer(rid: bytes, text: bytes) -> bytes:
    body = (
        b'{"id":"chatcmpl-%s","object":"chat.completion","model":"m","choices":[{"index":0,'
        b'"message":{"role":"assistant","content":"%s"},"finish_reason":"stop"}],'
        b'"usage":{"prompt_tokens":11,"completion_tokens":%d,"total_tokens":%d}}'
        % (rid, text, len(text) // 6, len(text) // 6 + 11)
    )
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
        len(body),
        body,
    )


async def _serve_upstream() -> None:
    """A stand-in SGLang that costs itself almost nothing: the 7 MB completion is built once
    and only its id changes (the fake in tests/tap computes every body, which at 7 MB stalls
    its own loop and would be measured as the tap's doing)."""
    words = " ".join(_WORDS[i % len(_WORDS)] for i in range(BIG_BYTES // 6)).encode()
    big_text = words[:BIG_BYTES]

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                m = re.search(rb"(?i)content-length: *(\d+)", head)
                body = await reader.readexactly(int(m.group(1))) if m else b""
                rid = b"%016x" % (hash(body) & (2**64 - 1))
                text = big_text if b"BIGANSWER" in body else b"a short answer"
                writer.write(_answer(rid, text))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()


def _body(i: int, big: bool) -> bytes:
    content = f"q{i}" + (" BIGANSWER" if big else "")
    return json.dumps({"model": "m", "messages": [{"role": "user", "content": content}]}).encode()


async def _pull(port: int, seconds: float) -> int:
    """The one client pulling 7 MB answers back to back (run in its own process, so that its
    reading never delays the measuring loop); returns how many it pulled."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    deadline = time.monotonic() + seconds
    n = 0
    try:
        while time.monotonic() < deadline:
            body = _body(10_000_000 + n, True)
            writer.write(
                b"POST %s HTTP/1.1\r\nHost: b\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (PATH.encode(), len(body), body)
            )
            head = await reader.readuntil(b"\r\n\r\n")
            m = re.search(rb"(?i)content-length: *(\d+)", head)
            if m is None:
                break
            await reader.readexactly(int(m.group(1)))
            n += 1
    finally:
        writer.close()
    return n


async def _user(port: int, u: int, stop: asyncio.Event, lat: list[float]) -> None:
    conn = await RawConnection.open(port)
    i = 0
    try:
        while not stop.is_set():
            i += 1
            t0 = time.perf_counter()
            got = await conn.request("POST", PATH, _body(u * 1_000_000 + i, False))
            if got.status == 200:
                lat.append((time.perf_counter() - t0) * 1000)
    finally:
        await conn.close()


async def _phase(port: int, seconds: float) -> tuple[list[float], int]:
    stop = asyncio.Event()
    lat: list[float] = []
    puller = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.bench_tap_isolation",
        "--pull",
        str(port),
        str(seconds),
        stdout=asyncio.subprocess.PIPE,
    )
    tasks = [asyncio.create_task(_user(port, u, stop, lat)) for u in range(USERS)]
    out, _ = await puller.communicate()  # the measured window: as long as the puller pulls
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    return lat, int(out or 0)


def _graded(metrics_port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as r:
        text = r.read().decode()
    # by output length: only the 7 MB answers land in the +Inf bucket
    pattern = r'^dsv4_dsml_length_samples_total\{(?=[^}]*source="tap")(?=[^}]*"\+Inf")[^}]*\} (\S+)'
    return sum(float(v) for v in re.findall(pattern, text, re.M))


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def run(quick: bool = False) -> str:
    repeats, seconds = (2, 4.0) if quick else (4, 8.0)
    upstream = _python("upstream", ["-m", "bench.bench_tap_isolation", "--upstream"])
    api_port, tap_port = _free_port(), _free_port()
    sidecar = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "exporter",
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(api_port),
            "--tap-port",
            str(tap_port),
            "--sglang-url",
            f"http://127.0.0.1:{upstream.port}",
            "--gpu-backend",
            "fake",
            "--canary",
            "false",
            "--log-level",
            "error",
            *(["--tap-sample-rate", SAMPLE_RATE] if SAMPLE_RATE else []),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    # the tap in its own process (`dsv4-sidecar tap`) posting to a sidecar of its own
    api2, tap2, tap2_metrics = _free_port(), _free_port(), _free_port()
    serve2 = subprocess.Popen(
        [sys.executable, "-m", "exporter", "serve", "--host", "127.0.0.1", "--port", str(api2),
         "--sglang-url", f"http://127.0.0.1:{upstream.port}", "--gpu-backend", "fake",
         "--canary", "false", "--log-level", "error"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    tap_proc = subprocess.Popen(
        [sys.executable, "-m", "exporter", "tap", "--host", "127.0.0.1", "--port", str(tap2),
         "--metrics-port", str(tap2_metrics), "--server-url",
         f"http://127.0.0.1:{upstream.port}", "--sidecar-url", f"http://127.0.0.1:{api2}",
         "--log-level", "error",
         *(["--tap-sample-rate", SAMPLE_RATE] if SAMPLE_RATE else [])],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    t0 = time.monotonic()
    names = ("direct", "nginx", "tap", "tap process")
    rows: dict[str, list[float]] = {n: [] for n in names}
    pulled: dict[str, int] = dict.fromkeys(names, 0)
    graded = graded2 = 0.0
    tmp = tempfile.TemporaryDirectory(prefix="bench-iso-")
    nginx = _nginx(Path(tmp.name), upstream.port)
    try:
        for port in (tap_port, api_port, tap2, api2):
            _wait_port(port, 60)
        before, before2 = _graded(api_port), _graded(api2)
        ports = {"direct": upstream.port, "tap": tap_port, "tap process": tap2}
        if nginx is not None:
            ports["nginx"] = nginx.port
        for _ in range(repeats):
            for name, port in ports.items():
                lat, count = uvloop.run(_phase(port, seconds))
                rows[name] += lat
                pulled[name] += count
        graded = _graded(api_port) - before
        graded2 = _graded(api2) - before2
    finally:
        for proc in (sidecar, tap_proc, serve2):
            proc.terminate()
            proc.wait(10)
        if nginx is not None:
            nginx.stop()
        upstream.stop()
        tmp.cleanup()
    lines = [
        "## Tap isolation: other users while one client pulls 7 MB answers",
        "",
        f"`bench/bench_tap_isolation.py`: the sidecar (`tap`: `serve --tap-port`; `tap "
        f"process`: `dsv4-sidecar tap` beside `serve`; default sample rate "
        f"0.1, grading on) in front of the fake SGLang; one client pulls non-streamed "
        f"{BIG_BYTES / 1e6:.0f} MB chat completions back to back (its own process), "
        f"{USERS} other users send small chat completions in a loop; {repeats} interleaved "
        f"repeats of {seconds:.0f} s per path. Total {time.monotonic() - t0:.0f} s.",
        "",
        "| path (all traffic through it) | other users' latency p50 / p99 ms | their requests "
        "| 7 MB answers pulled |",
        "|---|---|---|---|",
    ]
    for name in names:
        lat = rows[name]
        if not lat:
            continue
        lines.append(
            f"| {name} | {_pct(lat, 0.5):.2f} / {_pct(lat, 0.99):.2f} | {len(lat)} | "
            f"{pulled[name]} |"
        )
    lines += [
        "",
        f"7 MB samples graded during the tap phases: {graded:.0f} (`tap`: `serve --tap-port`); "
        f"{graded2:.0f} (`tap process`: `dsv4-sidecar tap` posting to a `serve` of its own).",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    if "--upstream" in sys.argv:
        uvloop.run(_serve_upstream())
    elif "--pull" in sys.argv:
        at = sys.argv.index("--pull")
        print(uvloop.run(_pull(int(sys.argv[at + 1]), float(sys.argv[at + 2]))))
    else:
        print(run(quick="--quick" in sys.argv))
