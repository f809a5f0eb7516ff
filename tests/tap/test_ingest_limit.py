"""The sidecar's ``ingest_max_bytes`` against what `dsv4-sidecar tap` posts (issue 31).

The tap joins waiting samples into bodies of at most ``handover.BATCH_BYTES``, metadata lines
included; the sidecar refuses to start with an ``ingest_max_bytes`` below that (every batch
would be refused), so at the lowest accepted value every batch goes through. A single sample
larger than the limit is posted alone, refused once, counted ``sidecar_refused``, and the
tap moves on to the next: through the real CLI and config files, in front of the fake SGLang.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from exporter.samplers.tap import CapturedExchange, handover
from exporter.samplers.tap.forward import SidecarForwarder
from exporter.samplers.tap.stats import TapStats
from tests.support import ServerThread, sample_value, serve_argv, spawn_listening, wait_for
from tests.tap.test_tap_process import TOKEN, _graded_from_tap, tap_argv

pytestmark = pytest.mark.e2e
RECORDS = handover.MAX_RECORDS


def _exchange(i: int, size: int) -> CapturedExchange:
    """A complete chat answer whose request and response hold ``size`` bytes together."""
    request = b'{"messages": []}'
    head, tail = b'{"choices": [{"message": {"content": "', b'"}}]}'
    pad = size - len(request) - len(head) - len(tail)
    return CapturedExchange.whole(
        request,
        head + b"%06d" % i + b"a" * (pad - 6) + tail,
        status=200,
        content_type="application/json",
        streaming=False,
        concurrency=1,
        request_id=f"r-{i}",
        method="POST",
        path="/v1/chat/completions",
        complete=True,
        started_at=0.0,
        duration_seconds=0.0,
    )


def _small_samples() -> list[CapturedExchange]:
    """MAX_RECORDS samples whose bytes fit BATCH_BYTES, but not with their metadata lines."""
    samples = [_exchange(i, handover.BATCH_BYTES // RECORDS) for i in range(RECORDS)]
    assert sum(len(s.request_body) + len(s.response_body) for s in samples) <= (
        handover.BATCH_BYTES
    )
    assert sum(map(handover.record_bytes, samples)) > handover.BATCH_BYTES + handover.MAX_META_BYTES
    return samples


def test_a_batch_is_bounded_with_its_metadata_lines() -> None:
    fwd = SidecarForwarder("http://127.0.0.1:9", TapStats(), max_items=RECORDS, max_bytes=1 << 30)
    samples = _small_samples()
    assert all(fwd.handoff(s) is None for s in samples)
    first, second = fwd._take(), fwd._take()
    assert first + second == samples and fwd.pending_bytes == 0
    for batch in (first, second):
        assert sum(len(p) for p in handover.encode(batch)) <= handover.BATCH_BYTES
    # one exchange larger than a batch still goes, alone
    big = _exchange(0, handover.BATCH_BYTES + 1)
    assert fwd.handoff(big) is None and fwd.handoff(samples[0]) is None
    assert fwd._take() == [big] and fwd._take() == [samples[0]]


def test_every_batch_fits_the_lowest_ingest_max_bytes_the_sidecar_accepts() -> None:
    """A real sidecar at ingest_max_bytes = BATCH_BYTES takes all of MAX_RECORDS samples that
    the tap would once have joined into one body over its limit (all refused)."""
    from exporter.app import create_app
    from exporter.config_loader import load_settings

    settings = load_settings(
        {
            "host": "127.0.0.1",
            "gpu_backend": "fake",
            "canary": False,
            "ingest_max_bytes": handover.BATCH_BYTES,
            "grading_queue": 4 * RECORDS,
        }
    )
    stats = TapStats()
    loop = asyncio.new_event_loop()  # the tap's loop, beside the test's thread
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def hand_off(fwd: SidecarForwarder) -> None:
        for s in _small_samples():
            assert fwd.handoff(s) is None
        fwd.start()

    try:
        with ServerThread(create_app(settings)) as sc:
            fwd = SidecarForwarder(sc.url, stats, max_items=RECORDS, max_bytes=1 << 30)
            asyncio.run_coroutine_threadsafe(hand_off(fwd), loop).result(30)
            wait_for(lambda: _graded_from_tap(sc.url) == RECORDS, timeout=120)
            asyncio.run_coroutine_threadsafe(fwd.stop(), loop).result(30)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
    assert sum(stats.dropped.values()) == 0, dict(stats.dropped)


def _refuses(tmp_path: Path, config: str, *argv: str) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(config)
    run = subprocess.run(
        [sys.executable, "-m", "exporter", *argv, "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr
    return run.stderr


def test_serve_refuses_an_ingest_limit_below_the_tap_batch(tmp_path: Path) -> None:
    err = _refuses(
        tmp_path,
        f"ingest_max_bytes: {handover.BATCH_BYTES - 1}\n",
        "serve", "--gpu-backend", "fake", "--canary", "false", "--port", "0",
    )  # fmt: skip
    assert "ingest_max_bytes:" in err and str(handover.BATCH_BYTES) in err, err
    assert "config" in err and "fix:" in err and "dsv4-sidecar tap" in err, err


def test_a_sample_over_the_limit_is_refused_once_and_counted(
    tmp_path: Path, procs: list[subprocess.Popen[bytes]]
) -> None:
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    config = tmp_path / "sidecar.yaml"
    config.write_text(f"ingest_max_bytes: {handover.BATCH_BYTES}\ningest_token_file: {token}\n")
    upstream = subprocess.Popen(
        [sys.executable, "-m", "tests.tap.fake_upstream", "--print-port"],
        stdout=subprocess.PIPE,
    )
    procs.append(upstream)
    assert upstream.stdout is not None
    fake = f"http://127.0.0.1:{int(upstream.stdout.readline())}"

    def up(url: str) -> bool:
        return httpx.get(url, timeout=5).status_code == 200

    def start_serve(port: int) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            serve_argv(fake, "--port", str(port), "--config", str(config)),
            stderr=(tmp_path / "serve.stderr").open("wb"),
        )

    serve, (api_port,) = spawn_listening(start_serve, lambda p: up(f"http://127.0.0.1:{p}/healthz"))
    procs.append(serve)
    api = f"http://127.0.0.1:{api_port}"

    def start_tap(port: int, metrics: int) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            tap_argv(
                fake, port, metrics, api,
                "--tap-sample-rate", "1", "--ingest-token-file", str(token),
            ),
            stderr=(tmp_path / "tap.stderr").open("wb"),
        )  # fmt: skip

    proc, (tap_port, tap_metrics) = spawn_listening(
        start_tap, lambda p, m: up(f"http://127.0.0.1:{m}/metrics"), ports=2
    )
    procs.append(proc)
    tap = f"http://127.0.0.1:{tap_port}"

    def dropped(reason: str) -> float | None:
        text = httpx.get(f"http://127.0.0.1:{tap_metrics}/metrics", timeout=5).text
        return sample_value(text, "dsv4_tap_samples_dropped_total", reason=reason)

    def chat(i: int, chunks: int) -> httpx.Response:
        body = {"model": "m", "messages": [{"role": "user", "content": f"q{i}"}]}
        body["fake"] = {"chunks": chunks, "first_ms": 0}
        return httpx.post(tap + "/v1/chat/completions", json=body, timeout=60)

    # ~5 MB: under the tap's 8 MiB sample cap, over the sidecar's 4 MiB ingest limit
    big = chat(0, 200_000)
    assert big.status_code == 200
    assert len(big.content) > handover.BATCH_BYTES + handover.MAX_META_BYTES
    wait_for(lambda: dropped("sidecar_refused") == 1, timeout=60)
    # the tap moved on: the next samples are graded, nothing more refused or lost
    for i in range(1, 4):
        assert chat(i, 32).status_code == 200
    wait_for(lambda: _graded_from_tap(api) == 3, timeout=60)
    assert dropped("sidecar_refused") == 1
    assert dropped("sidecar_unavailable") == 0 and dropped("queue_full") == 0
