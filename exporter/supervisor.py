"""Supervision of the sidecar's background loops: none may die unobserved.

A polling loop that raises would otherwise end its task quietly (asyncio only prints "Task
exception was never retrieved" when the task is garbage-collected, if ever) and its source
would freeze at its last snapshot. The supervisor runs each loop as a named task; when one
raises it

- counts it (``dsv4_sidecar_task_restarts_total{task}``, zero-initialised per task),
- logs the traceback once per task and exception type (later repeats at DEBUG, so a loop that
  fails every few seconds does not flood the log),
- calls the task's ``on_crash`` hook (the sidecar marks the source down with reason
  ``internal_error``), and
- restarts it after an exponential backoff (``min_backoff`` doubling to ``max_backoff``; reset
  once a run lasted longer than ``max_backoff``).

Installed as the event loop's exception handler (``install``), it also catches what escapes
every other task or callback ("Task exception was never retrieved" and friends): counted under
``task="event_loop"`` and logged once per exception type instead of whenever the GC notices.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import Metric

from exporter.metrics import catalog as m

log = logging.getLogger(__name__)

LoopFactory = Callable[[], Coroutine[Any, Any, None]]
CrashHook = Callable[[BaseException], None]


@dataclass
class _Supervised:
    name: str
    factory: LoopFactory
    on_crash: CrashHook | None
    restarts: int = 0
    logged: set[str] = field(default_factory=set)
    task: asyncio.Task[None] | None = None


class TaskSupervisor:
    """Runs named loops until ``stop`` is set, restarting any that raise."""

    def __init__(
        self, stop: asyncio.Event, min_backoff: float = 1.0, max_backoff: float = 60.0
    ) -> None:
        self._stop = stop
        self.min_backoff = min_backoff
        self.max_backoff = max_backoff
        self._loops: dict[str, _Supervised] = {}
        self.loop_errors = 0
        self._loop_logged: set[str] = set()

    def spawn(self, name: str, factory: LoopFactory, on_crash: CrashHook | None = None) -> None:
        """Start ``factory()`` as task ``name`` (names are label values: keep them fixed)."""
        if name in self._loops:
            raise ValueError(f"task {name!r} is already supervised")
        entry = _Supervised(name, factory, on_crash)
        self._loops[name] = entry
        entry.task = asyncio.create_task(self._supervise(entry), name=f"supervised:{name}")

    def restarts(self, name: str) -> int:
        return self._loops[name].restarts

    @property
    def tasks(self) -> list[asyncio.Task[None]]:
        return [e.task for e in self._loops.values() if e.task is not None]

    async def _supervise(self, entry: _Supervised) -> None:
        backoff = self.min_backoff
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                await entry.factory()
                return  # a loop that returns has seen ``stop``
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._crashed(entry, exc)
            if time.monotonic() - started > self.max_backoff:
                backoff = self.min_backoff
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stop.wait(), timeout=backoff)
            backoff = min(backoff * 2, self.max_backoff)

    def _crashed(self, entry: _Supervised, exc: Exception) -> None:
        entry.restarts += 1
        kind = type(exc).__name__
        if kind not in entry.logged:
            entry.logged.add(kind)
            log.error(
                "background task %s raised %s; restarting (logged once per exception type)",
                entry.name,
                kind,
                exc_info=exc,
            )
        else:
            log.debug("background task %s raised %s again; restarting", entry.name, kind)
        if entry.on_crash is not None:
            try:
                entry.on_crash(exc)
            except Exception:  # the hook must not take the supervisor down with it
                log.exception("crash hook of %s raised", entry.name)

    async def stop(self, grace: float = 3.0) -> None:
        """Wait up to ``grace`` seconds for loops to see ``stop``, then cancel the rest."""
        self._stop.set()
        tasks = self.tasks
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=grace)
            for t in pending:
                t.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        self._loops.clear()

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        """Route the loop's unhandled exceptions to :meth:`loop_exception`."""
        loop.set_exception_handler(self.loop_exception)

    def loop_exception(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """Count an exception nobody retrieved; log it once per exception type."""
        exc = context.get("exception")
        kind = type(exc).__name__ if exc is not None else "error"
        self.loop_errors += 1
        if kind in self._loop_logged:
            log.debug("event loop: %s again (%s)", kind, context.get("message"))
            return
        self._loop_logged.add(kind)
        log.error(
            "event loop: unhandled %s: %s (logged once per exception type)",
            kind,
            context.get("message"),
            exc_info=exc if isinstance(exc, BaseException) else None,
        )

    def collect(self) -> Iterable[Metric]:
        fam = m.TASK_RESTARTS.family()
        for name, entry in sorted(self._loops.items()):
            fam.add_metric([name], float(entry.restarts))
        fam.add_metric(["event_loop"], float(self.loop_errors))
        yield fam
