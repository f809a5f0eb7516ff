"""What SGLang's /server_info and /metrics put into the sidecar's labels is bounded (issue 24):
100k HiCache pools made 100,717 series and a 1 MB pool name passed through; a 900 KB version
string became a label and a log line."""

from __future__ import annotations

import pytest

from exporter.sources.exposition_filter import capped_lines
from exporter.sources.sglang import (
    ShapeError,
    parse_server_info,
    parse_sglang_metrics,
)
from exporter.sources.sglang.metrics_text import _WANTED
from exporter.sources.sglang.server_info import MAX_MODEL_PATH

FLASH = "deepseek-ai/DeepSeek-V4-Flash"


def _load_back(pools: list[str]) -> str:
    lines = ["# TYPE sglang:load_back_tokens counter"]
    lines += [f'sglang:load_back_tokens_total{{pool="{p}"}} 1' for p in pools]
    return "\n".join(lines) + "\n"


def test_load_back_pools_are_not_read_at_all() -> None:
    """100,000 pools, and a 1 MB pool name: the sidecar no longer re-exports load-back tokens
    by pool (the dashboards read SGLang's own series), so the filter keeps none of those lines:
    nothing is parsed, nothing becomes a label."""
    text = _load_back([f"pool{i}" for i in range(100_000)] + ["x" * 1_000_000])
    assert capped_lines(text, _WANTED) == ("\n", 0)
    live = parse_sglang_metrics(text)
    assert (live.running, live.load_backs, live.dropped_samples) == (None, None, 0)


def test_a_huge_version_string_is_not_kept() -> None:
    facts = parse_server_info({"model_path": FLASH, "version": "9" * 900_000})
    assert facts.version == "unparseable"
    assert parse_server_info({"model_path": FLASH, "version": "0.5.23.post1"}).version == (
        "0.5.23.post1"
    )


def test_a_huge_model_path_is_refused_and_a_huge_served_name_ignored() -> None:
    with pytest.raises(ShapeError, match="model_path"):
        parse_server_info({"model_path": "m" * (MAX_MODEL_PATH + 1)})
    facts = parse_server_info({"model_path": FLASH, "served_model_name": "n" * 900_000})
    assert facts.served_model_name == FLASH


def test_load_backs_of_256_schedulers_are_all_counted_despite_their_buckets() -> None:
    """TP 16 x DP 16, every scheduler reporting the load-back histogram with SGLang's buckets:
    its _sum and _count are read in full (the buckets once spent the family's cap). TP rank 0
    speaks for its DP group: 16 groups, one load-back each."""
    bounds = ["0.001", "0.005", "0.01", "0.05", "0.1", "0.5", "1.0", "5.0", "10.0", "+Inf"]
    lines = ["# TYPE sglang:load_back_duration_seconds histogram"]
    for rank in range(256):
        labels = f'tp_rank="{rank % 16}",dp_rank="{rank // 16}"'
        lines += [
            f'sglang:load_back_duration_seconds_bucket{{{labels},le="{b}"}} 1' for b in bounds
        ]
        lines += [
            f"sglang:load_back_duration_seconds_sum{{{labels}}} 0.5",
            f"sglang:load_back_duration_seconds_count{{{labels}}} 1",
        ]
    live = parse_sglang_metrics("\n".join(lines) + "\n")
    assert live.load_backs == 16
    assert live.dropped_samples == 0


def test_repeated_help_lines_are_dropped_and_counted() -> None:
    """A HELP or TYPE line repeated 200,000 times is kept once and the rest counted: comment
    lines are no way around the family cap."""
    lines = ["# TYPE sglang:num_running_reqs gauge"]
    lines += [f"# HELP sglang:num_running_reqs help {i}" for i in range(200_000)]
    lines += ['sglang:num_running_reqs{tp_rank="0"} 7']
    live = parse_sglang_metrics("\n".join(lines) + "\n")
    assert live.running == 7
    assert live.dropped_samples == 200_000 - 1
