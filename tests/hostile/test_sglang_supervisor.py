"""No background loop dies unobserved: the supervisor counts, logs once and restarts; the
sidecar marks a crashed source down with the documented ``internal_error`` reason."""

from __future__ import annotations

import asyncio
import logging

from prometheus_client import generate_latest

from exporter.config import SidecarSettings
from exporter.sidecar import Sidecar
from exporter.supervisor import TaskSupervisor
from tests.hostile.hostile_sglang import HostileSglang
from tests.support import sample_value, settle


def test_a_raising_loop_is_counted_logged_once_and_restarted(caplog):
    runs = 0

    async def flaky() -> None:
        nonlocal runs
        runs += 1
        if runs < 4:
            raise RecursionError("maximum recursion depth exceeded")
        await asyncio.sleep(3600)

    crashes: list[str] = []

    async def go() -> int:
        sup = TaskSupervisor(asyncio.Event(), min_backoff=0.01, max_backoff=0.05)
        sup.spawn("sglang", flaky, on_crash=lambda e: crashes.append(type(e).__name__))
        for _ in range(200):
            await asyncio.sleep(0.01)
            if runs >= 4:
                break
        n = sup.restarts("sglang")
        fams = {f.name: f for f in sup.collect()}
        assert fams["dsv4_sidecar_task_restarts"].samples[0].value == 3
        await sup.stop(grace=0.1)
        return n

    with caplog.at_level(logging.DEBUG, logger="exporter.supervisor"):
        assert asyncio.run(go()) == 3
    assert crashes == ["RecursionError"] * 3
    tracebacks = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(tracebacks) == 1 and tracebacks[0].exc_info is not None


def test_stop_ends_a_loop_that_returns_and_cancels_one_that_hangs():
    async def polite(stop: asyncio.Event) -> None:
        await stop.wait()

    async def stubborn() -> None:
        await asyncio.sleep(3600)

    async def go() -> None:
        stop = asyncio.Event()
        sup = TaskSupervisor(stop)
        sup.spawn("a", lambda: polite(stop))
        sup.spawn("b", stubborn)
        tasks = sup.tasks
        await sup.stop(grace=0.2)
        assert all(t.done() for t in tasks)

    asyncio.run(go())


def test_sidecar_source_crash_is_internal_error_and_restarted(monkeypatch):
    """A bug in a poller: the source goes down with a documented reason, the restart is
    exported, and the loop keeps running (the old guard logged a traceback every 5 s)."""
    h = HostileSglang()
    with h.serve() as srv:
        settings = SidecarSettings(
            sglang_url=srv.url, gpu_backend="fake", canary=False, sglang_poll_interval=0.05
        )
        sc = Sidecar(settings)
        calls = 0
        real = sc.servers["sglang"].poll_once

        async def buggy() -> None:
            nonlocal calls
            calls += 1
            if calls == 1:
                raise KeyError("bug")
            await real()

        monkeypatch.setattr(sc.servers["sglang"], "poll_once", buggy)
        sc.supervisor.min_backoff = 0.01

        async def go() -> str:
            await sc.start()
            await settle(lambda: sc.servers["sglang"].health.up)  # restarted, however long
            text = generate_latest(sc.registry).decode()
            await sc.stop()
            return text

        text = asyncio.run(go())
    assert sample_value(text, "dsv4_sidecar_task_restarts_total", task="sglang") == 1
    assert (
        sample_value(text, "dsv4_source_errors_total", source="sglang", reason="internal_error")
        == 1
    )
    assert sample_value(text, "dsv4_source_up", source="sglang") == 1  # restarted and healthy again


def test_exceptions_no_task_retrieved_are_counted_and_logged_once(caplog):
    """The issue's "Task exception was never retrieved": now counted and logged once."""

    async def boom() -> None:
        raise RecursionError("deep")

    async def go() -> int:
        sup = TaskSupervisor(asyncio.Event())
        sup.install(asyncio.get_running_loop())
        for _ in range(3):
            task = asyncio.create_task(boom())
            await asyncio.sleep(0.01)
            del task  # never awaited: the loop reports it when the task is collected
            import gc

            gc.collect()
        await asyncio.sleep(0.01)
        fams = {f.name: f for f in sup.collect()}
        (sample,) = fams["dsv4_sidecar_task_restarts"].samples
        assert sample.labels == {"task": "event_loop"}
        return int(sample.value)

    with caplog.at_level(logging.DEBUG, logger="exporter.supervisor"):
        assert asyncio.run(go()) == 3
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "RecursionError" in errors[0].getMessage()
