"""Deployment facts the footprint depends on and SGLang does not report, and how each settles.

Pure (no I/O): the footprint view hands in the operator's choices, SGLang's reported server
args, SGLang's environment and the latest evidence; this module says what each fact is and
where it came from (``configured``, ``probe``, ``inferred``, ``assumed``: exported as
``dsv4_deployment_fact_info``). :func:`resolve_facts` is what is known before any evidence;
:func:`settle` replaces assumed facts by measured (probe) or inferred ones
(``exporter.footprint.inference``) where the evidence allows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, Protocol

from exporter.footprint.geometry import ModelGeometry, StageSlice
from exporter.footprint.inference import (
    MeasuredMemory,
    infer_index_k_dtype,
    infer_pricing,
    observed_kv_bytes,
)
from exporter.footprint.launch import default_index_k_dtype
from exporter.footprint.model import footprint_for_tokens
from exporter.footprint.pricing import BudgetError, available_bytes_from_gpu
from exporter.footprint.releases import RuleChoice
from exporter.footprint.settings import (
    INDEX_K_DTYPES,
    Configurator,
    DeploymentSettings,
    IndexKDtype,
    StateDtype,
)

# SGLang's own switches that turn on unified-KV ring pools (pool_configurator.py, 0.5.20+).
UNIFIED_KV_ENV = (
    "SGLANG_DSV4_UNIFIED_KV",
    "SGLANG_DSV4_UNIFIED_KV_TRITON",
    "SGLANG_DSV4_UNIFIED_KV_FP8",
)
TRUTHY = ("1", "true", "yes", "on")
# dsv4_deployment_fact_info: the facts and where a value can come from
FACTS = (
    "index_k_dtype",
    "pricing",
    "compress_state_dtype",
    "speculative",
    "release_rules",
    "swa_sizing",
)
FACT_SOURCES = ("configured", "probe", "inferred", "assumed")
# dtypes the NVML reconciliation tells apart (fp4 needs --enable-deepseek-v4-fp4-indexer on
# NVIDIA, which /server_info reports: configured, not inferred)
INFERABLE_INDEX_K: tuple[IndexKDtype, ...] = ("fp8", "bf16")
# The facts table holds strings (they are exported as label values); these turn a table entry
# back into the footprint core's Literal types without a cast.
_INDEX_K: dict[str, IndexKDtype] = {d: d for d in INDEX_K_DTYPES}
_PRICING: dict[str, Configurator] = {"legacy": "legacy", "fixed": "fixed"}


class FactChoices(Protocol):
    """The operator's choices ("auto" / None: not chosen); ``SidecarSettings`` is one."""

    @property
    def index_k_dtype(self) -> IndexKDtype | Literal["auto"]: ...
    @property
    def compress_state_dtype(self) -> StateDtype | Literal["auto"]: ...
    @property
    def online_compress(self) -> bool | None: ...
    @property
    def configurator(self) -> Configurator | Literal["auto"]: ...


class ReportedArgs(Protocol):
    """SGLang's server args as /server_info reports them (``sources.sglang.ServerFacts``)."""

    @property
    def fp4_indexer(self) -> bool: ...
    @property
    def speculative(self) -> bool: ...
    @property
    def speculative_algorithm(self) -> str | None: ...
    @property
    def hicache(self) -> bool: ...
    @property
    def max_total_num_tokens(self) -> int | None: ...
    @property
    def mem_fraction_static(self) -> float | None: ...


class Place(Protocol):
    """A rank of this node and its pipeline stage (``exporter.topology.RankPlace``)."""

    @property
    def rank(self) -> int: ...
    @property
    def pp_rank(self) -> int: ...


@dataclass(frozen=True)
class Settled:
    """Facts and settings after the evidence, and what the index-K inference saw."""

    deployment: DeploymentFacts
    settings: DeploymentSettings
    index_k_margin: dict[int, int]
    inference_detail: str


@dataclass(frozen=True)
class DeploymentFacts:
    """Resolved facts: where each came from is kept so /api/v1/footprint can explain them."""

    index_k_dtype: IndexKDtype
    compress_state_dtype: StateDtype
    online_compress: bool
    configurator: Configurator
    hicache: bool
    sources: dict[str, str]
    not_modelled: tuple[str, ...] = ()
    # fact -> (value, source in FACT_SOURCES), for dsv4_deployment_fact_info
    facts: dict[str, tuple[str, str]] = field(default_factory=dict)


