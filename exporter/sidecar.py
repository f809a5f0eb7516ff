"""The sidecar's composition root: builds the sources from settings and wires them together.

Kept separate from the HTTP edge (``exporter.app``) so tests and the demo can drive sources
directly. Sources run as asyncio tasks; each reports changes to the exposition cache, and the
SGLang and NVML sources also trigger a recomputation of the footprint view.

The engine seam: one engine source reads the server, that of a row of the engine table
(:data:`exporter.sources.engines.ENGINES`) named by the ``engine`` setting or discovered
(:class:`EngineDiscovery`; until it knows, the first row's source runs, SGLang's, as before the
seam). Once another engine is found, that loop ends and the found engine's starts. Nothing here
names an engine: what differs between engines is the row's.
"""

from __future__ import annotations

import asyncio
import json
import logging
import platform
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric

from exporter import __version__
from exporter.config import SidecarSettings
from exporter.dsml import KERNEL as DSML_KERNEL
from exporter.dsml import accel as dsml_accel
from exporter.metrics import catalog as m
from exporter.metrics.exposition import Exposition
from exporter.samplers.canary import CanaryProber, LongProfile, long_interval
from exporter.samplers.grading import GradingPipeline, TapHandoff
from exporter.samplers.prompts import load_prompts
from exporter.samplers.redact import Redactor
from exporter.samplers.store import SampleStore
from exporter.sources import engines, gpu_backends
from exporter.sources.base import Reporter, Source, health_families
from exporter.sources.discovery import EngineDiscovery
from exporter.sources.engine import Engine, EnginePoll, EngineSource
from exporter.sources.footprint import FootprintView
from exporter.sources.nvml import NvmlLibrary, NvmlSource
from exporter.sources.probe_drift import ModelDrift
from exporter.sources.probe_files import ProbeFileSource
from exporter.sources.reconcile import MemoryReconciliation
from exporter.sources.sglang import RankMemory
from exporter.supervisor import CrashHook, LoopFactory, TaskSupervisor

if TYPE_CHECKING:
    from exporter.samplers.tap import Tap

log = logging.getLogger(__name__)


