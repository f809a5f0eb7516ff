"""The contract every background source follows.

A source polls something slow or fallible (NVML, SGLang over HTTP, probe files) on its own
schedule and keeps only its latest snapshot. ``collect()`` turns that snapshot into metric
families and must never do I/O: a scrape never waits on a source. A failing source marks
itself down with a bounded reason and keeps retrying; it never takes the others down.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from prometheus_client.core import Metric

from exporter.metrics import catalog as m


@dataclass
class SourceHealth:
    """Self-health of one source; the sidecar exports every source's health as the one
    ``dsv4_source_*{source}`` family (see :func:`health_families`)."""

    name: str
    # Samplers (the canary) report health but must not hold back readiness: a slow model
    # answer would otherwise keep the pod, and the tap's traffic, out of service.
    gates_readiness: bool = True
    up: bool = False
    cycles: int = 0
    last_success: float | None = None
    last_error: str | None = None
    last_duration: float | None = None
    errors: dict[str, int] = field(default_factory=dict)
    # what the source read but did not keep (a family past its cap): a health fact, so it is
    # exported with the others even when the source's own collect() fails
    samples_dropped: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def success(self, duration: float) -> None:
        with self._lock:
            self.up = True
            self.cycles += 1
            self.last_success = time.time()
            self.last_duration = duration
            self.last_error = None

    def failure(self, reason: str, detail: str, duration: float | None = None) -> None:
        """Count a failure under a bounded ``reason`` (a label value) with free-text detail."""
        with self._lock:
            self.up = False
            self.cycles += 1
            self.errors[reason] = self.errors.get(reason, 0) + 1
            self.last_error = f"{reason}: {detail}"
            if duration is not None:
                self.last_duration = duration

    def count_error(self, reason: str, detail: str) -> None:
        """Count a failure of a secondary fetch without marking the whole source down."""
        with self._lock:
            self.errors[reason] = self.errors.get(reason, 0) + 1
            self.last_error = f"{reason}: {detail}"

    def drop_samples(self, n: int) -> None:
        """Count samples read but not kept (past a per-family cap); the source stays up."""
        if n:
            with self._lock:
                self.samples_dropped += n

    def as_json(self) -> dict[str, Any]:
        with self._lock:
            return {
                "up": self.up,
                "ready": self.cycles > 0 or not self.gates_readiness,
                "cycles": self.cycles,
                "last_success_timestamp": self.last_success,
                "last_error": self.last_error,
                "last_duration_seconds": self.last_duration,
                "errors": dict(self.errors),
                "samples_dropped": self.samples_dropped,
            }


def health_families(healths: Iterable[SourceHealth]) -> Iterator[Metric]:
    """``dsv4_source_up``, ``_errors_total{reason}``, ``_last_success_timestamp_seconds``,
    ``_poll_duration_seconds`` and ``_samples_dropped_total``, one series per source under the
    label ``source``: one family for all sources (node_exporter's ``node_scrape_collector_*``
    shape), so a new source needs no new metric and a rule written for one source works for
    every other."""
    up = m.SOURCE_UP.family()
    errors = m.SOURCE_ERRORS.family()
    last = m.SOURCE_LAST_SUCCESS.family()
    duration = m.SOURCE_DURATION.family()
    dropped = m.SOURCE_SAMPLES_DROPPED.family()
    for h in healths:
        with h._lock:
            counts = sorted(h.errors.items())
            is_up, last_success, last_duration = h.up, h.last_success, h.last_duration
            samples_dropped = h.samples_dropped
        up.add_metric([h.name], 1.0 if is_up else 0.0)
        dropped.add_metric([h.name], float(samples_dropped))
        for reason, n in counts:
            errors.add_metric([h.name, reason], float(n))
        if last_success is not None:
            last.add_metric([h.name], last_success)
        if last_duration is not None:
            duration.add_metric([h.name], last_duration)
    yield from (up, errors, last, duration, dropped)


class Reporter(Protocol):
    """What the app reads from anything it reports on: health and metric families."""

    health: SourceHealth

    def collect(self) -> Iterable[Metric]:
        """Metric families from the latest snapshot; cheap, no I/O."""


class Source(Reporter, Protocol):
    """A reporter with a polling loop of its own."""

    async def run(self, stop: asyncio.Event) -> None:
        """Poll until ``stop`` is set; never raises."""
