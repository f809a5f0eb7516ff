"""What SGLang's /server_info and /metrics put into the sidecar's labels is bounded (issue 24):
100k HiCache pools made 100,717 series and a 1 MB pool name passed through; a 900 KB version
string became a label and a log line."""

from __future__ import annotations

import pytest

from exporter.sources.exposition_filter import MAX_SAMPLES_PER_FAMILY
from exporter.sources.sglang import (
    MAX_LOAD_BACK_POOLS,
    ShapeError,
    parse_server_info,
    parse_sglang_metrics,
)
from exporter.sources.sglang.server_info import MAX_MODEL_PATH

FLASH = "deepseek-ai/DeepSeek-V4-Flash"


def _load_back(pools: list[str]) -> str:
    lines = ["# TYPE sglang:load_back_tokens counter"]
    lines += [f'sglang:load_back_tokens_total{{pool="{p}"}} 1' for p in pools]
    return "\n".join(lines) + "\n"


def test_load_back_pools_are_a_bounded_set_of_short_names() -> None:
    live = parse_sglang_metrics(_load_back([f"pool{i}" for i in range(100_000)]))
    assert len(live.load_back_tokens) == MAX_LOAD_BACK_POOLS + 1  # the first 8 and "other"
    # the family's first MAX_SAMPLES_PER_FAMILY samples are read and folded, the rest counted
    assert sum(live.load_back_tokens.values()) == MAX_SAMPLES_PER_FAMILY
    assert live.dropped_samples == 100_000 - MAX_SAMPLES_PER_FAMILY


def test_a_huge_pool_name_is_folded_into_other() -> None:
    live = parse_sglang_metrics(_load_back(["kv", "x" * 1_000_000]))
    assert live.load_back_tokens == {"kv": 1.0, "other": 1.0}


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
