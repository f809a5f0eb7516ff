"""SGLang's own memory figures: both places it reports them, every release's shape, hostile
values, per-rank expansion, and the reconciliation arithmetic built on them."""

from __future__ import annotations

import math

import pytest

from exporter.sources.reconcile import (
    RankReconciliation,
    infer_index_k_dtype,
    infer_pricing,
    observed_kv_bytes,
    reconcile,
)
from exporter.sources.sglang import (
    RankMemory,
    SglangSource,
    parse_server_info,
    parse_sglang_metrics,
)
from exporter.sources.sglang.memory import memory_usage_of
from exporter.units import GIB

LABELS = 'model_name="m",engine_type="unified",tp_rank="{tp}",pp_rank="{pp}",moe_ep_rank="0"'


def _gauge(name: str, value: float, tp: int = 0, pp: int = 0, extra: str = "") -> str:
    return (
        f"# TYPE sglang:{name} gauge\n"
        f"sglang:{name}{{{LABELS.format(tp=tp, pp=pp)}{extra}}} {value}\n"
    )


def test_internal_states_before_0_5_17_one_graph_float():
    """0.5.12-0.5.16 scheduler.get_internal_state: weight, kvcache, token_capacity, graph."""
    mem = memory_usage_of(
        {"memory_usage": {"weight": 70.0, "kvcache": 0.0, "token_capacity": 10, "graph": 2.5}}
    )
    assert mem == RankMemory(
        weight_bytes=70 * GIB, kv_cache_bytes=0, graph_bytes={"all": int(2.5 * GIB)}
    )
    assert mem.present() == {"weight", "kv_cache", "graph"}


def test_internal_states_0_5_17_graph_per_phase_and_startup_available():
    mem = memory_usage_of(
        {
            "memory_usage": {
                "weight": 70.0,
                "kvcache": 0.0,
                "startup_available": 12.5,
                "token_capacity": 10,
                "token_capacity_swa": 4,
                "graph": {"prefill": 0.0, "decode": 2.0, "draft_decode": 0.25},
            }
        }
    )
    assert mem is not None
    assert mem.graph_total_bytes == int(2.25 * GIB)
    assert mem.startup_available_bytes == int(12.5 * GIB) and mem.swa_tokens == 4


@pytest.mark.parametrize(
    "bad",
    ["70", -1.0, math.nan, math.inf, True, None, [1], {"x": 1}],
)
def test_hostile_values_are_absent_not_errors(bad):
    mem = memory_usage_of({"memory_usage": {"weight": bad, "graph": {"decode": bad}}})
    assert mem is not None and mem.weight_bytes is None and mem.graph_bytes is None


def test_graph_phase_labels_are_bounded():
    graph = {f"p{i}": 1.0 for i in range(50)} | {"Bad Label": 1.0, "x" * 64: 1.0}
    mem = memory_usage_of({"memory_usage": {"graph": graph}})
    assert mem is not None and mem.graph_bytes is not None
    assert len(mem.graph_bytes) == 8 and all(p.startswith("p") for p in mem.graph_bytes)


def test_not_an_object_is_absent():
    assert memory_usage_of({"memory_usage": [1, 2]}) is None
    assert memory_usage_of({}) is None


