"""The simulated deployment: SGLang's start-up arithmetic run by the footprint model."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from exporter.footprint import (
    DeploymentSettings,
    Footprint,
    ModelGeometry,
    RuleChoice,
    plan_for_budget,
    resolve_model,
    rules_for_version,
    stage_slice,
)
from exporter.sim.settings import SimSettings

GIB = 1024**3
SIM_SUFFIX = "+sim"


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
    def footprints(self) -> list[Footprint]:
        """One per PP stage: what SGLang plans and the pool allocates at start-up."""
        s = self.settings
        ds = DeploymentSettings(
            index_k_dtype=s.index_k_dtype,
            max_running_requests=s.max_running_requests,
            speculative=s.speculative,
        )
        budget = int(s.available_gib * GIB)
        return [
            plan_for_budget(
                self.geometry,
                ds,
                s.configurator,
                budget,
                stage_slice(self.geometry, s.pp_size, r),
                self.release,
            )
            for r in range(s.pp_size)
        ]

    @property
    def max_total_num_tokens(self) -> int:
        # SGLang takes the minimum across ranks so every stage can hold the same requests.
        return min(fp.full_tokens for fp in self.footprints)

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
            "mem_fraction_static": s.mem_fraction_static,
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
                    "memory_usage": {
                        "weight": round(s.weights_gib * GIB / 1e9, 2),
                        "kvcache": 0.0,
                        "token_capacity": tokens,
                        "graph": 2.15,
                    },
                    "effective_max_running_requests_per_dp": s.max_running_requests,
                    "num_running_reqs": running,
                }
            ],
        }
