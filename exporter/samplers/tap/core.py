"""State shared by every connection of one tap: settings, counters, pool, sampler, sink."""

from __future__ import annotations

from typing import TYPE_CHECKING

from exporter.samplers.tap.config import TapConfig
from exporter.samplers.tap.sampling import CaptureBudget, Sampler, SampleSink
from exporter.samplers.tap.stats import TapStats
from exporter.samplers.tap.upstream import UpstreamPool

if TYPE_CHECKING:
    from exporter.samplers.tap.client import ClientConnection


class TapCore:
    """Plain attribute bag the hot path reads; built once per :class:`Tap`."""

    __slots__ = (
        "by_address",
        "capture_budget",
        "clients",
        "config",
        "pool",
        "sampler",
        "sink",
        "stats",
    )

    def __init__(self, config: TapConfig, stats: TapStats, sink: SampleSink) -> None:
        self.config = config
        self.stats = stats
        self.sink = sink
        self.sampler = Sampler(config.sample_rate, config.sample_seed, config.sample_paths)
        self.capture_budget = CaptureBudget(config.capture_budget_bytes)
        self.pool = UpstreamPool(
            config.upstream_host,
            config.upstream_port,
            stats,
            connect_timeout=config.connect_timeout,
            idle_timeout=config.upstream_idle_timeout,
            max_idle=config.max_idle_upstream,
        )
        self.clients: set[ClientConnection] = set()
        # open client connections per peer address (max_connections_per_client)
        self.by_address: dict[str, int] = {}