def resolve_facts(cfg: FactChoices, facts: ReportedArgs, env: Mapping[str, str]) -> DeploymentFacts:
    """What is known before any evidence: the operator's choices, SGLang's own environment
    variables and server args, else the defaults (each fact's source kept for the table)."""
    src: dict[str, str] = {}
    ik: IndexKDtype
    sd: StateDtype
    conf: Configurator
    if cfg.index_k_dtype != "auto":
        ik, src["index_k_dtype"] = cfg.index_k_dtype, "config"
    else:
        # The default has one place (launch.default_index_k_dtype, which plan uses too).
        ik = default_index_k_dtype(env, facts.fp4_indexer)
        src["index_k_dtype"] = {
            "bf16": "env SGLANG_DSV4_BF16_INDEX_K",
            "fp4": "server_info enable_deepseek_v4_fp4_indexer",
        }.get(ik, "default")
    if cfg.compress_state_dtype != "auto":
        sd, src["compress_state_dtype"] = cfg.compress_state_dtype, "config"
    else:
        raw = env.get("SGLANG_DSV4_COMPRESS_STATE_DTYPE", "").lower()
        sd = "bfloat16" if raw in ("bfloat16", "bf16") else "float32"
        src["compress_state_dtype"] = "env" if raw else "default"
    if cfg.online_compress is not None:
        oc, src["online_compress"] = cfg.online_compress, "config"
    else:
        oc = env.get("SGLANG_OPT_USE_ONLINE_COMPRESS", "").lower() in TRUTHY
        src["online_compress"] = "env" if "SGLANG_OPT_USE_ONLINE_COMPRESS" in env else "default"
    if cfg.configurator != "auto":
        conf, src["configurator"] = cfg.configurator, "config"
    else:
        # Every upstream release (0.5.12-0.5.23) prices index-K as fp8 on NVIDIA, whatever
        # the pool stores; only a fork with the dtype-aware fix prices it by dtype, and the
        # server cannot tell us which fork it is: that one is a setting.
        conf, src["configurator"] = "legacy", "auto: upstream prices index-K as fp8"
    table = {
        "index_k_dtype": (ik, "assumed" if src["index_k_dtype"] == "default" else "configured"),
        "pricing": (conf, "configured" if src["configurator"] == "config" else "assumed"),
        "compress_state_dtype": (
            sd,
            "assumed" if src["compress_state_dtype"] == "default" else "configured",
        ),
        # a server arg /server_info reports
        "speculative": ("true" if facts.speculative else "false", "configured"),
    }
    switches: list[str] = []
    if facts.speculative_algorithm and facts.speculative_algorithm.upper() == "DSPARK":
        switches.append("dspark-draft")
    if any(env.get(k, "").lower() in TRUTHY for k in UNIFIED_KV_ENV):
        switches.append("unified-kv")
    return DeploymentFacts(ik, sd, oc, conf, facts.hicache, src, tuple(switches), table)


@dataclass(frozen=True)
class Evidence:
    """What the view may settle facts with (each empty when unknown)."""

    gpu_total: Mapping[int, int]
    gpu_used: Mapping[int, int]
    memory: Mapping[int, MeasuredMemory]
    probe_index_k: Mapping[int, str]
    probe_pools: Mapping[int, Mapping[str, int]]


def explain(fact: tuple[str, str], before: str) -> str:
    """The /api/v1/footprint source string once a fact was settled by evidence."""
    value, source = fact
    if source == "probe":
        return "probe: measured in the pool"
    if source == "inferred":
        return f"inferred {value} from SGLang's memory figures and NVML"
    return before


