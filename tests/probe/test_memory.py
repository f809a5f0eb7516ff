"""Measured start-up memory: the probe's tensor walk, the sidecar's export, the drift maths.

The walk runs on real torch tensors (meta device: sizes without memory) held the way SGLang's
pool holds them (attributes, per-layer lists, dicts keyed by compress ratio, aliases, views).
The released pools themselves are measured in test_release_probe.py.
"""

from __future__ import annotations

import asyncio
import types

import pytest

from exporter.probe.memory import configurator_record, index_k_layout, measure_pool
from exporter.probe.snapshot import ProbeCounters, write_snapshot
from exporter.sources.probe_drift import drift_by_rank
from exporter.sources.probe_files import ProbeFileSource
from tests.probe.test_probe_files import NOW, Clock, samples, value

torch = pytest.importorskip("torch")


def _sglang_obj(name: str, **attrs):
    """An object whose class lives in an ``sglang`` module (the walk only descends into those)."""
    cls = types.new_class(name)
    cls.__module__ = "sglang.srt.mem_cache.fake"
    obj = cls()
    vars(obj).update(attrs)
    return obj


def _meta(*shape, dtype=torch.uint8):
    return torch.empty(*shape, dtype=dtype, device="meta")


def _pool(index_k_row_bytes: int):
    swa = [_meta(10, 256 * 585) for _ in range(3)]
    index_pool = _sglang_obj(
        "DeepSeekV4IndexerPool",
        page_size=64,
        index_head_dim=128,
        index_k_with_scale_buffer=[_meta(5, 64 * index_k_row_bytes) for _ in range(2)],
    )
    c4 = _sglang_obj("DeepSeekV4SingleKVPool", kv_buffer=[_meta(7, 64 * 585)])
    state4 = _sglang_obj("CompressStatePool", ratio=4, kv_score=_meta(8, 2048, dtype=torch.float32))
    state128 = _sglang_obj("CompressStatePool", kv_score=_meta(4, 1024, dtype=torch.float32))
    return _sglang_obj(
        "DeepSeekV4TokenToKVPool",
        start_layer=0,
        end_layer=4,
        compression_ratios=[0, 4, 128, 4],
        swa_kv_pool=_sglang_obj("DeepSeekV4SingleKVPool", kv_buffer=swa),
        kv_pools={4: c4},
        c4_kv_pool=c4,  # alias of kv_pools[4]: counted once
        index_pools={4: index_pool},
        swa_view=swa[0].view(torch.int8),  # a view of an SWA buffer: same storage, counted once
        compress_state_pools=[None, state4, state128, None],
        scratch=_meta(3),  # an attribute the probe does not name
    )


def test_measure_pool_counts_each_storage_once_by_sub_pool():
    m = measure_pool(_pool(132))
    assert m["class"] == "DeepSeekV4TokenToKVPool" and m["layers"] == [0, 4]
    assert m["bytes"] == {
        "swa_kv": 3 * 10 * 256 * 585,
        "c4_kv": 7 * 64 * 585,
        "c4_index_k": 2 * 5 * 64 * 132,
        "c4_state": 8 * 2048 * 4,
        "c128_state": 4 * 1024 * 4,  # ratio from compression_ratios[2], not from the holder
        "other": 3,
    }
    assert m["tensors"] == 3 + 1 + 2 + 2 + 1
    assert m["index_k"] == {
        "dtype": "fp8",
        "layout": "fused",
        "bytes_per_slot": 132.0,
        "page_size": 64,
        "head_dim": 128,
    }


@pytest.mark.parametrize(
    ("row", "dtype"), [(256, "bf16"), (132, "fp8"), (68, "fp4"), (8, "unknown")]
)
def test_index_k_dtype_read_off_the_buffer(row, dtype):
    layout = index_k_layout(_pool(row))
    assert layout is not None and layout["dtype"] == dtype and layout["bytes_per_slot"] == row


def test_configurator_record_from_arguments_and_result():
    conf = types.SimpleNamespace(bytes_per_full_token=7086.75)
    result = types.SimpleNamespace(
        max_total_num_tokens=7192320, c4_state_pool_size=22472, mem_fraction_static=0.88, flag=True
    )
    rec = configurator_record(
        conf, "calculate_pool_sizes", (53687091200,), {"page_size": 256}, result, {"_x": 5}
    )
    assert rec["available_bytes"] == 53687091200 and rec["page_size"] == 256
    assert rec["bytes_per_full_token"] == 7086.75 and rec["fixed_bytes"] == {"_x": 5}
    assert rec["sizes"] == {"max_total_num_tokens": 7192320, "c4_state_pool_size": 22472}
    tokens = configurator_record(
        conf, "calculate_pool_sizes_from_max_tokens", (1024, 256), {}, result, {}
    )
    assert tokens["available_bytes"] is None  # a token count is not a budget


