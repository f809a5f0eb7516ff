"""Rank placement across nodes: exporter.topology against SGLang's own released launcher code.

The oracle is ``_calculate_rank_ranges`` lifted out of each release's
``sglang/srt/entrypoints/engine.py`` with ``ast`` (the function is pure: it only needs
``Tuple`` and, from 0.5.23 on, ``get_parallel()``), so the test runs SGLang's code, not our
restatement of it. The GPU index and torch rank formulas are the launch loop's and
``_init_parallel_groups``' expressions (module docstring of exporter.topology).
"""

from __future__ import annotations

import ast
import types
import typing
from collections.abc import Callable

import pytest

from exporter.footprint.releases import FIRST_RELEASE, NEWEST_RELEASE
from exporter.topology import RankPlace, Topology, TopologyError
from tests.sglang_release import release_dir

RELEASES = (FIRST_RELEASE, "0.5.20", NEWEST_RELEASE)  # the first, the forks' base, the newest
# (tp, pp, nnodes): layouts a DSV4 deployment can take, one node to four.
LAYOUTS = [
    (8, 1, 1),
    (4, 2, 1),
    (16, 1, 2),
    (8, 2, 2),
    (4, 4, 2),
    (2, 8, 2),
    (16, 2, 4),
    (8, 4, 4),
    (32, 1, 4),
    (8, 8, 4),
]


def _rank_ranges(version: str) -> Callable[[int, int, int, int], tuple[range, range, int, int]]:
    """The release's _calculate_rank_ranges as (nnodes, pp, tp, node_rank) -> its result."""
    path = release_dir(version) / "sglang/srt/entrypoints/engine.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    (fn,) = [
        n
        for n in tree.body
        if isinstance(n, ast.FunctionDef) and n.name == "_calculate_rank_ranges"
    ]
    params = [a.arg for a in fn.args.args]
    parallel = types.SimpleNamespace()
    ns: dict[str, typing.Any] = {"Tuple": tuple, "get_parallel": lambda: parallel}
    exec(compile(ast.Module([fn], []), str(path), "exec"), ns)
    func = ns["_calculate_rank_ranges"]

    def call(nnodes: int, pp: int, tp: int, node_rank: int) -> tuple[range, range, int, int]:
        if params == ["node_rank"]:  # 0.5.23: sizes come from get_parallel()
            parallel.nnodes, parallel.pp_size, parallel.tp_size = nnodes, pp, tp
            return func(node_rank)
        return func(nnodes=nnodes, pp_size=pp, tp_size=tp, node_rank=node_rank)

    return call


@pytest.fixture(scope="module", params=RELEASES)
def sglang_ranges(request):
    return _rank_ranges(request.param)


def _sglang_places(ranges, tp: int, pp: int, nnodes: int, node: int) -> list[RankPlace]:
    """What SGLang's launch loop starts on ``node`` (base_gpu_id 0, gpu_id_step 1)."""
    pp_range, tp_range, pp_per_node, tp_per_node = ranges(nnodes, pp, tp, node)
    out = [
        RankPlace(
            local=(p % pp_per_node) * tp_per_node + (t % tp_per_node),
            rank=tp * p + t,
            tp_rank=t,
            pp_rank=p,
            node_rank=node,
        )
        for p in pp_range
        for t in tp_range
    ]
    return sorted(out, key=lambda r: r.local)


@pytest.mark.parametrize(("tp", "pp", "nnodes"), LAYOUTS)
def test_places_match_sglang_launcher(sglang_ranges, tp, pp, nnodes):
    seen: list[int] = []
    for node in range(nnodes):
        topo = Topology(tp, pp, nnodes, node)
        places = topo.places()
        assert places == _sglang_places(sglang_ranges, tp, pp, nnodes, node)
        assert [p.local for p in places] == list(range(topo.gpus_per_node))
        # The shortcut the NVML source uses: global rank = node_rank * gpus_per_node + local.
        assert [topo.global_rank(p.local) for p in places] == [p.rank for p in places]
        seen += [p.rank for p in places]
    assert sorted(seen) == list(range(tp * pp)), "every rank on exactly one node"


def test_two_node_pp2_puts_one_stage_per_node():
    head, worker = Topology(8, 2, 2, 0), Topology(8, 2, 2, 1)
    assert {p.pp_rank for p in head.places()} == {0}
    assert {p.pp_rank for p in worker.places()} == {1}
    assert [p.rank for p in worker.places()] == list(range(8, 16))
    assert [p.tp_rank for p in worker.places()] == list(range(8))


def test_two_node_tp16_spans_nodes_in_one_stage():
    worker = Topology(16, 1, 2, 1)
    assert [(p.rank, p.tp_rank, p.pp_rank) for p in worker.places()][:2] == [(8, 8, 0), (9, 9, 0)]
    assert worker.local_rank_of()[15] == 7


def test_single_node_is_the_identity():
    topo = Topology(8, 1)
    assert [(p.local, p.rank) for p in topo.places()] == [(i, i) for i in range(8)]


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"tp_size": 8, "nnodes": 2, "node_rank": 2}, "node_rank 2 must be in 0..1"),
        ({"tp_size": 3, "nnodes": 2}, "do not split evenly over nnodes=2"),
        ({"tp_size": 2, "pp_size": 3, "nnodes": 2}, "one must divide the other"),
        ({"tp_size": 6, "pp_size": 2, "nnodes": 3}, "one must divide the other"),
        ({"tp_size": 0}, "tp_size must be >= 1"),
    ],
)
def test_impossible_layouts_are_named(kwargs, says):
    with pytest.raises(TopologyError, match=says):
        Topology(**kwargs)
