"""vLLM's own ``/metrics`` as :class:`VllmLive`: the load, the KV cache and its configuration.

A pure parser: exposition text in, validated values out, no I/O. vLLM (v1 engine, 0.23.0 on)
exports one series per engine core (label ``engine``, data parallelism) under ``vllm:``:
gauges are summed over engines (running and waiting requests), the KV usage is the fullest
engine's. Preemptions and token counters are not read (the boards take them from vLLM).
``vllm:cache_config_info`` (value 1) carries the KV cache configuration as labels:
``block_size``, ``num_gpu_blocks``, ``cache_dtype`` and (0.24) ``kv_cache_size_tokens``;
engine 0's is read. Non-finite values are skipped, numbers are bounded, ``cache_dtype``
becomes a label value only when it is a short name (else ``other``); only the families read
are parsed, each capped at MAX_SAMPLES_PER_FAMILY samples.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from exporter.sources.exposition_filter import capped_lines, family_pattern

PREFIX = "vllm:"
MAX_BLOCKS = 1 << 40  # GPU blocks one engine can hold: far past any GPU, bounds a hostile label
MAX_BLOCK_SIZE = 1 << 20
_DTYPE = re.compile(r"[a-z0-9_]{1,32}")
# /metrics family (short name, "_total" removed) -> VllmLive field, summed over engines
_SUMMED = {
    "num_requests_running": "running",
    "num_requests_waiting": "waiting",
}
# the KV usage gauge: kv_cache_usage_perc (v1), gpu_cache_usage_perc before 0.10
_USAGE = ("kv_cache_usage_perc", "gpu_cache_usage_perc")
# a gauge in the text format; an info family (suffix dropped) once relabelled to OpenMetrics
_CACHE_INFO = ("cache_config_info", "cache_config")


@dataclass(frozen=True)
class CacheConfig:
    """vLLM's KV cache configuration (``vllm:cache_config_info`` labels, engine 0)."""

    block_size: int | None
    num_gpu_blocks: int | None
    cache_dtype: str
    kv_cache_size_tokens: int | None = None

    @property
    def capacity_tokens(self) -> int | None:
        """Tokens the KV cache holds: vLLM's own figure where reported, else blocks x size."""
        if self.kv_cache_size_tokens is not None:
            return self.kv_cache_size_tokens
        if self.block_size is None or self.num_gpu_blocks is None:
            return None
        return self.block_size * self.num_gpu_blocks


@dataclass(frozen=True)
class VllmLive:
    """Values taken from vLLM's /metrics (absent ones stay None)."""

    running: float | None = None
    waiting: float | None = None
    kv_usage: float | None = None
    cache: CacheConfig | None = None
    dropped_samples: int = 0  # lines past MAX_SAMPLES_PER_FAMILY, not parsed

    @property
    def empty(self) -> bool:
        """No family this parser reads was there: not vLLM's /metrics (or not yet)."""
        values = (self.running, self.waiting, self.kv_usage)
        return self.cache is None and all(v is None for v in values)


_WANTED = family_pattern("vllm:", {*_SUMMED, *_USAGE, "cache_config_info"}, ("_total", "_created"))


def has_vllm_families(text: str) -> bool:
    """Whether an exposition holds vLLM's own families (engine discovery's test)."""
    return any(fam.name.startswith(PREFIX) for fam in text_string_to_metric_families(text))


def _count(label: str | None, bound: int) -> int | None:
    """A label value that should be a count in ``0..bound`` (``None``, garbage: None)."""
    if label is None or not label.isdigit() or len(label) > 16:
        return None
    n = int(label)
    return n if n <= bound else None


def cache_config_of(labels: Mapping[str, str]) -> CacheConfig:
    dtype = labels.get("cache_dtype", "auto")
    return CacheConfig(
        block_size=_count(labels.get("block_size"), MAX_BLOCK_SIZE),
        num_gpu_blocks=_count(labels.get("num_gpu_blocks"), MAX_BLOCKS),
        cache_dtype=dtype if _DTYPE.fullmatch(dtype) else "other",
        kv_cache_size_tokens=_count(labels.get("kv_cache_size_tokens"), MAX_BLOCKS),
    )


def parse_vllm_metrics(text: str) -> VllmLive:
    """Sum the per-engine gauges, take the fullest engine's KV usage."""
    text, dropped = capped_lines(text, _WANTED)
    sums: dict[str, float] = {}
    usage: float | None = None
    cache: tuple[str, CacheConfig] | None = None
    for fam in text_string_to_metric_families(text):
        if not fam.name.startswith(PREFIX):
            continue
        short = fam.name[len(PREFIX) :].removesuffix("_total")
        for s in fam.samples:
            if not math.isfinite(s.value):
                continue
            engine = s.labels.get("engine", "0")
            field = _SUMMED.get(short)
            counter_sample = s.name in (fam.name, fam.name + "_total")
            if field is not None and counter_sample:
                sums[field] = sums.get(field, 0.0) + s.value
            elif short in _USAGE and s.name == fam.name:
                usage = s.value if usage is None else max(usage, s.value)
            elif short in _CACHE_INFO and (cache is None or engine < cache[0]):
                cache = (engine, cache_config_of(s.labels))
    return VllmLive(
        running=sums.get("running"),
        waiting=sums.get("waiting"),
        kv_usage=usage,
        cache=cache[1] if cache is not None else None,
        dropped_samples=dropped,
    )
