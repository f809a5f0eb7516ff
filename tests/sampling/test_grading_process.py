"""Issue 31, item 1: grading runs in its own process, fed through a bounded queue.

Grading one 7 MB sample held the GIL 38-54 ms at a time and, at the default sample rate, one
client pulling 7 MB answers raised every tap user's p50 from 2.5 ms to 145 ms. With
``worker="process"`` (how the sidecar runs it) the sample is decoded and graded in a separate
grading process, and a full queue drops and counts (``dsv4_dsml_dropped_total``) instead of
waiting. Conditions are awaited (``wait_for``), never slept for.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from exporter.samplers import decode
from exporter.samplers.grading import GradingPipeline
from tests.support import serve_with_tap, wait_for


class _Exchange:
    """What the tap hands over (exporter.samplers.tap.CapturedExchange's shape)."""

    def __init__(self, text: str) -> None:
        self.request_body = b'{"messages":[]}'
        self.response_body = json.dumps(
            {"id": "r1", "choices": [{"message": {"content": text}, "finish_reason": "stop"}]}
        ).encode()
        self.streaming = False
        self.concurrency = 3
        self.request_id = "req-1"
        self.status = 200
        self.complete = True


def _value(pipeline: GradingPipeline, name: str, **labels: str) -> float:
    for fam in pipeline.collect():
        for s in fam.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    return 0.0


def _graded(pipeline: GradingPipeline) -> float:
    return sum(
        float(s.value)
        for fam in pipeline.collect()
        for s in fam.samples
        if s.name == "dsv4_dsml_samples_total" and s.labels.get("source") == "tap"
    )


def test_a_full_queue_drops_and_counts_then_grading_runs_in_another_process() -> None:
    pipeline = GradingPipeline(max_pending=1, worker="process")
    request = decode.from_exchange(_Exchange("plain answer, no tool call"))
    # not started yet: nothing drains the queue, so the second and third are dropped
    assert pipeline.submit(request)
    assert not pipeline.submit(request)
    assert not pipeline.submit(request)
    assert _value(pipeline, "dsv4_dsml_samples_dropped_total", source="tap") == 2
    pipeline.start()
    try:
        wait_for(lambda: _graded(pipeline) == 1, timeout=60)
        pids = pipeline.worker_pids()
        assert pids and os.getpid() not in pids  # graded in the grading process
        assert pipeline.pending == 0
    finally:
        pipeline.stop()


def test_a_dead_grading_process_is_replaced_and_the_request_counted_as_an_error() -> None:
    pipeline = GradingPipeline(worker="process")
    request = decode.from_exchange(_Exchange("first"))
    pipeline.start()
    try:
        pipeline.submit(request)
        wait_for(lambda: _graded(pipeline) == 1, timeout=60)
        (pid,) = pipeline.worker_pids()
        os.kill(pid, 9)
        pipeline.submit(request)
        pipeline.submit(request)
        # one request may meet the dead process (an error); the pipeline goes on grading
        wait_for(
            lambda: (
                _graded(pipeline) + _value(pipeline, "dsv4_dsml_grading_errors_total", source="tap")
                == 3
            ),
            timeout=60,
        )
        wait_for(lambda: pipeline.worker_pids() and pid not in pipeline.worker_pids())
    finally:
        pipeline.stop()


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(stat.parent.name))
    return out


@pytest.mark.e2e
@pytest.mark.parametrize("stop", ["terminate", "kill"])
def test_the_sidecar_grades_tap_samples_in_a_child_process(tmp_path: Path, stop: str) -> None:
    """Through the real CLI: ``serve --tap-port`` grades what its tap samples, and the grading
    runs in a child process of the sidecar (its spawned grading process), which goes when the
    sidecar goes, even killed outright (orphaned grading processes were found after bench
    runs)."""
    upstream = subprocess.Popen(
        [sys.executable, "-m", "tests.tap.fake_upstream", "--print-port"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    sidecar = None
    try:
        assert upstream.stdout is not None
        up_port = int(upstream.stdout.readline())

        sidecar, api, tap = serve_with_tap(
            f"http://127.0.0.1:{up_port}", tmp_path / "serve.stderr", "--tap-sample-rate", "1"
        )
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        body["fake"] = {"chunks": 8, "first_ms": 0}
        got = wait_for(
            lambda: httpx.post(f"http://127.0.0.1:{tap}/v1/chat/completions", json=body),
            timeout=60,
        )
        assert got.status_code == 200

        def graded() -> float:
            text = httpx.get(f"http://127.0.0.1:{api}/metrics").text
            return sum(
                float(line.rsplit(" ", 1)[1])
                for line in text.splitlines()
                if line.startswith("dsv4_dsml_samples_total{") and 'source="tap"' in line
            )

        wait_for(lambda: graded() >= 1, timeout=60)
        children = _children(sidecar.pid)
        assert children, "no grading process under the sidecar"
        # a sidecar that is stopped, or killed outright, takes its grading process with it
        getattr(sidecar, stop)()
        sidecar.wait(15)
        wait_for(lambda: not any(Path(f"/proc/{pid}").exists() for pid in children))
    finally:
        for proc in (sidecar, upstream):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait(15)


def test_without_a_grading_process_grading_falls_back_to_a_thread(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A container without /dev/shm cannot make the process pool's semaphores: the sidecar
    still starts and grades, in a thread, and says so."""

    def no_pool() -> None:
        raise OSError("no /dev/shm")

    monkeypatch.setattr(GradingPipeline, "_new_executor", staticmethod(no_pool))
    pipeline = GradingPipeline(worker="process")
    pipeline.start()
    try:
        pipeline.submit(decode.from_exchange(_Exchange("fine")))
        wait_for(lambda: _graded(pipeline) == 1)
        assert pipeline.worker_pids() == []
        assert "no grading process" in caplog.text
    finally:
        pipeline.stop()
