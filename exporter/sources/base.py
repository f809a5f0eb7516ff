"""The contract every background source follows.

A source polls something slow or fallible (NVML, SGLang over HTTP, probe files) on its own
schedule and keeps only its latest snapshot. ``collect()`` turns that snapshot into metric
families and must never do I/O: a scrape never waits on a source. A failing source marks
itself down with a bounded reason and keeps retrying; it never takes the others down.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from prometheus_client.core import Metric


@dataclass
class SourceHealth:
    """Self-health of one source, exported as *_up / *_last_success_timestamp_seconds / errors."""

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

    def families(self, up: Any, errors: Any, last_success: Any) -> Iterable[Metric]:
        """The self-health series every source exports: ``*_up``, ``*_errors_total{reason}``
        (all known reasons, zero-initialised), ``*_last_success_timestamp_seconds``."""
        yield up.one(1.0 if self.up else 0.0)
        with self._lock:
            counts = sorted(self.errors.items())
            last = self.last_success
        fam = errors.family()
        for reason, n in counts:
            fam.add_metric([reason], float(n))
        yield fam
        if last is not None:
            yield last_success.one(last)

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
            }


class Reporter(Protocol):
    """What the app reads from anything it reports on: health and metric families."""

    health: SourceHealth

    def collect(self) -> Iterable[Metric]:
        """Metric families from the latest snapshot; cheap, no I/O."""


class Source(Reporter, Protocol):
    """A reporter with a polling loop of its own."""

    async def run(self, stop: Any) -> None:
        """Poll until ``stop`` (an asyncio.Event) is set; never raises."""
