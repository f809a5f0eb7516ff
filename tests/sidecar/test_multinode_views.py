"""One node of a multi-node deployment, without servers: the footprint view prices only this
node's ranks with their own stage, the NVML source labels GPUs globally (a lost GPU keeps its
global rank), and nnodes / node_rank resolve from settings and /server_info."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from exporter.config_loader import ConfigError, load_settings
from exporter.footprint import resolve_model, stage_slice
from exporter.sim.fake_nvml import FakeNvml
from exporter.sim.settings import SimSettings
from exporter.sources.footprint import FootprintView
from exporter.sources.nvml import NvmlSource
from exporter.sources.sglang import parse_server_info

FIX = Path(__file__).parent.parent / "fixtures"
RECORDED = json.loads((FIX / "sglang" / "server_info_v0.5.json").read_text())


def _facts(**over):
    d = {**RECORDED, "version": "0.5.23", "model_path": "deepseek-ai/DeepSeek-V4-Pro", **over}
    return parse_server_info(d)


def _view(**settings) -> FootprintView:
    return FootprintView(load_settings(settings), env={})


def test_server_info_nnodes_is_read_and_defaults_to_one():
    assert parse_server_info(RECORDED).nnodes == 1
    assert _facts(nnodes=2).nnodes == 2


@pytest.mark.parametrize(
    ("tp", "pp", "node", "ranks", "stages"),
    [
        (16, 1, 1, range(8, 16), {0}),  # TP spans the nodes: the whole model on each rank
        (8, 2, 0, range(0, 8), {0}),
        (8, 2, 1, range(8, 16), {1}),
        (4, 4, 1, range(8, 16), {2, 3}),  # two stages per node
    ],
)
def test_view_prices_only_this_nodes_ranks_with_their_stage(tp, pp, node, ranks, stages):
    view = _view(node_rank=node)
    view.refresh(_facts(tp_size=tp, pp_size=pp, nnodes=2), {}, {})
    assert view.status == "ok", view.detail
    assert [r.rank for r in view.ranks] == list(ranks)
    assert {r.footprint.stage.pp_rank for r in view.ranks} == stages
    geom = resolve_model("deepseek-v4-pro")
    for r in view.ranks:
        want = stage_slice(geom, pp, r.place.pp_rank)
        assert (r.footprint.stage.start, r.footprint.stage.end) == (want.start, want.end)
        assert r.rank == tp * r.place.pp_rank + r.place.tp_rank


def test_stage_footprints_differ_by_their_layers():
    node0, node1 = _view(node_rank=0), _view(node_rank=1)
    facts = _facts(tp_size=8, pp_size=2, nnodes=2)
    node0.refresh(facts, {}, {})
    node1.refresh(facts, {}, {})
    a0 = node0.allocated_by_rank()[0]
    a1 = node1.allocated_by_rank()[8]
    assert (
        a1 > a0 > 0
    )  # stage 1 holds 31 of V4-Pro's 61 layers (get_pp_indices: the remainder last)


def test_setting_nnodes_wins_over_server_info():
    view = _view(node_rank=1, nnodes=2)
    view.refresh(_facts(tp_size=16, pp_size=1), {}, {})  # /server_info without nnodes
    assert [r.rank for r in view.ranks] == list(range(8, 16))


def test_single_node_defaults_are_unchanged():
    view = _view()
    view.refresh(_facts(tp_size=8, pp_size=2), {}, {})
    assert [r.rank for r in view.ranks] == list(range(16))
    assert view.as_json()["topology"]["gpus_per_node"] == 16


def test_impossible_node_rank_is_bad_config_and_drops_rank_info():
    view = _view(node_rank=3)
    view.refresh(_facts(tp_size=8, pp_size=2, nnodes=2), {}, {})
    assert view.status == "bad_config" and "node_rank" in view.detail
    names = {s.name for fam in view.collect() for s in fam.samples}
    assert "dsv4_rank_info" not in names and "dsv4_kv_pool_allocated_bytes" not in names
    assert "must be in 0..1" in view.as_json()["topology"]["error"]


def test_rank_info_follows_sglang_going_away():
    view = _view(node_rank=1)
    view.refresh(_facts(tp_size=8, pp_size=2, nnodes=2), {}, {})
    assert any(s.name == "dsv4_rank_info" for fam in view.collect() for s in fam.samples)
    view.refresh(None, {}, {})
    assert not any(s.name == "dsv4_rank_info" for fam in view.collect() for s in fam.samples)


def test_nvml_labels_local_gpus_with_global_ranks():
    fake = FakeNvml(count=8, faults="lost=2@0")
    src = NvmlSource(nvml=fake, rank_base=lambda n: 1 * n)
    asyncio.run(src.poll_once())
    snap = src.snapshot
    assert [(g.rank, g.index) for g in snap.gpus] == [(8 + i, i) for i in range(8) if i != 2]
    assert list(snap.failed) == [10], "a lost GPU is reported under its global rank"
    assert set(src.total_bytes_by_rank()) == {8, 9, 11, 12, 13, 14, 15}


@pytest.mark.parametrize(
    ("over", "says"),
    [
        ({"node_rank": -1}, "node_rank"),
        ({"nnodes": 0}, "nnodes"),
    ],
)
def test_bad_node_settings_name_the_key(over, says):
    with pytest.raises(ConfigError, match=says):
        load_settings(over)


def test_simulator_refuses_a_layout_sglang_cannot_place():
    with pytest.raises(ValueError, match="one must divide the other"):
        SimSettings(tp_size=2, pp_size=3, nnodes=2)
