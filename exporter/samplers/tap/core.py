"""State shared by every connection of one tap: settings, counters, pool, sampler, sink."""

from __future__ import annotations

from typing import Generic, TypeVar

from exporter.samplers.tap import relay
from exporter.samplers.tap.config import TapConfig
from exporter.samplers.tap.sampling import CaptureBudget, Sampler, SampleSink
from exporter.samplers.tap.stats import TapStats
from exporter.samplers.tap.upstream import UpstreamPool

# The client connection type (``exporter.samplers.tap.client.ClientConnection``), a parameter
# so this module, which the connections import, does not import them back (no import cycle).
# Covariant: an exchange reads the core's settings and pool and never touches ``clients``.
ClientT_co = TypeVar("ClientT_co", covariant=True)


class TapCore(Generic[ClientT_co]):
    """Plain attribute bag the hot path reads; built once per :class:`Tap`."""

    __slots__ = (
        "by_address",
        "capture_budget",
        "clients",
        "config",
        "pool",
        "relay",
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
        self.pool = UpstreamPool.for_config(config, stats)
        self.clients: set[ClientT_co] = set()
        # open client connections per peer address (max_connections_per_client)
        self.by_address: dict[str, int] = {}
        # chunked answers relayed in C (relay.py decides; tests turn it off to run the Python
        # path, its reference, on the same cases)
        self.relay = relay.ENABLED
