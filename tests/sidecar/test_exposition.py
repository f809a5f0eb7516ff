"""The /metrics cache: renders only after changes, pre-renders in the background, and serves
bytes at most ``max_stale`` old while a render is pending."""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry

from exporter.metrics import catalog as m
from exporter.metrics.exposition import Exposition
from tests.support import settle


class Counter:
    def __init__(self) -> None:
        self.value = 0.0

    def collect(self):
        yield m.GPU_COUNT.one(self.value)


class Clock:
    """A monotonic clock the test steps: a cache's age without sleeping."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _setup(max_stale: float = 1.0, clock: Clock | None = None) -> tuple[Exposition, Counter]:
    reg = CollectorRegistry(auto_describe=False)
    c = Counter()
    reg.register(c)
    return Exposition(reg, max_stale=max_stale, clock=clock or Clock()), c


def test_renders_once_per_change_and_prerenders():
    async def scenario():
        expo, c = _setup()
        first = await expo.body(False, False)
        await expo.body(False, False)
        assert expo.renders == 1 and b"dsv4_gpus_visible 0.0" in first
        expo.start(debounce=0.01)
        c.value = 3
        expo.bump()
        assert await settle(lambda: expo.renders == 2)  # the background render has run
        renders = expo.renders
        assert b"dsv4_gpus_visible 3.0" in await expo.body(False, False)
        assert expo.renders == renders  # served from the pre-rendered cache
        await expo.stop()

    asyncio.run(scenario())


def test_stale_bytes_only_while_young():
    async def scenario():
        clock = Clock()
        expo, c = _setup(max_stale=0.3, clock=clock)
        await expo.body(False, False)
        expo.start(debounce=5)  # a long debounce: the pre-render stays pending
        c.value = 7
        expo.bump()
        await asyncio.sleep(0)
        assert b"dsv4_gpus_visible 0.0" in await expo.body(False, False)  # young: stale served
        clock.now += 0.35
        assert b"dsv4_gpus_visible 7.0" in await expo.body(False, False)  # too old: re-rendered
        await expo.stop()

    asyncio.run(scenario())