def test_metrics_per_stage_and_tp_rank():
    text = (
        _gauge("weight_memory_usage_gb", 70, pp=0)
        + _gauge("weight_memory_usage_gb", 60, pp=1).split("\n", 1)[1]
        + _gauge("startup_available_gpu_memory_gb", 12.0, tp=1)
        + _gauge("kv_cache_memory_usage_gb", 0)
        + "# TYPE sglang:graph_memory_usage_gb gauge\n"
        + f'sglang:graph_memory_usage_gb{{{LABELS.format(tp=0, pp=0)},phase="decode"}} 2.0\n'
        + f'sglang:graph_memory_usage_gb{{{LABELS.format(tp=0, pp=0)},phase="prefill"}} 0.5\n'
    )
    mem = parse_sglang_metrics(text).memory
    assert mem[(0, 0)].weight_bytes == 70 * GIB and mem[(1, 0)].weight_bytes == 60 * GIB
    assert mem[(0, 0)].graph_bytes == {"decode": 2 * GIB, "prefill": GIB // 2}
    assert mem[(0, 1)].startup_available_bytes == 12 * GIB
    assert mem[(0, 0)].kv_cache_bytes == 0


def test_other_dp_ranks_are_not_mixed_in():
    text = _gauge("weight_memory_usage_gb", 70, extra=',dp_rank="1"')
    assert parse_sglang_metrics(text).memory == {}


SERVER_INFO = {
    "model_path": "deepseek-ai/DeepSeek-V4-Flash",
    "tp_size": 2,
    "pp_size": 2,
    "internal_states": [
        {"memory_usage": {"weight": 70.0, "kvcache": 0.0, "token_capacity": 10, "graph": 2.0}}
    ],
}


def test_memory_by_rank_expands_each_stage_and_falls_back_per_field():
    src = SglangSource("http://127.0.0.1:1")
    src.facts = parse_server_info(SERVER_INFO)
    src.health.success(0.0)
    src.live = parse_sglang_metrics(
        _gauge("startup_available_gpu_memory_gb", 12.0) + _gauge("context_len", 100, pp=1)
    )
    by_rank = src.memory_by_rank()
    # stage 0: /metrics' startup figure, internal_states' weight and graph (0.5.12 shape)
    assert by_rank[0] == by_rank[1]
    assert by_rank[0].startup_available_bytes == 12 * GIB
    assert by_rank[0].weight_bytes == 70 * GIB and by_rank[0].graph_bytes == {"all": 2 * GIB}
    # stage 1: only what its own scheduler reported (internal_states is stage 0's)
    assert by_rank[2].context_len == 100 and by_rank[2].weight_bytes is None
    assert set(by_rank) == {0, 1, 2, 3}
    fams = {f.name: f for f in src.collect()}
    present = {s.labels["field"]: s.value for s in fams["dsv4_sglang_memory_field_present"].samples}
    assert present == {
        "weight": 1.0,
        "kv_cache": 1.0,
        "graph": 1.0,
        "startup_available": 1.0,
        "swa_tokens": 0.0,
        "context_len": 1.0,
    }
    weights = {s.labels["rank"]: s.value for s in fams["dsv4_sglang_weight_memory_bytes"].samples}
    assert weights == {"0": 70 * GIB, "1": 70 * GIB}
    avail = fams["dsv4_sglang_startup_available_memory_bytes"].samples
    assert {s.labels["rank"]: s.value for s in avail} == {"0": 12 * GIB, "1": 12 * GIB}
    graph = fams["dsv4_sglang_graph_memory_bytes"].samples
    assert {(s.labels["rank"], s.labels["phase"]): s.value for s in graph} == {
        ("0", "all"): 2 * GIB,
        ("1", "all"): 2 * GIB,
    }


# --- reconciliation ----------------------------------------------------------------------------
MEM = RankMemory(weight_bytes=70 * GIB, graph_bytes={"decode": 2 * GIB})
FP8, BF16 = 50 * GIB, 54 * GIB


def test_observed_prefers_startup_free_memory_over_nvml_now():
    at_start = RankMemory(70 * GIB, None, {"decode": 2 * GIB}, startup_available_bytes=10 * GIB)
    assert observed_kv_bytes(at_start, 140 * GIB, 999 * GIB) == 58 * GIB
    assert observed_kv_bytes(MEM, 140 * GIB, 130 * GIB) == 58 * GIB
    assert observed_kv_bytes(RankMemory(), 140 * GIB, 130 * GIB) is None  # no weights


@pytest.mark.parametrize(
    ("observed", "dtype"),
    [
        (FP8 + GIB, "fp8"),  # fp8 plus a rest below the gap
        (BF16 + GIB // 2, "bf16"),
        (FP8 - 32 * 2**20, "fp8"),  # within the rounding slack below
    ],
)
def test_infer_largest_candidate_that_fits(observed, dtype):
    got = infer_index_k_dtype({"fp8": {0: FP8}, "bf16": {0: BF16}}, {0: observed})
    assert got.dtype == dtype and got.margin_bytes == {0: 4 * GIB}


def test_no_inference_when_unsure():
    cands = {"fp8": {0: FP8, 1: FP8}, "bf16": {0: BF16, 1: BF16}}
    assert infer_index_k_dtype(cands, {0: FP8, 1: BF16}).dtype is None  # ranks disagree
    below = infer_index_k_dtype(cands, {0: FP8 - GIB})
    assert below.dtype is None and "less than any" in below.detail
    close = {"fp8": {0: FP8}, "bf16": {0: FP8 + GIB}}
    assert infer_index_k_dtype(close, {0: FP8}).dtype is None  # margin below 2 GiB
    assert infer_index_k_dtype(cands, {}).dtype is None


def test_pricing_inference():
    assert infer_pricing({"legacy": 50 * GIB, "fixed": 46 * GIB}, int(50.4 * GIB)) == "legacy"
    assert infer_pricing({"legacy": 50 * GIB, "fixed": 46 * GIB}, int(46.4 * GIB)) == "fixed"
    assert infer_pricing({"legacy": 50 * GIB, "fixed": 46 * GIB}, 48 * GIB) is None
    assert infer_pricing({"legacy": 50 * GIB, "fixed": 50 * GIB}, 50 * GIB) == "legacy"  # fp8
    assert infer_pricing({"legacy": 50 * GIB, "fixed": 50 * GIB}, 60 * GIB) is None


def test_reconcile_prefers_the_probe_and_skips_ranks_without_weights():
    rows = reconcile(
        {0: 127 * GIB, 1: 127 * GIB, 2: 1},
        {0: MEM, 1: MEM, 2: RankMemory()},
        {0: 54 * GIB},
        {0: 50 * GIB, 1: 50 * GIB, 2: 50 * GIB},
    )
    assert rows == [
        RankReconciliation(0, 127 * GIB, 70 * GIB, 54 * GIB, "probe", 2 * GIB),
        RankReconciliation(1, 127 * GIB, 70 * GIB, 50 * GIB, "model", 2 * GIB),
    ]
    assert [r.unexplained for r in rows] == [GIB, 5 * GIB]


def test_hostile_metrics_labels_are_skipped_or_bounded():
    head = "# TYPE sglang:graph_memory_usage_gb gauge\n"
    rows = [
        f'sglang:graph_memory_usage_gb{{{LABELS.format(tp=0, pp=0)},phase="p{i}"}} 1.0'
        for i in range(40)
    ]
    rows.append(f'sglang:graph_memory_usage_gb{{{LABELS.format(tp=0, pp=0)},phase="A B"}} 1.0')
    bad_rank = LABELS.format(tp="x", pp=0)
    text = (
        head
        + "\n".join(rows)
        + "\n# TYPE sglang:weight_memory_usage_gb gauge\n"
        + f"sglang:weight_memory_usage_gb{{{bad_rank}}} 70\n"
        + f"sglang:weight_memory_usage_gb{{{LABELS.format(tp=0, pp=0)}}} -5\n"
    )
    mem = parse_sglang_metrics(text).memory
    assert list(mem) == [(0, 0)]
    assert len(mem[(0, 0)].graph_bytes or {}) == 8 and mem[(0, 0)].weight_bytes is None