class Sidecar:
    """Owns every source, the registry and the background tasks."""

    def __init__(
        self,
        settings: SidecarSettings,
        nvml: NvmlLibrary | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.settings = settings
        self.registry = CollectorRegistry(auto_describe=False)
        self.exposition = Exposition(self.registry)
        poll = EnginePoll(
            settings.sglang_poll_interval,
            settings.sglang_timeout,
            scrape_metrics=settings.sglang_metrics,
            on_change=self._changed,
        )
        # every engine's source, built from its row; one of them runs
        self.servers: dict[str, EngineSource] = {
            e.name: e.source(settings.server_url, poll) for e in engines.ENGINES
        }
        self.engine = EngineDiscovery(
            settings.engine,
            settings.server_url,
            on_found=self._engine_found,
            poll_interval=poll.poll_interval,
            timeout=poll.timeout,
        )
        # each engine source's loop ends on its own event too: the one not chosen stops
        self._engine_stop = {name: asyncio.Event() for name in self.servers}
        self.footprint = FootprintView(settings, env=env)
        if nvml is None:
            # nvml: the real library; any other backend is a plugin (the simulator's "fake"),
            # loaded by name so this composition root never imports it.
            nvml = gpu_backends.create(settings)
        self.nvml = NvmlSource(
            nvml=nvml,
            poll_interval=settings.nvml_poll_interval,
            timeout=settings.nvml_timeout,
            rank_map=settings.rank_map,
            per_process=settings.per_process_memory,
            env=env,
            on_change=self._changed,
            rank_base=self._rank_base,
        )
        server = self.server
        self.sources: dict[str, Reporter] = {
            "nvml": self.nvml,
            server.health.name: server,
            "footprint": self.footprint,
        }
        self.pollers: list[Source] = [self.nvml, server]
        if self.engine.engine is None:  # auto: discover it
            self.sources["engine"] = self.engine
            self.pollers.append(self.engine)
        self.probe: ProbeFileSource | None = None
        self.drift: ModelDrift | None = None
        if settings.probe_dir is not None:
            self.probe = ProbeFileSource(
                settings.probe_dir,
                stale_after_s=settings.probe_stale_after,
                on_change=self._changed,  # the probe's index-K dtype settles a fact
            )
            self.sources["probe"] = self.probe
            self.pollers.append(self.probe)
            self.drift = ModelDrift(self.footprint, self.probe)
        store = SampleStore(
            capacity=settings.samples_capacity,
            text_cap=settings.sample_text_cap,
            redactor=Redactor(settings.redact_patterns),
            max_bytes=settings.samples_max_bytes,
        )
        self.pipeline = GradingPipeline(
            store,
            settings.grading_queue,
            on_change=self.exposition.bump,
            max_pending_bytes=settings.grading_queue_bytes,
            worker="process",  # grading never holds the GIL of the loop the tap serves on
        )
        self._model_config = _read_model_config(settings.model_config_path)
        self.pipeline.dialect = lambda: self.dsml_dialect()[0]
        self.tap: Tap | None = None
        if settings.tap_port is not None:
            from exporter.samplers.tap import Tap

            self.tap = Tap(
                settings.tap_config(settings.server_url),
                on_sample=TapHandoff(self.pipeline),
            )
        self.canary: CanaryProber | None = None
        if settings.canary:
            self.canary = CanaryProber(
                settings.server_url,
                self.pipeline,
                interval=settings.canary_interval,
                concurrency=settings.canary_concurrency,
                timeout=settings.canary_timeout,
                prompts=load_prompts(settings.canary_prompts_file),
                model=self.served_model,
                concurrency_now=self.server_running,
                max_tokens=settings.canary_max_tokens,
                on_change=self.exposition.bump,
                long=_long_profile(settings),
            )
            self.sources["canary"] = self.canary
            self.pollers.append(self.canary)
        self.reconciliation = MemoryReconciliation(_ReconcileInputs(self))
        self.registry.register(_Collector(self))
        self._stop = asyncio.Event()
        self.supervisor = TaskSupervisor(self._stop)

    @property
    def engine_row(self) -> Engine:
        """The engine's row: the configured or discovered one, until known the table's first
        (SGLang's, whose source ran before the seam)."""
        return self.engine.found or engines.ENGINES[0]

    @property
    def server(self) -> EngineSource:
        """The source of the engine's server."""
        return self.servers[self.engine_row.name]

    def dsml_dialect(self) -> tuple[str | None, str]:
        """(the deployment's DSML dialect or None for auto, where it came from), as the
        engine's row reads its parser (engine-qualified under vLLM: ``v4@vllm``)."""
        return self.engine_row.dialect(self.settings.dsml_dialect, self.server, self._model_config)

    def served_model(self) -> str | None:
        """The name clients send as ``model`` (the canary too), from the engine's source."""
        return self.server.served_model()

    def _engine_found(self, engine: Engine) -> None:
        """Discovery's answer: its own health leaves the scrape (the fact stays in
        dsv4_engine_info); when the found engine is not the one whose source ran until now,
        that source leaves and the found engine's takes its place. ``sources`` is replaced,
        never changed in place: a scrape renders in a worker thread and may be iterating the
        old one."""
        new = self.servers[engine.name]
        old = [s for s in self.servers.values() if s is not new and s.health.name in self.sources]
        gone = {"engine", *(s.health.name for s in old)}
        keep = {n: s for n, s in self.sources.items() if n not in gone}
        self.sources = {**keep, engine.name: new}
        if not old:
            return
        for src in old:
            self._engine_stop[src.health.name].set()
        self.pollers = [p for p in self.pollers if p not in old] + [new]
        self.supervisor.spawn(engine.name, self._loop_of(new), self._crash_hook(new))
        self._changed()

    def _rank_base(self, local_gpus: int) -> int:
        """Global rank of this node's first GPU: node_rank * gpus_per_node (SGLang's launch
        order, exporter.topology), gpus_per_node from SGLang's TP x PP / nnodes once known,
        else the GPUs this node reads."""
        node = self.settings.node_rank
        if node == 0:
            return 0
        topo = self.footprint.topology
        return node * (topo.gpus_per_node if topo is not None else local_gpus)

    def server_running(self) -> int | None:
        """Concurrency right now as the engine reports it (sglang:num_running_reqs, or
        vllm:num_requests_running)."""
        return self.server.running()

    def _changed(self) -> None:
        row = self.engine_row
        if not row.footprint_modelled:
            self.footprint.engine_not_modelled(row.name)
            self.exposition.bump()
            return
        self.footprint.refresh(
            self.server.footprint_facts(),
            self.nvml.total_bytes_by_rank(),
            self.nvml.free_bytes_by_rank(),
            gpu_used=self.nvml.used_bytes_by_rank(),
            memory=self.server.memory_by_rank(),
            probe_index_k=self.probe.index_k_by_rank() if self.probe is not None else None,
            probe_pools=self.probe.measured_pools_by_rank() if self.probe is not None else None,
        )
        self.exposition.bump()

    async def start(self) -> None:
        self._stop.clear()
        for name, event in self._engine_stop.items():
            if name in self.sources:
                event.clear()
        self.supervisor.install(asyncio.get_running_loop())
        self.exposition.start()
        self.pipeline.start()
        if DSML_KERNEL != "c":
            why = dsml_accel.WHY or (
                "its C accelerator was not built (no C compiler at install time)"
                if not dsml_accel.available()
                else f"{dsml_accel.ENV} chose it"
            )
            log.warning(
                "the DSML grader's text passes run in pure Python: %s; grading is slower on "
                "clean text, results are the same",
                why,
            )
        port = self.settings.tap_port
        if self.tap is not None and port is not None:  # the tap exists only with a port
            host = self.settings.tap_host or self.settings.host
            await self.tap.start(host, port)
            log.info("tap listening on %s:%s -> %s", host, self.tap.port, self.settings.server_url)
        for src in self.pollers:
            self.supervisor.spawn(src.health.name, self._loop_of(src), self._crash_hook(src))

    def _loop_of(self, src: Source) -> LoopFactory:
        """A fresh ``src.run`` coroutine per (re)start, as the supervisor needs; an engine
        source's loop also ends when the other engine is discovered."""
        stop = self._engine_stop.get(src.health.name, self._stop)
        return lambda: src.run(stop)

    def _crash_hook(self, src: Source) -> CrashHook:
        """What a crashed loop leaves behind: its source down with reason ``internal_error``
        (the supervisor counts, logs once and restarts it)."""

        def hook(exc: BaseException) -> None:
            src.health.failure("internal_error", type(exc).__name__)
            self.exposition.bump()

        return hook

    async def stop(self) -> None:
        self._stop.set()
        for event in self._engine_stop.values():
            event.set()
        if self.tap is not None:
            await self.tap.stop()
        await self.supervisor.stop(grace=3.0)
        asyncio.get_running_loop().set_exception_handler(None)
        await self.exposition.stop()
        await asyncio.to_thread(self.pipeline.stop)

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        status = {name: src.health.as_json() for name, src in self.sources.items()}
        ready = all(s["ready"] for s in status.values())
        return ready, status


class _Collector:
    """Chains every source's families plus the sidecar's own; no I/O at scrape time."""

    def __init__(self, sidecar: Sidecar) -> None:
        self.sidecar = sidecar

    def collect(self) -> Iterable[Metric]:
        """Every part's families, each part behind its own guard (node_exporter's model): a
        source whose ``collect()`` raises is marked down for this scrape with the reason
        ``collect_error`` and left out; the scrape serves everything else."""
        sc = self.sidecar
        yield m.BUILD_INFO.info(
            {
                "version": __version__,
                "python": platform.python_version(),
                "dsml_kernel": DSML_KERNEL,
            }
        )
        sources = sc.sources  # one snapshot per scrape: discovery may swap the engine's source
        by_source = [(src, _guarded(src.collect, src.health.name)) for src in sources.values()]
        for src, fams in by_source:
            if fams is None:
                src.health.failure("collect_error", "collect() raised; see the sidecar's log")
        yield from health_families(src.health for src in sources.values())
        for _, fams in by_source:
            yield from fams or ()
        parts: list[tuple[str, Any]] = [
            ("reconciliation", sc.reconciliation.collect),
            ("grading", sc.pipeline.collect),
            ("supervisor", sc.supervisor.collect),
            ("dialect", self._dialect),
        ]
        if "engine" not in sources:  # configured or known: the fact without a discovery source
            parts.append(("engine", sc.engine.collect))
        if sc.drift is not None:
            parts.insert(0, ("drift", sc.drift.collect))
        if sc.tap is not None:
            parts.append(("tap", sc.tap.collect))
        for name, collect in parts:
            yield from _guarded(collect, name) or ()

    def _dialect(self) -> Iterable[Metric]:
        dialect, source = self.sidecar.dsml_dialect()
        rules = self.sidecar.engine_row.dialect_rules(self.sidecar.server)
        yield m.DSML_DIALECT_INFO.info(
            {"dialect": dialect or "auto", "source": source, "engine_rules": rules}
        )


def _guarded(collect: Any, part: str) -> list[Metric] | None:
    """``collect()``'s families, or None when it raised (logged by type: no data in logs)."""
    try:
        return list(collect())
    except Exception as exc:
        log.warning("collecting %s failed: %s", part, type(exc).__name__)
        return None


class _ReconcileInputs:
    """The latest snapshots the memory reconciliation splits NVML's used memory with."""

    def __init__(self, sidecar: Sidecar) -> None:
        self.sc = sidecar

    def used_by_rank(self) -> dict[int, int]:
        return self.sc.nvml.used_bytes_by_rank()

    def memory_by_rank(self) -> dict[int, RankMemory]:
        return self.sc.server.memory_by_rank()

    def measured_pools_by_rank(self) -> dict[int, int]:
        probe = self.sc.probe
        if probe is None:
            return {}
        return {r: sum(pools.values()) for r, pools in probe.measured_pools_by_rank().items()}

    def predicted_pools_by_rank(self) -> dict[int, int]:
        fp = self.sc.footprint
        return fp.allocated_by_rank() if fp.status == "ok" else {}


def _read_model_config(path: Path | None) -> dict[str, Any] | None:
    """The model's config.json for the DSML dialect (read once at start-up; unreadable is
    unknown: the footprint source reports a bad path, this only loses a hint)."""
    if path is None:
        return None
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _long_profile(settings: SidecarSettings) -> LongProfile | None:
    """The long-generation canary profile, its interval raised to the token budget."""
    if not settings.canary_long:
        return None
    return LongProfile(
        prompts=load_prompts(settings.canary_long_prompts_file, "canary_long_prompts.json"),
        concurrency=settings.canary_long_concurrency,
        max_tokens=settings.canary_long_max_tokens,
        interval=long_interval(
            settings.canary_long_interval,
            settings.canary_long_concurrency,
            settings.canary_long_max_tokens,
            settings.canary_long_tokens_per_hour,
        ),
    )
