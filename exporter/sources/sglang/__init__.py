"""SGLang as a source: two pure parsers and a thin poller.

- :mod:`.server_info`: ``/server_info`` JSON -> :class:`ServerFacts` (bounded, validated);
- :mod:`.metrics_text`: SGLang's ``/metrics`` text -> :class:`LiveMetrics` (both prefixes);
- :mod:`.memory`: :class:`RankMemory`, the per-rank memory figures both endpoints report;
- :mod:`.source`: :class:`SglangSource`, the poller on the shared HTTP base.
"""

from exporter.sources.sglang.memory import MEMORY_FIELDS, RankMemory
from exporter.sources.sglang.metrics_text import (
    LiveMetrics,
    parse_sglang_metrics,
)
from exporter.sources.sglang.server_info import (
    MAX_PARALLEL,
    MAX_RANKS,
    ServerFacts,
    ShapeError,
    parse_server_info,
    tool_call_parser_of,
)
from exporter.sources.sglang.source import ERROR_REASONS, SglangSource

__all__ = [
    "ERROR_REASONS",
    "MAX_PARALLEL",
    "MAX_RANKS",
    "MEMORY_FIELDS",
    "LiveMetrics",
    "RankMemory",
    "ServerFacts",
    "SglangSource",
    "ShapeError",
    "parse_server_info",
    "parse_sglang_metrics",
    "tool_call_parser_of",
]
