"""SGLang's own ``/metrics`` as :class:`LiveMetrics`: the live load and the memory constants.

A pure parser: exposition text in, validated values out, no I/O. Both name prefixes are read:
``sglang:`` (every release this project supports) and ``sglang_`` (what setups that rename
colons get, e.g. llm-d's dashboards since its switch, or an OpenMetrics-only relabel); a
family present under both is read once, from ``sglang:``. Only what the sidecar adds to is read
(running requests, HiCache load-backs, the memory constants): the dashboards read SGLang's other
series from SGLang itself. Label values that come through (graph phases) are short names from a
bounded set.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from exporter.sources.exposition_filter import (
    capped_lines,
    family_pattern,
)
from exporter.sources.sglang.memory import MAX_GRAPH_PHASES, PHASE, RankMemory, count, gb

PREFIXES = ("sglang:", "sglang_")


@dataclass(frozen=True)
class LiveMetrics:
    """Values taken from SGLang's /metrics (absent ones stay None)."""

    running: float | None = None
    load_backs: float | None = None
    # (pp_rank, tp_rank) -> SGLang's memory constants as that scheduler reported them
    memory: dict[tuple[int, int], RankMemory] = field(default_factory=dict)
    prefix: str = "sglang:"  # the name prefix this SGLang exports under
    dropped_samples: int = 0  # lines past MAX_SAMPLES_PER_FAMILY, not parsed


# <name> constant gauge -> RankMemory field and unit converter
_MEMORY_GAUGES: dict[str, tuple[str, Any]] = {
    "weight_memory_usage_gb": ("weight_bytes", gb),
    "kv_cache_memory_usage_gb": ("kv_cache_bytes", gb),
    "startup_available_gpu_memory_gb": ("startup_available_bytes", gb),
    "max_total_num_tokens_swa": ("swa_tokens", count),
    "context_len": ("context_len", count),
}
_GRAPH = "graph_memory_usage_gb"
_SUMMED = ("num_running_reqs",)


_WANTED = family_pattern(
    "sglang[:_]",
    {
        *_SUMMED,
        "load_back_duration_seconds",
        _GRAPH,
        *_MEMORY_GAUGES,
    },
    # Only the load-back histogram's _count is read: its buckets (one line per bound per
    # scheduler) and _sum would spend the family's sample cap on lines nobody reads.
    ("_total", "_count", "_created"),
)


def sglang_families(text: str) -> tuple[str, list[tuple[str, Any]]]:
    """(prefix, [(short name, family)]) of SGLang's families in an exposition: ``sglang:``
    ones, else ``sglang_`` ones (a family is never read twice under both)."""
    by_prefix: dict[str, list[tuple[str, Any]]] = {p: [] for p in PREFIXES}
    for fam in text_string_to_metric_families(text):
        for prefix in PREFIXES:
            if fam.name.startswith(prefix):
                by_prefix[prefix].append((fam.name[len(prefix) :], fam))
                break
    for prefix in PREFIXES:
        if by_prefix[prefix]:
            return prefix, by_prefix[prefix]
    return PREFIXES[0], []


def _rank_key(labels: Mapping[str, str]) -> tuple[int, int] | None:
    try:
        return int(labels.get("pp_rank", "0") or 0), int(labels.get("tp_rank", "0") or 0)
    except ValueError:
        return None


def _finite(samples: Iterable[Any]) -> Iterable[Any]:
    return (s for s in samples if math.isfinite(s.value))


def _memory_gauges(fams: list[tuple[str, Any]]) -> dict[tuple[int, int], RankMemory]:
    """Per scheduler (pp_rank, tp_rank): the memory constants it emitted at start-up."""
    fields: dict[tuple[int, int], dict[str, Any]] = {}
    for short, fam in fams:
        conv = _MEMORY_GAUGES.get(short)
        if conv is None and short != _GRAPH:
            continue
        for s in _finite(fam.samples):
            if s.name != fam.name or s.labels.get("dp_rank", "0") not in ("0", ""):
                continue
            key = _rank_key(s.labels)
            if key is None:
                continue
            got = fields.setdefault(key, {})
            if conv is not None:
                value = conv[1](s.value)
                if value is not None:
                    got[conv[0]] = value
                continue
            phases = got.setdefault("graph_bytes", {})
            phase, b = s.labels.get("phase", ""), gb(s.value)
            if PHASE.fullmatch(phase) and b is not None and len(phases) < MAX_GRAPH_PHASES:
                phases[phase] = b
    return {k: RankMemory(**v) for k, v in fields.items()}


def parse_sglang_metrics(text: str) -> LiveMetrics:
    """Sum per-DP-rank gauges (tp_rank 0 reports for its DP group) and load-back counts.
    Non-finite sample values (NaN, +Inf) are skipped: they are never a count. Only the
    families read are parsed, each capped at MAX_SAMPLES_PER_FAMILY samples."""
    wanted, dropped = capped_lines(text, _WANTED)
    prefix, fams = sglang_families(wanted)
    sums: dict[str, float] = {}
    lb_count = None
    for full, fam in fams:
        short = full.removesuffix("_total")
        for s in _finite(fam.samples):
            if s.labels.get("tp_rank", "0") not in ("0", ""):
                continue  # every TP rank repeats the scheduler's numbers
            if short in _SUMMED and s.name == fam.name:
                sums[short] = sums.get(short, 0.0) + s.value
            elif short == "load_back_duration_seconds" and s.name.endswith("_count"):
                lb_count = (lb_count or 0.0) + s.value
    return LiveMetrics(
        running=sums.get("num_running_reqs"),
        load_backs=lb_count,
        memory=_memory_gauges(fams),
        prefix=prefix,
        dropped_samples=dropped,
    )
