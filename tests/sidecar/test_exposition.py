"""The /metrics cache: renders only after changes, pre-renders in the background, and serves
bytes at most ``max_stale`` old while a render is pending."""

from __future__ import annotations

import asyncio
import time

from prometheus_client import CollectorRegistry

from exporter.metrics import catalog as m
from exporter.metrics.exposition import Exposition


class Counter:
    def __init__(self) -> None:
        self.value = 0.0

    def collect(self):
        yield m.GPU_COUNT.one(self.value)


def _setup(max_stale: float = 1.0) -> tuple[Exposition, Counter]:
    reg = CollectorRegistry(auto_describe=False)
    c = Counter()
    reg.register(c)
    return Exposition(reg, max_stale=max_stale), c


def test_renders_once_per_change_and_prerenders():
    async def scenario():
        expo, c = _setup()
        first = await expo.body(False, False)
        await expo.body(False, False)
        assert expo.renders == 1 and b"dsv4_gpus_visible 0.0" in first
        expo.start(debounce=0.01)
        c.value = 3
        expo.bump()
        await asyncio.sleep(0.2)  # the background render has run
        renders = expo.renders
        assert b"dsv4_gpus_visible 3.0" in await expo.body(False, False)
        assert expo.renders == renders  # served from the pre-rendered cache
        await expo.stop()

    asyncio.run(scenario())


def test_stale_bytes_only_while_young():
    async def scenario():
        expo, c = _setup(max_stale=0.3)
        await expo.body(False, False)
        expo.start(debounce=5)  # a long debounce: the pre-render stays pending
        c.value = 7
        expo.bump()
        await asyncio.sleep(0)
        assert b"dsv4_gpus_visible 0.0" in await expo.body(False, False)  # young: stale served
        time.sleep(0.35)
        assert b"dsv4_gpus_visible 7.0" in await expo.body(False, False)  # too old: re-rendered
        await expo.stop()

    asyncio.run(scenario())
