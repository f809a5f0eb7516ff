"""vLLM as a source: pure parsers, a thin poller and its row of the engine table.

- :mod:`.version`: ``/version`` and ``/v1/models`` JSON -> :class:`VllmFacts`;
- :mod:`.metrics_text`: vLLM's ``/metrics`` text -> :class:`VllmLive` (running and
  waiting requests, KV usage, ``vllm:cache_config_info``);
- :mod:`.source`: :class:`VllmSource`, the poller on the shared HTTP base;
- :mod:`.engine`: vLLM's row of the engine table (exporter/sources/engines.py).
"""

from exporter.sources.vllm.metrics_text import (
    CacheConfig,
    VllmLive,
    has_vllm_families,
    parse_vllm_metrics,
)
from exporter.sources.vllm.source import ERROR_REASONS, VllmSource
from exporter.sources.vllm.version import VllmFacts, parse_models, parse_version

__all__ = [
    "ERROR_REASONS",
    "CacheConfig",
    "VllmFacts",
    "VllmLive",
    "VllmSource",
    "has_vllm_families",
    "parse_models",
    "parse_version",
    "parse_vllm_metrics",
]
