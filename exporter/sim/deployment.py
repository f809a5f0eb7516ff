"""The simulated deployment: SGLang's start-up arithmetic run by the footprint model.

It keeps the ground truth the sidecar is not told (index-K dtype, configurator pricing, the
budget, what the pools really allocate, weights and graphs) and reports only what a real
SGLang of the simulated release reports: its token counts, server args, and its memory figures
(weights, graphs, free memory at start-up) in /metrics and /server_info internal_states.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import cached_property
from typing import Any

from exporter.footprint import (
    DeploymentSettings,
    Footprint,
    ModelGeometry,
    PipelinePlan,
    RuleChoice,
    plan_pipeline,
    resolve_model,
    rules_for_version,
)
from exporter.footprint.releases import parse_release
from exporter.sim.fake_nvml import FakeGpuSpec
from exporter.sim.settings import SimSettings
from exporter.units import GIB

SIM_SUFFIX = "+sim"
# sglang:weight/kv_cache/graph_memory_usage_gb, max_total_num_tokens_swa and the per-phase
# memory_usage.graph with startup_available appeared in 0.5.17 (metrics_collector.py,
# scheduler_components/memory_usage.py).
MEMORY_GAUGES_SINCE = (0, 5, 17)
GRAPH_PHASES = (
    "prefill",
    "decode",
    "target_verify",
    "draft_prefill",
    "draft_decode",
    "draft_extend",
)
CONTEXT_LEN = 1_048_576


@dataclass(frozen=True)
class SimDeployment:
    settings: SimSettings

    @cached_property
    def geometry(self) -> ModelGeometry:
        return resolve_model(self.settings.model)

    @cached_property
    def release(self) -> RuleChoice:
        return rules_for_version(self.settings.sglang_version)

    @cached_property
    def pipeline(self) -> PipelinePlan:
        """Every PP stage as SGLang sizes it at start-up (``model.plan_pipeline``, the one
        implementation of its MIN sync): each stage's own capacity from the budget, the
        minimum across stages, and each stage's pools re-sized to it. What the pools really
        allocate (ground truth, dtype included), priced by the simulated configurator on the
        simulated budget."""
        s = self.settings
        ds = DeploymentSettings(
            index_k_dtype=s.index_k_dtype,
            max_running_requests=s.max_running_requests,
            speculative=s.speculative,
        )
        budget = int(s.available_gib * GIB)
        return plan_pipeline(
            self.geometry, ds, s.configurator, budget, self.release, pp_size=s.pp_size
        )

    @property
    def footprints(self) -> tuple[Footprint, ...]:
        """One per PP stage, at SGLang's token count (the minimum over stages)."""
        return self.pipeline.stages

    def true_footprint(self, rank: int) -> Footprint:
        """What ``rank``'s stage pools allocate at SGLang's token count."""
        return self.footprints[rank // self.settings.tp_size]

    @property
    def ranks(self) -> int:
        return self.settings.tp_size * self.settings.pp_size

    @property
    def mem_fraction_static(self) -> float:
        """As reported; by default the fraction SGLang's profiler would need to hand the
        configurator ``available_gib``: budget = (GPU - context) x fraction - weights."""
        s = self.settings
        if s.mem_fraction_static is not None:
            return s.mem_fraction_static
        return (s.available_gib + s.weights_gib) / (s.gpu_memory_gib - s.context_gib)

    @property
    def has_memory_gauges(self) -> bool:
        return parse_release(self.settings.sglang_version) >= MEMORY_GAUGES_SINCE

    def gpu_spec(self) -> FakeGpuSpec:
        s = self.settings
        return FakeGpuSpec(
            memory_bytes=int(s.gpu_memory_gib * GIB),
            weights_bytes=int(s.weights_gib * GIB),
            context_bytes=int(s.context_gib * GIB),
            graph_bytes=int(s.graph_gib * GIB),
        )

    def node_gpus(self, node_rank: int, running: int) -> dict[str, Any]:
        """The GPUs of node ``node_rank`` as ``GET /_sim/gpus`` serves them: the GPU model
        (memory, weights, context, graphs, activations per request) and, per local GPU, its
        global rank and what its pools really allocate. The sidecar's ``fake`` GPU backend
        reads this, so simulated NVML shows the deployment's ground truth, never the
        sidecar's own prediction of it."""
        s = self.settings
        if not 0 <= node_rank < s.nnodes:
            raise ValueError(f"node_rank {node_rank} outside 0..{s.nnodes - 1}")
        per_node = self.ranks // s.nnodes
        spec = self.gpu_spec()
        return {
            "simulator": True,
            "node_rank": node_rank,
            "spec": asdict(spec),
            "gpus": [
                {
                    "rank": rank,
                    "pools_bytes": self.true_footprint(rank).allocated_bytes,
                    "running": running,
                }
                for rank in range(node_rank * per_node, (node_rank + 1) * per_node)
            ],
        }

    def startup_available_bytes(self, rank: int) -> int:
        """Free memory when the scheduler started (cudaMemGetInfo: driver-reserved counts as
        used), after weights, pools and graphs."""
        spec = self.gpu_spec()
        used = (
            spec.reserved_bytes
            + spec.context_bytes
            + spec.weights_bytes
            + spec.graph_bytes
            + self.true_footprint(rank).allocated_bytes
        )
        return spec.memory_bytes - used

    def memory_gauges(self, stage: int) -> dict[str, float]:
        """sglang:*_gb constants (and token constants) that TP rank 0 of ``stage`` emits."""
        s = self.settings
        rank = stage * s.tp_size
        out = {
            "sglang:page_size": 256.0,
            "sglang:num_pages": float(self.max_total_num_tokens // 256),
            "sglang:context_len": float(CONTEXT_LEN),
            "sglang:startup_available_gpu_memory_gb": self.startup_available_bytes(rank) / GIB,
        }
        if self.has_memory_gauges:
            out["sglang:max_total_num_tokens_swa"] = float(
                self.true_footprint(rank).pools["swa_kv"].tokens
            )
            out["sglang:weight_memory_usage_gb"] = s.weights_gib
            out["sglang:kv_cache_memory_usage_gb"] = 0.0  # DSV4 pools never set mem_usage
        return out

    def graph_phases(self) -> dict[str, float]:
        return {p: (self.settings.graph_gib if p == "decode" else 0.0) for p in GRAPH_PHASES}

    def memory_usage(self) -> dict[str, Any]:
        """internal_states[0].memory_usage in the simulated release's shape (GB = GiB)."""
        s = self.settings
        if not self.has_memory_gauges:  # 0.5.12-0.5.16: four fields, graph one float
            return {
                "weight": round(s.weights_gib, 2),
                "kvcache": 0.0,
                "token_capacity": self.max_total_num_tokens,
                "graph": round(s.graph_gib, 2),
            }
        return {
            "weight": round(s.weights_gib, 3),
            "kvcache": 0.0,
            "startup_available": round(self.startup_available_bytes(0) / GIB, 3),
            "token_capacity": self.max_total_num_tokens,
            "token_capacity_swa": self.true_footprint(0).pools["swa_kv"].tokens,
            "graph": {p: round(v, 3) for p, v in self.graph_phases().items()},
        }

    @property
    def max_total_num_tokens(self) -> int:
        return self.pipeline.full_tokens

    @property
    def version(self) -> str:
        """The release it runs, marked as a simulator (a PEP 440 local version: 0.5.23+sim)."""
        return self.settings.sglang_version.split("+")[0] + SIM_SUFFIX

    @property
    def model_path(self) -> str:
        name = self.geometry.name
        return {
            "deepseek-v4-flash": "deepseek-ai/DeepSeek-V4-Flash",
            "deepseek-v4-pro": "deepseek-ai/DeepSeek-V4-Pro",
        }.get(name, name)

    def server_info(self, running: int) -> dict[str, Any]:
        """The shape of SGLang 0.5.x /server_info: flat server args + scheduler state."""
        s = self.settings
        tokens = self.max_total_num_tokens
        return {
            "model_path": self.model_path,
            "tokenizer_path": self.model_path,
            "served_model_name": self.model_path,
            "host": s.host,
            "port": s.port,
            "tp_size": s.tp_size,
            "dp_size": 1,
            "pp_size": s.pp_size,
            "nnodes": s.nnodes,
            "node_rank": 0,  # the head's own: only node 0 serves HTTP
            "mem_fraction_static": self.mem_fraction_static,
            "page_size": 256,
            "max_running_requests": s.max_running_requests,
            "swa_full_tokens_ratio": 0.1,
            "enable_deepseek_v4_fp4_indexer": s.index_k_dtype == "fp4",
            "enable_hierarchical_cache": s.hicache == "on",
            "hicache_ratio": 2.0,
            "speculative_algorithm": "EAGLE" if s.speculative else None,
            "speculative_num_draft_tokens": 4 if s.speculative else None,
            "enable_metrics": True,
            "tool_call_parser": "deepseekv4",
            "reasoning_parser": "deepseek-v4",
            "kv_cache_dtype": "auto",
            "max_total_num_tokens": tokens,
            "max_req_input_len": tokens - 1,
            "version": self.version,
            "simulator": True,
            "internal_states": [
                {
                    "memory_usage": self.memory_usage(),
                    "effective_max_running_requests_per_dp": s.max_running_requests,
                    "num_running_reqs": running,
                }
            ],
        }
