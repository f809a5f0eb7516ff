"""Simulated in-process probe: per-rank snapshot files in the real probe's format.

With HiCache on, every simulated request loads its prefix back layer by layer: one load per
c4 layer, one index-K read and one main-KV read per c4 layer. Main-KV reads are always gated;
index-K reads are gated only when the simulated deployment has the wait (by default fp8),
and ungated reads get a transfer gap that grows with concurrency (more loads in flight).
Sampled verification is on (1 read in 16 checksummed, as DSV4_PROBE_VERIFY would): an
ungated read whose layer was still loading compares unequal about half of the time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import time
from pathlib import Path

from exporter.probe.snapshot import ProbeCounters, write_snapshot

log = logging.getLogger(__name__)

VERIFY_SAMPLE_RATE = 1 / 16
HOOKS = (
    "layer_done_counter",
    "wait_layer_transfer",
    "get_index_k_with_scale_buffer",
    "get_index_k_scale_buffer",
    "get_swa_key_buffer",
)


class SimProbe:
    def __init__(
        self, directory: Path, ranks: int, c4_layers: int, gated: bool, seed: int = 0
    ) -> None:
        self.directory = Path(directory)
        self.ranks = ranks
        self.c4_layers = c4_layers
        self.gated = gated
        self.counters = [self._fresh() for _ in range(ranks)]
        self.started = time.time()
        self.seq = 0
        self._rng = random.Random(seed)

    @staticmethod
    def _fresh() -> ProbeCounters:
        c = ProbeCounters(
            gap_source="device_events", verify_enabled=True, verify_sample_rate=VERIFY_SAMPLE_RATE
        )
        c.hooks = dict.fromkeys(HOOKS, True)
        return c

    def request(self, concurrency: int) -> None:
        """Account one request's layer-wise load-back on every rank."""
        for c in self.counters:
            c.load_ops += 1
            for layer in range(self.c4_layers):
                c.count_load(layer)
                c.count_read(layer, index_k=False, gated=True)
                c.count_read(layer, index_k=True, gated=self.gated)
                if not self.gated:
                    # the layer's copy is still in flight when the read is enqueued
                    c.gap.observe(self._rng.expovariate(1.0) * 40e-6 * max(1, concurrency))
                if self._rng.random() < VERIFY_SAMPLE_RATE:
                    c.count_check(mismatch=not self.gated and self._rng.random() < 0.5)

    def write(self) -> None:
        self.seq += 1
        self.directory.mkdir(parents=True, exist_ok=True)
        for rank, c in enumerate(self.counters):
            write_snapshot(
                self.directory,
                rank,
                c,
                pid=os.getpid(),
                started_at=self.started,
                seq=self.seq,
                probe_version="simulator",
            )

    async def run(self, stop: asyncio.Event, interval: float = 1.0) -> None:
        while not stop.is_set():
            try:
                await asyncio.to_thread(self.write)
            except OSError as exc:
                log.warning("simulated probe cannot write %s: %s", self.directory, exc)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=interval)
        with contextlib.suppress(OSError):
            for rank, c in enumerate(self.counters):
                write_snapshot(
                    self.directory,
                    rank,
                    c,
                    pid=os.getpid(),
                    started_at=self.started,
                    seq=self.seq + 1,
                    closed=True,
                    probe_version="simulator",
                )
