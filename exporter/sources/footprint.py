"""The over-commit view: SGLang's actual token counts priced by the footprint model.

Not a poller: it recomputes whenever the SGLang or NVML source reports a change. It resolves
the deployment facts SGLang does not report (index-K dtype, compress-state dtype, online
compress, configurator variant) from the sidecar's config and SGLang's own environment
variables, picks the release's rules from the version in ``/server_info``, finds the model
geometry (config.json, preset, or served-name match), and prices SGLang's
max_total_num_tokens per rank: planned by the deployed configurator, allocated by the device
pool, and the reserve the difference is taken from (or, under-committed, the budget that is
never allocated). A deployment switch the model does not reproduce yields
``not_modelled`` and no numbers.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from prometheus_client.core import Metric

from exporter.config import SidecarSettings
from exporter.footprint import (
    NOT_MODELLED_SWITCHES,
    Footprint,
    GeometryError,
    ModelGeometry,
    RuleChoice,
    SettingsError,
    VersionError,
    footprint_for_tokens,
    load_config_json,
    not_modelled,
    preset_for_served_name,
    resolve_model,
    rules_for_version,
    stage_slice,
)
from exporter.footprint.facts import (
    FACTS,
    DeploymentFacts,
    Evidence,
    resolve_facts,
    settle,
)
from exporter.footprint.launch import LaunchError, launch_from_server_args, resolve
from exporter.footprint.refusals import Refused
from exporter.metrics import catalog as m
from exporter.sources import reasons as source_reasons
from exporter.sources.base import SourceHealth
from exporter.sources.sglang import RankMemory, ServerFacts
from exporter.topology import RankPlace, Topology, TopologyError, node_topology

log = logging.getLogger(__name__)

# "ok", then the reasons it is down for (declared in exporter/sources/reasons.py)
STATUS_REASONS = ("ok", *source_reasons.own("footprint"))


@dataclass(frozen=True)
class RankFootprint:
    rank: int
    footprint: Footprint
    reserve_bytes: int | None
    free_bytes: int | None
    place: RankPlace | None = None

    def to_json(self) -> dict[str, Any]:
        d = self.footprint.to_json()
        d["rank"] = self.rank
        if self.place is not None:
            d["node_rank"] = self.place.node_rank
            d["local_rank"] = self.place.local
            d["tp_rank"] = self.place.tp_rank
            d["pp_rank"] = self.place.pp_rank
        d["reserve_bytes"] = self.reserve_bytes
        d["reserve_remaining_bytes"] = (
            None
            if self.reserve_bytes is None
            else self.reserve_bytes - self.footprint.overcommit_bytes
        )
        d["gpu_free_bytes"] = self.free_bytes
        return d


class FootprintView:
    """Recomputed on source changes; ``collect()`` renders the latest result."""

    def __init__(self, cfg: SidecarSettings, env: Mapping[str, str] | None = None) -> None:
        self.cfg = cfg
        self.env = dict(os.environ) if env is None else dict(env)
        self.health = SourceHealth("footprint")
        self.status = "no_sglang"
        self.detail = "waiting for SGLang's /server_info"
        self.deployment: DeploymentFacts | None = None
        self.geometry: ModelGeometry | None = None
        self.geometry_source = ""
        self.ranks: list[RankFootprint] = []
        self.release: RuleChoice | None = None
        self.switches: tuple[str, ...] = ()
        self._geometry_key: str | None = None
        # This node's ranks (multi-node: only its own, labelled globally); None until known.
        self.topology: Topology | None = None
        self.topology_error = ""
        self.index_k_margin: dict[int, int] = {}
        self.inference_detail = ""
        # Read the model's config.json once, here (start-up), never on the event loop.
        self._config_geometry: ModelGeometry | None = None
        self._config_error = ""
        if cfg.model_config_path is not None:
            try:
                self._config_geometry = load_config_json(cfg.model_config_path)
            except GeometryError as exc:
                log.warning("model config unusable, falling back to presets: %s", exc)
                self._config_error = str(exc)

    def _geometry(self, facts: ServerFacts) -> ModelGeometry | None:
        key = f"{self.cfg.model_config_path}|{self.cfg.model_preset}|{facts.model_path}"
        if key == self._geometry_key:
            return self.geometry
        self._geometry_key = key
        self.geometry = None
        if self._config_geometry is not None:
            self.geometry = self._config_geometry
            self.geometry_source = f"config.json {self.cfg.model_config_path}"
            return self.geometry
        if self._config_error:
            self.detail = self._config_error
        if self.cfg.model_preset:
            self.geometry = resolve_model(self.cfg.model_preset)
            self.geometry_source = f"preset {self.cfg.model_preset} (config)"
            return self.geometry
        for name in (facts.model_path, facts.served_model_name):
            geom = preset_for_served_name(name)
            if geom is not None:
                self.geometry = geom
                self.geometry_source = f"preset {geom.name} (matched {name!r})"
                return geom
        return None

    def engine_not_modelled(self, engine: str) -> None:
        """The engine's pools are not what the model prices (vLLM's KV cache is its own
        allocator): status ``not_modelled``, no numbers, and the engine named."""
        self.release, self.topology = None, None
        self._down("not_modelled", f"not modelled: {engine}")

    def refresh(
        self,
        facts: ServerFacts | None,
        gpu_total: Mapping[int, int],
        gpu_free: Mapping[int, int],
        gpu_used: Mapping[int, int] | None = None,
        memory: Mapping[int, RankMemory] | None = None,
        probe_index_k: Mapping[int, str] | None = None,
        probe_pools: Mapping[int, Mapping[str, int]] | None = None,
    ) -> None:
        """Recompute from the latest SGLang facts and NVML readings. Pure and cheap (no I/O:
        config.json was read at construction), so it runs on the event loop.

        ``memory`` (SGLang's own memory figures per rank), ``gpu_used`` and ``probe_index_k``
        (the dtype the probe read off each rank's pool) settle facts nothing configured: the
        index-K dtype from the probe, else from memory reconciliation; the pricing from the
        budget SGLang's profiler gave the configurator."""
        if facts is None:
            self.release, self.topology = None, None
            self._down("no_sglang", "waiting for SGLang's /server_info")
            return
        try:
            topo = node_topology(
                facts.tp_size, facts.pp_size, facts.nnodes, self.cfg.nnodes, self.cfg.node_rank
            )
            self.topology, self.topology_error = topo, ""
        except TopologyError as exc:
            self.topology, self.topology_error = None, str(exc)
            self._down("bad_config", f"{exc}: check the node_rank / nnodes settings")
            return
        if gpu_total and topo.gpus_per_node > len(gpu_total):
            # /server_info is not believed past what this node can hold: a rank is a series
            # and a pricing per refresh, and more ranks than GPUs is a wrong nnodes or a lie.
            self._down(
                "bad_config",
                f"SGLang reports {topo.gpus_per_node} ranks per node (tp_size {facts.tp_size} "
                f"x pp_size {facts.pp_size} / nnodes {facts.nnodes}) but NVML sees "
                f"{len(gpu_total)} GPUs here: check SGLang's --nnodes and the pod's GPUs",
            )
            return
        geom = self._geometry(facts)
        if geom is None:
            self._down(
                "unknown_model",
                f"no geometry for model {facts.model_path!r}: set "
                "model_config_path or model_preset",
            )
            return
        if not facts.max_total_num_tokens:
            self._down("no_token_count", "SGLang reported no max_total_num_tokens")
            return
        dep = resolve_facts(self.cfg, facts, self.env)
        self.deployment = dep
        try:
            self.release = rules_for_version(facts.version)
        except VersionError as exc:
            self.release = None
            self._down("unsupported_version", str(exc))
            return
        try:
            # One translation (issue 33): SGLang's server args, as /server_info reports them,
            # go through launch.resolve as a launch pasted after `plan --` does, so the
            # release's defaults (requests per attention-DP worker, draft tokens, SWA ratio,
            # index-K dtype) have one place; the facts nothing reports (compress-state dtype,
            # online compress, the index-K dtype a fork stores) come from the deployment facts.
            args = facts.server_args()
            if geom.is_v41:
                # /server_info cannot say whether the SWA ratio was given: V4.1 is read as SWA
                # cap mode, SGLang's default for it (0.5.21+), and exported as assumed.
                args["swa_full_tokens_ratio"] = None
            resolved = resolve(
                launch_from_server_args(args, self.env), geom, self.release, dep.index_k_dtype
            )
            settings = replace(
                resolved.settings,
                compress_state_dtype=dep.compress_state_dtype,
                online_compress=dep.online_compress,
                unmodelled=tuple(dict.fromkeys((*dep.not_modelled, *resolved.not_modelled))),
            )
            # Only the stages this node holds: a PP stage's own layer slice per local rank.
            stages = {
                pp: stage_slice(geom, resolved.pp_size, pp, partition=resolved.partition)
                for pp in topo.pp_ranks()
            }
        except (SettingsError, GeometryError, LaunchError, Refused) as exc:
            self._down("bad_config", str(exc))
            return
        self.switches = not_modelled(geom, settings, self.release)
        if self.switches:
            self._down("not_modelled", "not modelled: " + ", ".join(self.switches))
            return
        assert self.release is not None
        settled = settle(
            dep,
            settings,
            facts,
            geom,
            self.release,
            topo.places(),
            stages,
            Evidence(
                gpu_total, gpu_used or {}, memory or {}, probe_index_k or {}, probe_pools or {}
            ),
        )
        dep, settings = settled.deployment, settled.settings
        self.index_k_margin, self.inference_detail = (
            settled.index_k_margin,
            settled.inference_detail,
        )
        self.deployment = dep
        # The core prices the configurator's own budget (recovered from the token count) by
        # real dtypes too: correct_full_tokens is the capacity the fix costs or frees.
        per_stage = {
            pp: footprint_for_tokens(
                geom,
                settings,
                dep.configurator,
                facts.max_total_num_tokens,
                stage,
                rules=self.release,
            )
            for pp, stage in stages.items()
        }
        ranks = []
        mfs = facts.mem_fraction_static
        for place in topo.places():
            total = gpu_total.get(place.rank)
            reserve = int(total * (1 - mfs)) if total and mfs else None
            ranks.append(
                RankFootprint(
                    place.rank, per_stage[place.pp_rank], reserve, gpu_free.get(place.rank), place
                )
            )
        self.ranks = ranks
        self.status, self.detail = "ok", ""
        self.health.success(0.0)

    def _down(self, status: str, detail: str) -> None:
        """Count an error per transition into a down state, not per recomputation."""
        if status != self.status or self.health.up or self.health.cycles == 0:
            log.warning("footprint unavailable: %s: %s", status, detail)
            self.health.failure(status, detail)
        self.status, self.detail, self.ranks = status, detail, []

    def allocated_by_rank(self) -> dict[int, int]:
        return {r.rank: r.footprint.allocated_bytes for r in self.ranks}

    def as_json(self) -> dict[str, Any]:
        dep = self.deployment
        return {
            "status": self.status,
            "detail": self.detail,
            "geometry_source": self.geometry_source,
            "deployment": None
            if dep is None
            else {
                "index_k_dtype": dep.index_k_dtype,
                "compress_state_dtype": dep.compress_state_dtype,
                "online_compress": dep.online_compress,
                "configurator": dep.configurator,
                "hicache": dep.hicache,
                "sources": dep.sources,
                "facts": {k: {"value": v, "source": src} for k, (v, src) in dep.facts.items()},
                "index_k_inference": {
                    "margin_bytes": {str(r): b for r, b in self.index_k_margin.items()},
                    "detail": self.inference_detail,
                },
                "not_modelled": list(dep.not_modelled),
            },
            "sglang_version": self.release.version if self.release else None,
            "rules": self.release.rules.name if self.release else None,
            "rules_verified": self.release.verified if self.release else None,
            "rules_note": self.release.note if self.release else None,
            "not_modelled": self._not_modelled(),
            "topology": self._topology_json(),
            "ranks": [r.to_json() for r in self.ranks],
        }

    def _topology_json(self) -> dict[str, Any] | None:
        """This node's place in the deployment: which ranks and stages it reports."""
        topo = self.topology
        if topo is None:
            return {"error": self.topology_error} if self.topology_error else None
        return {
            "tp_size": topo.tp_size,
            "pp_size": topo.pp_size,
            "nnodes": topo.nnodes,
            "node_rank": topo.node_rank,
            "gpus_per_node": topo.gpus_per_node,
            "ranks": [p.rank for p in topo.places()],
            "pp_ranks": list(topo.pp_ranks()),
        }

    def _not_modelled(self) -> list[str]:
        return list(self.switches) if self.status == "not_modelled" else []

    def collect(self) -> Iterable[Metric]:
        yield m.FOOTPRINT_STATUS.one(1.0 if self.status == "ok" else 0.0, [self.status])
        if self.release is not None:
            yield m.FOOTPRINT_RULES_UNVERIFIED.one(
                0.0 if self.release.verified else 1.0,
                [self.release.version, self.release.rules.name],
            )
            # Every known switch, 1 when in use: a bounded label set, present from the first
            # /server_info on, so "nothing unmodelled" is a 0 and not a missing series.
            in_use = set(self._not_modelled())
            fam = m.FOOTPRINT_NOT_MODELLED.family()
            for switch in NOT_MODELLED_SWITCHES:
                fam.add_metric([switch], 1.0 if switch in in_use else 0.0)
            yield fam
        if self.topology is not None:
            yield self._rank_info(self.topology)
        dep = self.deployment
        if self.status != "ok" or dep is None or not self.ranks:
            return
        fact_info = m.DEPLOYMENT_FACT.family()
        for name in FACTS:
            if name in dep.facts:
                fact_value, source = dep.facts[name]
                fact_info.add_metric([], {"fact": name, "value": fact_value, "source": source})
        yield fact_info
        if self.index_k_margin:
            margin = m.INDEX_K_INFERENCE_MARGIN.family()
            for margin_rank, gap in sorted(self.index_k_margin.items()):
                margin.add_metric([str(margin_rank)], float(gap))
            yield margin
        yield m.DEPLOYMENT_INFO.info(
            {
                "index_k_dtype": dep.index_k_dtype,
                "configurator": dep.configurator,
                "hicache": "true" if dep.hicache else "false",
                "model": self.geometry.name if self.geometry else "",
            }
        )
        bpt = m.KV_BYTES_PER_TOKEN.family()
        for pricing, value in sorted(self.ranks[0].footprint.bytes_per_full_token.items()):
            bpt.add_metric([pricing], value)
        yield bpt
        planned, alloc, tokens = (
            m.KV_POOL_PLANNED.family(),
            m.KV_POOL_ALLOCATED.family(),
            m.KV_POOL_TOKENS.family(),
        )
        over, correct = m.KV_POOL_OVERCOMMIT.family(), m.KV_CORRECT_TOKENS.family()
        reclaim = m.KV_POOL_RECLAIMABLE.family()
        device, device_over = m.KV_POOL_DEVICE.family(), m.KV_POOL_DEVICE_OVERCOMMIT.family()
        reserve, left = m.MEMORY_RESERVE.family(), m.MEMORY_RESERVE_LEFT.family()
        for r in self.ranks:
            rank = str(r.rank)
            fp = r.footprint
            for name, p in fp.pools.items():
                planned.add_metric([rank, name], float(p.planned_bytes))
                alloc.add_metric([rank, name], float(p.allocated_bytes))
                tokens.add_metric([rank, name], float(p.tokens))
            over.add_metric([rank], float(fp.overcommit_bytes))
            reclaim.add_metric([rank], float(fp.reclaimable_bytes))
            if fp.device is not None:
                device.add_metric([rank, "pytorch_allocated"], float(fp.device.allocated))
                device.add_metric([rank, "pytorch_reserved"], float(fp.device.reserved))
                device_over.add_metric([rank], float(fp.device.reserved - fp.planned_bytes))
            if fp.correct_full_tokens is not None:
                correct.add_metric([rank], float(fp.correct_full_tokens))
            if r.reserve_bytes is not None:
                reserve.add_metric([rank], float(r.reserve_bytes))
                left.add_metric([rank], float(r.reserve_bytes - fp.overcommit_bytes))
        yield from (planned, alloc, tokens, over, reclaim, device, device_over, correct)
        yield from (reserve, left)

    @staticmethod
    def _rank_info(topo: Topology) -> Metric:
        fam = m.RANK_INFO.family()
        for p in topo.places():
            fam.add_metric(
                [],
                {
                    "rank": str(p.rank),
                    "node_rank": str(p.node_rank),
                    "local_rank": str(p.local),
                    "tp_rank": str(p.tp_rank),
                    "pp_rank": str(p.pp_rank),
                },
            )
        return fam
