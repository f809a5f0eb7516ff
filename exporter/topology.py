"""Where each rank of a (possibly multi-node) SGLang deployment runs: pure arithmetic, no I/O.

SGLang launched with ``--nnodes N --node-rank K`` starts, on node K, the scheduler processes
of a contiguous block of TP and PP ranks, and only node 0 serves HTTP. The sidecar of every
node therefore reads SGLang's facts through the head's URL, and needs this map to label its
own GPUs with the deployment-wide rank and to price each local rank's pipeline stage.

The rules, from SGLang's sources (identical in 0.5.12 and 0.5.23):

* ``_calculate_rank_ranges(node_rank)`` (``sglang/srt/entrypoints/engine.py``):
  ``pp_size_per_node = max(pp_size // nnodes, 1)``,
  ``nnodes_per_pp_rank = max(nnodes // pp_size, 1)``; the node holds PP ranks
  ``[pp_size_per_node * (node_rank // nnodes_per_pp_rank), ... + pp_size_per_node)`` and TP
  ranks ``[tp_size_per_node * (node_rank % nnodes_per_pp_rank), ... + tp_size_per_node)``
  with ``tp_size_per_node = tp_size // nnodes_per_pp_rank``.
* The scheduler of (pp_rank, tp_rank) runs on local GPU
  ``base_gpu_id + (pp_rank % pp_size_per_node) * tp_size_per_node
  + (tp_rank % tp_size_per_node) * gpu_id_step`` (same file, the launch loop).
* Its torch.distributed rank is ``tp_size * pp_rank + tp_rank``
  (``sglang/srt/distributed/bootstrap.py`` ``_init_parallel_groups`` in 0.5.23,
  ``ModelRunner.init_torch_distributed`` in 0.5.12).

With the default ``base_gpu_id=0, gpu_id_step=1`` this makes the global rank of local GPU
``i`` equal ``node_rank * gpus_per_node + i`` (checked for every layout in the tests). Other
GPU orders are the ``rank_map`` setting's job: it maps rank positions to GPU indices.
"""

from __future__ import annotations

from dataclasses import dataclass


class TopologyError(ValueError):
    """A TP x PP x nnodes combination SGLang cannot launch; the message says why."""


@dataclass(frozen=True)
class RankPlace:
    """One scheduler process: its local GPU position on this node and its global ranks."""

    local: int
    rank: int
    tp_rank: int
    pp_rank: int
    node_rank: int


@dataclass(frozen=True)
class Topology:
    """A deployment's parallel layout as SGLang reports it plus this node's rank."""

    tp_size: int = 1
    pp_size: int = 1
    nnodes: int = 1
    node_rank: int = 0

    def __post_init__(self) -> None:
        for name in ("tp_size", "pp_size", "nnodes"):
            if getattr(self, name) < 1:
                raise TopologyError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not 0 <= self.node_rank < self.nnodes:
            raise TopologyError(
                f"node_rank {self.node_rank} must be in 0..{self.nnodes - 1} (nnodes={self.nnodes})"
            )
        world = self.tp_size * self.pp_size
        if world % self.nnodes:
            raise TopologyError(
                f"tp_size*pp_size = {world} GPUs do not split evenly over nnodes={self.nnodes}"
            )
        per_pp = self.nnodes_per_pp_rank
        if self.tp_size % per_pp:
            raise TopologyError(
                f"tp_size={self.tp_size} does not split over the {per_pp} nodes of a PP stage"
            )
        if self.pp_size_per_node * self.tp_size_per_node != self.gpus_per_node:
            # SGLang would launch fewer ranks than the world size and hang at start-up.
            raise TopologyError(
                f"pp_size={self.pp_size} and nnodes={self.nnodes}: one must divide the other "
                f"for SGLang to place every rank (it launches {self.pp_size_per_node} PP x "
                f"{self.tp_size_per_node} TP ranks per node, not {self.gpus_per_node})"
            )

    @property
    def pp_size_per_node(self) -> int:
        return max(self.pp_size // self.nnodes, 1)

    @property
    def nnodes_per_pp_rank(self) -> int:
        return max(self.nnodes // self.pp_size, 1)

    @property
    def tp_size_per_node(self) -> int:
        return self.tp_size // self.nnodes_per_pp_rank

    @property
    def gpus_per_node(self) -> int:
        return self.tp_size * self.pp_size // self.nnodes

    @property
    def world_size(self) -> int:
        return self.tp_size * self.pp_size

    def pp_ranks(self) -> range:
        base = self.pp_size_per_node * (self.node_rank // self.nnodes_per_pp_rank)
        return range(base, base + self.pp_size_per_node)

    def tp_ranks(self) -> range:
        base = self.tp_size_per_node * (self.node_rank % self.nnodes_per_pp_rank)
        return range(base, base + self.tp_size_per_node)

    def places(self) -> list[RankPlace]:
        """This node's scheduler processes, ordered by local GPU position."""
        out = []
        for pp in self.pp_ranks():
            for tp in self.tp_ranks():
                local = (pp % self.pp_size_per_node) * self.tp_size_per_node + (
                    tp % self.tp_size_per_node
                )
                rank = self.tp_size * pp + tp
                out.append(RankPlace(local, rank, tp, pp, self.node_rank))
        return sorted(out, key=lambda p: p.local)

    def global_rank(self, local: int) -> int:
        """The global rank of local GPU position ``local`` (``node_rank * gpus_per_node +
        local``, which is what SGLang's launch loop yields)."""
        return self.node_rank * self.gpus_per_node + local

    def local_rank_of(self) -> dict[int, int]:
        """Global rank -> local GPU position, for this node's ranks only."""
        return {p.rank: p.local for p in self.places()}


def node_topology(
    tp_size: int, pp_size: int, reported_nnodes: int, nnodes: int | None, node_rank: int
) -> Topology:
    """This node's topology: sizes from SGLang's /server_info (the head's), nnodes from the
    setting when given (it wins: a setting is the operator's statement), else SGLang's;
    node_rank only from the pod (the head reports its own, 0)."""
    return Topology(tp_size, pp_size, nnodes or reported_nnodes or 1, node_rank)
