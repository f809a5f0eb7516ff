"""Memory reconciliation per rank: NVML used = weights + KV pools + CUDA graphs + the rest.

SGLang measures its weights and CUDA graphs (``RankMemory``, its own gauges), the probe
measures the KV pools (else the footprint model prices them), NVML measures the whole GPU. What
none of them explains (CUDA context, NCCL buffers, activations, and any pool memory the model
does not know) is exported as unexplained bytes.

The same arithmetic settles facts nothing configured (the index-K dtype, the
configurator's pricing): ``exporter.footprint.inference``, in the pure core.

Pure: no I/O; the footprint view and the collector below call it with the latest snapshots.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from prometheus_client.core import Metric

from exporter.footprint.inference import (
    DtypeInference,
    infer_index_k_dtype,
    infer_pricing,
    observed_kv_bytes,
)
from exporter.metrics import catalog as m
from exporter.sources.sglang import RankMemory


@dataclass(frozen=True)
class RankReconciliation:
    rank: int
    nvml_used: int
    weights: int
    kv_pools: int
    kv_source: str  # "probe" or "model"
    graphs: int

    @property
    def unexplained(self) -> int:
        return self.nvml_used - self.weights - self.kv_pools - self.graphs


def reconcile(
    used: Mapping[int, int],
    memory: Mapping[int, RankMemory],
    measured_pools: Mapping[int, int],
    predicted_pools: Mapping[int, int],
) -> list[RankReconciliation]:
    """Per rank with NVML and SGLang's weight figure: the split of NVML used memory."""
    out = []
    for rank, nvml_used in sorted(used.items()):
        mem = memory.get(rank)
        if mem is None or mem.weight_bytes is None:
            continue
        if rank in measured_pools:
            kv, source = measured_pools[rank], "probe"
        elif rank in predicted_pools:
            kv, source = predicted_pools[rank], "model"
        else:
            continue
        out.append(
            RankReconciliation(
                rank, nvml_used, mem.weight_bytes, kv, source, mem.graph_total_bytes or 0
            )
        )
    return out


class _Inputs(Protocol):
    def used_by_rank(self) -> Mapping[int, int]: ...
    def memory_by_rank(self) -> Mapping[int, RankMemory]: ...
    def measured_pools_by_rank(self) -> Mapping[int, int]: ...
    def predicted_pools_by_rank(self) -> Mapping[int, int]: ...


class MemoryReconciliation:
    """Collector: the split of every rank's NVML used memory and the unexplained rest."""

    def __init__(self, inputs: _Inputs) -> None:
        self.inputs = inputs

    def rows(self) -> list[RankReconciliation]:
        i = self.inputs
        return reconcile(
            i.used_by_rank(),
            i.memory_by_rank(),
            i.measured_pools_by_rank(),
            i.predicted_pools_by_rank(),
        )

    def collect(self) -> Iterable[Metric]:
        parts, rest = m.MEMORY_ACCOUNTED.family(), m.MEMORY_UNEXPLAINED.family()
        for row in self.rows():
            r = str(row.rank)
            parts.add_metric([r, "weights"], float(row.weights))
            parts.add_metric([r, "kv_pools"], float(row.kv_pools))
            parts.add_metric([r, "cuda_graphs"], float(row.graphs))
            rest.add_metric([r], float(row.unexplained))
        yield parts
        yield rest


__all__ = [
    "DtypeInference",
    "MemoryReconciliation",
    "RankReconciliation",
    "infer_index_k_dtype",
    "infer_pricing",
    "observed_kv_bytes",
    "reconcile",
]
