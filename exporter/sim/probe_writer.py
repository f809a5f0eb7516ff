"""Simulated in-process probe: per-rank snapshot files in the real probe's format.

With HiCache on, every simulated request loads its prefix back layer by layer: one load per
c4 layer, one index-K read and one main-KV read per c4 layer. Main-KV reads are always gated;
index-K reads are gated only when the simulated deployment has the wait (by default fp8),
and ungated reads get a transfer gap that grows with concurrency (more loads in flight).
Sampled verification is on (1 read in 16 checksummed, as DSV4_PROBE_VERIFY would): an
ungated read whose layer was still loading compares unequal about half of the time.

Start-up memory (snapshot ``memory``) comes from the simulator's own ground truth, which the
sidecar is not told: the simulated release's configurator given the simulated budget, and the
device pool that release allocates for SGLang's token count (the minimum over PP stages, as
SGLang takes it) with the simulated index-K dtype, per rank's stage.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from exporter.footprint.pricing import indexer_bytes_per_token, stored_index_k_dtype
from exporter.probe.snapshot import HOOK_NAMES, ProbeCounters, write_snapshot
from exporter.sim.deployment import GIB, SimDeployment

log = logging.getLogger(__name__)

VERIFY_SAMPLE_RATE = 1 / 16
# What the real probe wraps on 0.5.23 (see docs/probe.md, the accessor table): every hook it
# knows but ``kv_swa``, whose accessor 0.5.23 replaced with the radix one. Checked against the
# probe attached to 0.5.23's own classes in tests/probe/test_release_probe.py.
HOOKS = tuple(h for h in HOOK_NAMES if h != "kv_swa")
INDEX_K_PAGE = 64  # slots per index-K page (the c4 page of a 256-token page)


def deployment_memory(dep: SimDeployment, rank: int) -> dict[str, Any]:
    """The ``memory`` section the real probe would write on ``rank`` of this deployment."""
    s = dep.settings
    tokens = dep.max_total_num_tokens
    stage = dep.footprints[rank // s.tp_size].stage
    budget = int(s.available_gib * GIB)
    fp = dep.true_footprint(rank)
    stored = stored_index_k_dtype(fp.settings, fp.rules)
    head_dim = dep.geometry.index_head_dim
    sizes = {
        "max_total_num_tokens": tokens,
        "full_max_total_num_tokens": tokens,
        "swa_max_total_num_tokens": fp.pools["swa_kv"].tokens,
        "c4_max_total_num_tokens": fp.pools["c4_kv"].tokens,
        "c128_max_total_num_tokens": fp.pools["c128_kv"].tokens,
        "c4_state_pool_size": fp.pools["c4_state"].tokens,
        "c128_state_pool_size": fp.pools["c128_state"].tokens,
    }
    return {
        "configurator": {
            "class": "DSV4PoolConfigurator",
            "method": "calculate_pool_sizes",
            "available_bytes": budget,
            "page_size": fp.settings.page_size,
            "bytes_per_full_token": fp.coefficients[s.configurator].total,
            "fixed_bytes": {"_get_c128_state_fixed_bytes": fp.c128_state_fixed_bytes},
            "sizes": sizes,
        },
        "pools": [
            {
                "class": "DeepSeekV4TokenToKVPool",
                "draft": False,
                "layers": [stage.start, stage.end],
                "tensors": 0,
                "bytes": {name: p.allocated_bytes for name, p in fp.pools.items()},
                "index_k": {
                    "dtype": stored,
                    "layout": "fused",
                    "bytes_per_slot": float(indexer_bytes_per_token(head_dim, stored)),
                    "page_size": INDEX_K_PAGE,
                    "head_dim": head_dim,
                },
            }
        ],
    }


class SimProbe:
    def __init__(
        self,
        directory: Path,
        ranks: int,
        c4_layers: int,
        gated: bool,
        seed: int = 0,
        memory: Sequence[dict[str, Any]] | None = None,
        nnodes: int = 1,
    ) -> None:
        self.directory = Path(directory)
        self.ranks = ranks
        # Multi-node: each node's ranks write on that node, so into node-<k>/ (one directory
        # per simulated node, for that node's sidecar); global rank k*per_node+i on node k.
        self.nnodes = nnodes
        self.c4_layers = c4_layers
        self.gated = gated
        self.counters = [self._fresh() for _ in range(ranks)]
        for counters, section in zip(self.counters, memory or (), strict=False):
            counters.memory = dict(section)
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

    def directory_of(self, rank: int) -> Path:
        if self.nnodes == 1:
            return self.directory
        return self.directory / f"node-{rank // (self.ranks // self.nnodes)}"

    def write(self) -> None:
        self.seq += 1
        for rank, c in enumerate(self.counters):
            self.directory_of(rank).mkdir(parents=True, exist_ok=True)
            write_snapshot(
                self.directory_of(rank),
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
                    self.directory_of(rank),
                    rank,
                    c,
                    pid=os.getpid(),
                    started_at=self.started,
                    seq=self.seq + 1,
                    closed=True,
                    probe_version="simulator",
                )
