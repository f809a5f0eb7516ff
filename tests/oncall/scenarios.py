"""The triage scenarios: a simulated SGLang, the real sidecar beside it, load through the
sidecar's ingest API, all on loopback. Shared by the tests and the screenshot helper."""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from exporter.app import create_app
from exporter.config_loader import load_settings
from exporter.loadgen import Exchange, LoadGenerator
from exporter.sim.server import create_sim_app
from exporter.sim.settings import SimSettings
from tests.support import ServerThread, promql, wait_for

SAMPLES_TOKEN = "triage-test-token"

# name -> (simulator settings, sidecar settings, load levels, requests per level)
SCENARIOS: dict[str, dict[str, Any]] = {
    # bf16 index-K priced as fp8 by the legacy configurator, HiCache off: over-commit only
    "overcommit": {
        "sim": {"index_k_dtype": "bf16", "hicache": "off", "configurator": "legacy"},
        "sidecar": {"index_k_dtype": "bf16"},
        "levels": ((1, 15), (16, 30)),
    },
    # bf16 + HiCache + legacy with the probe: the transfer race (and the over-commit)
    "race": {
        "sim": {"index_k_dtype": "bf16", "hicache": "on", "configurator": "legacy"},
        "sidecar": {"index_k_dtype": "bf16"},
        "probe": True,
        "levels": ((1, 60), (8, 100), (32, 100), (64, 140)),
    },
    # fp8 index-K, HiCache off, fixed configurator: nothing wrong
    "clean": {
        "sim": {"index_k_dtype": "fp8", "hicache": "off", "configurator": "fixed"},
        "sidecar": {"index_k_dtype": "fp8"},
        "levels": ((1, 15), (16, 30)),
    },
}


@dataclass
class Stack:
    name: str
    sim: ServerThread
    sidecar: ServerThread
    probe_dir: Path | None
    graded: int = 0
    levels: tuple[tuple[int, int], ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def instance(self) -> str:
        return self.sidecar.url.removeprefix("http://")


@contextlib.contextmanager
def start_stack(name: str, *, ttft_ms: float = 40.0, tp_size: int = 4) -> Iterator[Stack]:
    spec = SCENARIOS[name]
    with contextlib.ExitStack() as stack:
        probe_dir = None
        if spec.get("probe"):
            probe_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="dsv4-probe-")))
        sim_settings = SimSettings(
            **spec["sim"],
            tp_size=tp_size,
            ttft_ms=ttft_ms,
            itl_ms=0,
            seed=11,
            probe_dir=probe_dir,
        )
        sim = stack.enter_context(ServerThread(create_sim_app(sim_settings)))
        settings = {
            "sglang_url": sim.url,
            "host": "127.0.0.1",  # as ServerThread binds: ingest answers without a token
            "gpu_backend": "fake",
            "sglang_poll_interval": 0.2,
            "nvml_poll_interval": 0.5,
            "canary_interval": 2,
            "canary_concurrency": 1,
            "samples_token": SAMPLES_TOKEN,
            **spec["sidecar"],
        }
        if probe_dir is not None:
            settings.update(probe_dir=str(probe_dir), probe_stale_after=5)
        sidecar = stack.enter_context(ServerThread(create_app(load_settings(settings))))
        yield Stack(name, sim, sidecar, probe_dir, levels=spec["levels"])


async def drive(stack: Stack) -> int:
    """Real concurrency levels against the simulator; every answer is handed to the sidecar's
    ingest API with the concurrency it was sent at, as a gateway would. Returns the count."""
    gen = LoadGenerator(stack.sim.url, model="deepseek-ai/DeepSeek-V4-Flash", timeout=30)
    sent = 0
    async with httpx.AsyncClient(timeout=30) as client:
        for concurrency, requests in stack.levels:
            batch: list[dict[str, Any]] = []

            def hook(ex: Exchange, batch: list[dict[str, Any]] = batch) -> None:
                if ex.response is not None:
                    batch.append(
                        {
                            "response": ex.response,
                            "concurrency": ex.concurrency,
                            "tools": ex.request.get("tools"),
                            "grammar": "v4",
                        }
                    )

            await gen.run_level(concurrency, requests=requests, hook=hook)
            r = await client.post(stack.sidecar.url + "/api/v1/samples", json={"samples": batch})
            r.raise_for_status()
            sent += r.json()["accepted"]
    stack.graded = sent
    return sent


def drive_all(stacks: list[Stack]) -> None:
    async def main() -> None:
        await asyncio.gather(*(drive(s) for s in stacks))

    asyncio.run(main())


def wait_scraping(prom_url: str, stacks: list[Stack], timeout: float = 30.0) -> None:
    """Prometheus activates static targets a few seconds after start: load sent before the
    first scrape would be invisible to increase() (a counter's first sample is its start)."""

    def scraped() -> bool:
        for s in stacks:
            rows = promql(prom_url, f'up{{instance="{s.instance}"}}')
            if not rows or rows[0]["value"][1] != "1":
                return False
        return True

    wait_for(scraped, timeout=timeout, interval=0.25)


def wait_counted(prom_url: str, stacks: list[Stack], timeout: float = 30.0) -> None:
    """Until Prometheus has scraped every ingested sample of every stack."""

    def counted() -> bool:
        for s in stacks:
            q = f'sum(dsv4_dsml_samples_total{{instance="{s.instance}", source="ingest"}})'
            rows = promql(prom_url, q)
            if not rows or float(rows[0]["value"][1]) < s.graded:
                return False
        return True

    wait_for(counted, timeout=timeout, interval=0.25)