def settle(
    dep: DeploymentFacts,
    settings: DeploymentSettings,
    reported: ReportedArgs,
    geom: ModelGeometry,
    release: RuleChoice,
    places: Sequence[Place],
    stages: Mapping[int, StageSlice],
    ev: Evidence,
) -> Settled:
    """Replace assumed facts by measured or inferred ones where the evidence allows.

    Only this node's ranks are evidence (multi-node: global ranks, ``stages`` keyed by the
    PP rank of the stages this node holds)."""
    table = dict(dep.facts)
    assert reported.max_total_num_tokens
    stage_of = {p.rank: stages[p.pp_rank] for p in places}
    tokens = reported.max_total_num_tokens
    table["release_rules"] = (
        release.rules.name,
        "inferred" if release.verified else "assumed",
    )
    # SWA pool sizing. Before 0.5.21 there is only the ratio (a server arg /server_info
    # reports). From 0.5.21 SGLang caps the SWA pool (pool_configurator.py
    # _resolve_swa_cap_tokens) whenever no --swa-full-tokens-ratio is given, but /server_info
    # shows the resolved ratio, not whether it was given: V4.1 is read as cap mode (its
    # default, SGLANG_SWA_EVICTION_INTERVAL taken as 128), V4 as an explicit ratio.
    if not release.rules.swa_cap_mode:
        table["swa_sizing"] = ("ratio", "configured")
    else:
        table["swa_sizing"] = ("cap_mode" if geom.is_v41 else "ratio", "assumed")
    margin: dict[int, int] = {}
    inference_detail = ""

    def alloc_by_rank(s: DeploymentSettings) -> dict[int, int]:
        per_stage = {
            pp: footprint_for_tokens(geom, s, "legacy", tokens, st, rules=release)
            for pp, st in stages.items()
        }
        return {p.rank: per_stage[p.pp_rank].allocated_bytes for p in places}

    if table["index_k_dtype"][1] == "assumed":
        probed = set(ev.probe_index_k.values())
        if len(probed) == 1 and (d := probed.pop()) in ("fp8", "bf16", "fp4"):
            table["index_k_dtype"] = (d, "probe")
        else:
            observed = {
                r: kv
                for r in stage_of
                if (
                    kv := observed_kv_bytes(
                        ev.memory.get(r), ev.gpu_total.get(r), ev.gpu_used.get(r)
                    )
                )
                is not None
            }
            candidates: dict[str, dict[int, int]] = {
                d: alloc_by_rank(replace(settings, index_k_dtype=d)) for d in INFERABLE_INDEX_K
            }
            got = infer_index_k_dtype(candidates, observed)
            margin = got.margin_bytes if got.dtype else {}
            inference_detail = got.detail
            if got.dtype is not None:
                table["index_k_dtype"] = (got.dtype, "inferred")
    ik = _INDEX_K[table["index_k_dtype"][0]]  # every value put in the table is a dtype
    settings = replace(settings, index_k_dtype=ik)
    if table["compress_state_dtype"][1] == "assumed" and ev.probe_pools:
        # the state pools' measured bytes tell float32 from bfloat16 (half the bytes)
        local = {r: p for r, p in ev.probe_pools.items() if r in stage_of}
        rank, pools = min(local.items()) if local else (-1, {})
        stage = stage_of.get(rank)
        for sd in ("float32", "bfloat16") if stage is not None else ():
            cand = replace(settings, compress_state_dtype=sd)
            fp = footprint_for_tokens(geom, cand, "legacy", tokens, stage, rules=release)
            if all(
                pools.get(p) == fp.pools[p].allocated_bytes
                for p in ("c4_state", "c128_state")
                if p in fp.pools
            ):
                table["compress_state_dtype"] = (sd, "probe")
                settings = cand
                dep = replace(dep, compress_state_dtype=cand.compress_state_dtype)
                break
    conf = dep.configurator
    if table["pricing"][1] == "assumed":
        first = places[0]  # this node's first rank: its own budget and stage
        mem0, total0 = ev.memory.get(first.rank), ev.gpu_total.get(first.rank)
        mfs = reported.mem_fraction_static
        if mem0 is not None and mem0.weight_bytes is not None and total0 and mfs:
            try:
                estimate = available_bytes_from_gpu(total0, mem0.weight_bytes, mfs)
            except BudgetError:
                estimate = None
            if estimate is not None:
                planned = {
                    p: footprint_for_tokens(
                        geom, settings, p, tokens, stages[first.pp_rank], rules=release
                    ).planned_bytes
                    for p in ("legacy", "fixed")
                }
                pricing = infer_pricing(planned, estimate)
                if pricing is not None:
                    conf = _PRICING[pricing]
                    table["pricing"] = (pricing, "inferred")
    sources = dict(dep.sources)
    sources["index_k_dtype"] = explain(table["index_k_dtype"], sources["index_k_dtype"])
    sources["configurator"] = explain(table["pricing"], sources["configurator"])
    dep = replace(dep, index_k_dtype=ik, configurator=conf, sources=sources, facts=table)
    return Settled(dep, settings, margin, inference_detail)
