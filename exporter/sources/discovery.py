"""Which serving engine the sidecar sits beside: configured, or discovered from the server.

The engine decides which source reads the server, the DSML dialect and whether the KV
footprint is modelled (:mod:`exporter.sources.engine`). It is a deployment fact, exported with
where it came from (``dsv4_engine_info``):

- ``configured``: the ``engine`` setting names a row of the engine table;
- ``discovered`` (``engine: auto``): the table is walked in order; each engine's probes are
  fetched (each path once a cycle) and the first engine whose answers are its own wins. Until
  one answers, ``unknown``; the poller retries every cycle and stops once it knows.

:func:`engine_of` is the pure decision; :class:`EngineDiscovery` the thin poller.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client.core import Metric

from exporter.metrics import catalog as m
from exporter.sources import bounded
from exporter.sources import engines as table
from exporter.sources import reasons as source_reasons
from exporter.sources.engine import Answers, Engine, Probe, footprint_fact
from exporter.sources.poller import HttpPoller, PollError, poll_forever

# Failures that still mean a server answered (not this engine's endpoint, or not its shape).
_ANSWERED = ("http_status", "bad_json", bounded.TOO_DEEP)


def engine_of(answers: Answers, engines: tuple[Engine, ...] | None = None) -> Engine | None:
    """The first engine of ``engines`` (the table's, by default) whose probes all have
    answers here and are its own (None: none answered as itself yet)."""
    for engine in table.ENGINES if engines is None else engines:
        if all(p.path in answers for p in engine.probes) and engine.identify(answers):
            return engine
    return None


class EngineDiscovery(HttpPoller):
    """Holds the engine fact; with ``engine: auto``, polls until the server says which it is
    and then calls ``on_found(engine)`` once."""

    def __init__(
        self,
        setting: str,
        base_url: str,
        *,
        poll_interval: float = 5.0,
        timeout: float = 2.0,
        on_found: Callable[[Engine], None] | None = None,
        engines: tuple[Engine, ...] | None = None,
    ) -> None:
        """``engines``: the rows walked, the table's (read now, so a row added to it counts)
        by default."""
        super().__init__(
            "engine",
            base_url,
            poll_interval=poll_interval,
            timeout=timeout,
            reasons=source_reasons.names("engine"),
            max_body_bytes=bounded.METRICS_MAX_BYTES,
        )
        self.engines = table.ENGINES if engines is None else engines
        self.health.gates_readiness = False  # the engine source gates readiness, not this
        self.found: Engine | None = (
            None if setting == "auto" else table.by_name(setting, self.engines)
        )
        self.source = "unknown" if setting == "auto" else "configured"
        self._on_found = on_found or (lambda engine: None)

    @property
    def engine(self) -> str | None:
        """The engine's name, None until known."""
        return self.found.name if self.found is not None else None

    async def run(self, stop: asyncio.Event) -> None:
        try:
            await poll_forever(
                stop, self.poll_once, self.poll_interval, until=lambda: self.found is not None
            )
        finally:
            await self.aclose()

    async def poll(self) -> None:
        answers: dict[str, Any] = {}
        found = None
        for engine in self.engines:
            for probe in engine.probes:
                if probe.path not in answers:
                    answers[probe.path] = await self._answer(probe)
            # identify off the loop: a probe may be a whole /metrics body to read
            found = await self.offload(engine_of, answers, (engine,))
            if found is not None:
                break
        if found is None:
            names = ", ".join(e.name for e in self.engines)
            raise PollError("undecided", f"no engine answered as itself ({names})")
        self.found, self.source = found, "discovered"
        self._on_found(found)

    async def _answer(self, probe: Probe) -> Any:
        """The probe's answer; None when the server answered unusably; PollError when it did
        not answer (unreachable, timeout: that is the reason, not undecided)."""
        if probe.kind == "text":
            reply = await self.get(probe.path, bounded.METRICS_MAX_BYTES)
            if reply.status != 200:
                return None
            return await self.offload(reply.body.decode, "utf-8", "replace")
        try:
            return await self.get_json(probe.path, bounded.SERVER_INFO_MAX_BYTES)
        except PollError as exc:
            if exc.reason not in _ANSWERED:
                raise
            return None

    def collect(self) -> Iterable[Metric]:
        yield m.ENGINE_INFO.info(
            {
                "engine": self.engine or "unknown",
                "source": self.source,
                "footprint": footprint_fact(self.found),
            }
        )
