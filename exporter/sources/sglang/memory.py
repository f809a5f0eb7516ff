"""SGLang's own memory figures for one rank, as both of its endpoints report them.

Shared by the ``/server_info`` parser (``internal_states[].memory_usage``) and the ``/metrics``
parser (the ``sglang:*_gb`` constants): one dataclass, one set of value checks (finite,
non-negative; anything else is absent, never an error).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from exporter.units import GIB  # SGLang's "GB": get_available_gpu_memory divides by 1 << 30

# Memory fields SGLang reports (see RankMemory for the release each comes from).
MEMORY_FIELDS = ("weight", "kv_cache", "graph", "startup_available", "swa_tokens", "context_len")
MAX_GRAPH_PHASES = 8  # 0.5.23 has six (GRAPH_MEMORY_USAGE_KEYS); bounds the phase label
PHASE = re.compile(r"[a-z][a-z0-9_]{0,31}")  # a label value from SGLang: a short name


@dataclass(frozen=True)
class RankMemory:
    """SGLang's own memory figures for one rank, in bytes; None where the release lacks them.

    Sources by release (sglang/srt/observability/metrics_collector.py ``emit_constants`` and
    the scheduler's ``memory_usage`` in /server_info internal_states):
    ``weight``: sglang:weight_memory_usage_gb 0.5.17+, memory_usage.weight 0.5.12+;
    ``kv_cache``: sglang:kv_cache_memory_usage_gb 0.5.17+, memory_usage.kvcache 0.5.12+ (0 for
    DSV4 pools: exported, never used); ``graph``: sglang:graph_memory_usage_gb{phase} 0.5.17+,
    memory_usage.graph (one float before 0.5.17, per phase after); ``startup_available``:
    sglang:startup_available_gpu_memory_gb 0.5.12+, memory_usage.startup_available 0.5.17+;
    ``swa_tokens``: sglang:max_total_num_tokens_swa 0.5.17+; ``context_len``:
    sglang:context_len 0.5.12+.
    """

    weight_bytes: int | None = None
    kv_cache_bytes: int | None = None
    graph_bytes: Mapping[str, int] | None = None  # phase -> bytes ("all" before 0.5.17)
    startup_available_bytes: int | None = None
    swa_tokens: int | None = None
    context_len: int | None = None

    @property
    def graph_total_bytes(self) -> int | None:
        return None if self.graph_bytes is None else sum(self.graph_bytes.values())

    def present(self) -> set[str]:
        return {f for f, v in zip(MEMORY_FIELDS, self._values(), strict=True) if v is not None}

    def merged(self, fallback: RankMemory | None) -> RankMemory:
        """Field by field: this one's value, else the fallback's."""
        if fallback is None:
            return self
        pick = [
            mine if mine is not None else theirs
            for mine, theirs in zip(self._values(), fallback._values(), strict=True)
        ]
        return RankMemory(*pick)

    def _values(self) -> tuple[Any, ...]:
        return (
            self.weight_bytes,
            self.kv_cache_bytes,
            self.graph_bytes,
            self.startup_available_bytes,
            self.swa_tokens,
            self.context_len,
        )


def gb(v: Any) -> int | None:
    """A non-negative finite GB (GiB) number as bytes; anything else is absent."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0 or v == float("inf"):
        return None
    return round(v * GIB)


def count(v: Any) -> int | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0 or v == float("inf"):
        return None
    return int(v)


def _graph_phases(raw: Any) -> dict[str, int] | None:
    """memory_usage.graph: one float (before 0.5.17) or {phase: GB} (0.5.17+)."""
    if isinstance(raw, Mapping):
        out = {}
        for phase, v in list(raw.items())[:MAX_GRAPH_PHASES]:
            b = gb(v)
            if isinstance(phase, str) and PHASE.fullmatch(phase) and b is not None:
                out[phase] = b
        return out or None
    b = gb(raw)
    return None if b is None else {"all": b}


def memory_usage_of(state: Mapping[str, Any]) -> RankMemory | None:
    """internal_states[i].memory_usage as RankMemory; None when absent or not an object."""
    mu = state.get("memory_usage")
    if not isinstance(mu, Mapping):
        return None
    return RankMemory(
        weight_bytes=gb(mu.get("weight")),
        kv_cache_bytes=gb(mu.get("kvcache")),
        graph_bytes=_graph_phases(mu.get("graph")),
        startup_available_bytes=gb(mu.get("startup_available")),
        swa_tokens=count(mu.get("token_capacity_swa")),
    )