def _memory(pools: dict[str, int], budget: int | None = 1000) -> dict:
    conf = None
    if budget is not None:
        conf = {
            "class": "DSV4PoolConfigurator",
            "method": "calculate_pool_sizes",
            "available_bytes": budget,
            "page_size": 256,
            "bytes_per_full_token": 8356.45,
        }
    return {
        "configurator": conf,
        "pools": [
            {
                "class": "DeepSeekV4TokenToKVPool",
                "tensors": 2,
                "bytes": pools,
                "index_k": {
                    "dtype": "bf16",
                    "layout": "fused",
                    "bytes_per_slot": 256.0,
                    "page_size": 64,
                    "head_dim": 128,
                },
            }
        ],
    }


def test_source_exports_measured_memory(tmp_path):
    c = ProbeCounters()
    c.memory = _memory({"swa_kv": 700, "c4_index_k": 500})
    write_snapshot(tmp_path, "0", c, written_at=NOW - 1)
    write_snapshot(tmp_path, "1", ProbeCounters(), written_at=NOW - 1)  # nothing measured yet
    source = ProbeFileSource(tmp_path, clock=Clock())
    asyncio.run(source.poll_once())
    found = samples(source)
    assert value(found, "dsv4_probe_pool_bytes", rank="0", pool="swa_kv") == 700
    assert value(found, "dsv4_probe_pool_bytes", rank="0", pool="c4_index_k") == 500
    assert value(found, "dsv4_probe_pool_budget_bytes", rank="0") == 1000
    assert value(found, "dsv4_probe_overcommit_bytes", rank="0") == 200
    assert value(found, "dsv4_probe_configurator_bytes_per_full_token", rank="0") == 8356.45
    info = {"rank": "0", "dtype": "bf16", "layout": "fused", "bytes_per_slot": "256.0"}
    assert value(found, "dsv4_probe_index_k_info", **info) == 1
    assert value(found, "dsv4_probe_overcommit_bytes", rank="1") is None
    assert value(found, "dsv4_probe_pool_bytes", rank="1", pool="swa_kv") is None
    assert source.measured_pools() == {"0": {"swa_kv": 700, "c4_index_k": 500}}


def test_down_rank_drops_its_measurement(tmp_path):
    c = ProbeCounters()
    c.memory = _memory({"swa_kv": 700})
    write_snapshot(tmp_path, "0", c, written_at=NOW - 60)  # stale
    source = ProbeFileSource(tmp_path, clock=Clock())
    asyncio.run(source.poll_once())
    assert value(samples(source), "dsv4_probe_pool_bytes", rank="0", pool="swa_kv") is None
    assert source.measured_pools() == {}


def test_drift_is_predicted_minus_measured_over_both_sides():
    predicted = {0: {"swa_kv": 700, "c4_index_k": 300}, 1: {"swa_kv": 700}}
    measured = {"0": {"swa_kv": 700, "c4_index_k": 500, "other": 3}}
    assert drift_by_rank(predicted, measured) == {
        "0": {"swa_kv": 0, "c4_index_k": -200, "other": -3}
    }


def test_split_fp4_layout_as_rocm_allocates_it():
    """0.5.21+ on HIP: payload [pages, 1, 4, page, 16] fp4x2 and scales [pages, 1, 4, page]."""
    index_pool = _sglang_obj(
        "DeepSeekV4IndexerPool",
        page_size=64,
        index_head_dim=128,
        index_k_with_scale_buffer=None,
        index_k_payload_buffer=[_meta(5, 1, 4, 64, 16)],
        index_k_scale_buffer=[_meta(5, 1, 4, 64)],
    )
    pool = _sglang_obj("DeepSeekV4TokenToKVPool", index_pools={4: index_pool})
    assert index_k_layout(pool) == {
        "dtype": "fp4",
        "layout": "split",
        "bytes_per_slot": 68.0,
        "page_size": 64,
        "head_dim": 128,
    }
    assert measure_pool(pool)["bytes"] == {"c4_index_k": 5 * 4 * 64 * 16 + 5 * 4 * 64}


def test_no_drift_exported_while_the_model_has_no_numbers(tmp_path):
    from exporter.config_loader import load_settings
    from exporter.sources.footprint import FootprintView
    from exporter.sources.probe_drift import ModelDrift

    c = ProbeCounters()
    c.memory = _memory({"swa_kv": 700})
    write_snapshot(tmp_path, "0", c, written_at=NOW - 1)
    source = ProbeFileSource(tmp_path, clock=Clock())
    asyncio.run(source.poll_once())
    view = FootprintView(load_settings({"gpu_backend": "fake", "canary": False}), env={})
    assert view.status == "no_sglang"
    (family,) = ModelDrift(view, source).collect()
    assert family.samples == []
