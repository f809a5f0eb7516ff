"""Facts nothing configured, inferred from SGLang's memory figures and NVML (pure).

The index-K dtype when nothing told the sidecar: the KV bytes a rank really holds are NVML's
total minus the free memory SGLang measured at start-up (after pools and graphs, before any
request: no activations), minus weights and graphs; 0.5.12-0.5.16 without that figure in
/server_info fall back to NVML used now. Each candidate dtype's pool bytes at SGLang's token
count are priced by the footprint model; the observed bytes are the candidate's plus a rest
that is never negative, so the answer is the largest candidate that fits. That is right while
the true rest stays below the gap between adjacent candidates: the **margin**, exported. bf16
and fp8 index-K differ by ~4 GiB per rank at a 50 GiB budget on V4-Flash (0.5.20), far above a
healthy rank's rest at start-up (context + driver reserve, ~0.5-1.5 GiB); an inference is made
only when the margin is at least ``MIN_MARGIN_BYTES``.

The configurator's pricing (legacy prices index-K as fp8, fixed by dtype) is inferred from the
budget SGLang's profiler hands it, estimated as GPU x mem_fraction_static - weights
(``available_bytes_from_gpu``; the CUDA context makes the real budget smaller by context x
fraction, ~0.4 GiB), against what each pricing would have planned for SGLang's token count: the
pricing whose plan lies within ``PRICING_TOLERANCE_BYTES`` of the estimate, when only one does.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from exporter.units import GIB


class MeasuredMemory(Protocol):
    """SGLang's own memory figures for one rank (``sources.sglang.RankMemory`` is one)."""

    @property
    def weight_bytes(self) -> int | None: ...
    @property
    def startup_available_bytes(self) -> int | None: ...
    @property
    def graph_total_bytes(self) -> int | None: ...


MIN_MARGIN_BYTES = 2 * GIB  # the candidates must differ by more than a healthy rank's rest
NEGATIVE_SLACK_BYTES = 64 << 20  # SGLang rounds its GB figures (0.01 GB before 0.5.17)
PRICING_TOLERANCE_BYTES = 1 * GIB  # context x fraction bias + one page of tokens


@dataclass(frozen=True)
class DtypeInference:
    dtype: str | None  # None: no rank had the evidence, ranks disagree, or the margin is small
    margin_bytes: dict[int, int]  # rank -> gap between adjacent candidates' pool bytes
    detail: str


def observed_kv_bytes(
    mem: MeasuredMemory | None, total: int | None, used: int | None
) -> int | None:
    """Bytes on the GPU that weights and graphs do not explain, at start-up when SGLang says
    how much was free then, else now; None without SGLang's weight figure."""
    if mem is None or mem.weight_bytes is None:
        return None
    graphs = mem.graph_total_bytes or 0
    if mem.startup_available_bytes is not None and total:
        return total - mem.startup_available_bytes - mem.weight_bytes - graphs
    if used is not None:
        return used - mem.weight_bytes - graphs
    return None


def infer_index_k_dtype(
    candidates: Mapping[str, Mapping[int, int]],
    observed: Mapping[int, int],
    min_margin: int = MIN_MARGIN_BYTES,
) -> DtypeInference:
    """``candidates``: dtype -> rank -> pool bytes the model prices; ``observed``: rank -> KV
    bytes observed. Every rank with evidence must pick the same dtype."""
    picks: set[str] = set()
    margins: dict[int, int] = {}
    for rank, seen in sorted(observed.items()):
        allocs = sorted(
            (by_rank[rank], dtype) for dtype, by_rank in candidates.items() if rank in by_rank
        )
        if len(allocs) < 2:
            continue
        fits = [(a, d) for a, d in allocs if a <= seen + NEGATIVE_SLACK_BYTES]
        if not fits:
            return DtypeInference(
                None, {}, f"rank {rank}: {seen} B observed is less than any candidate's pools"
            )
        picks.add(fits[-1][1])
        margins[rank] = min(b[0] - a[0] for a, b in itertools.pairwise(allocs))
    if not picks:
        return DtypeInference(None, {}, "no rank reports SGLang's weights and NVML memory")
    if len(picks) > 1:
        return DtypeInference(None, margins, f"ranks disagree: {sorted(picks)}")
    if min(margins.values()) < min_margin:
        return DtypeInference(
            None, margins, f"candidates differ by {min(margins.values())} B < {min_margin} B"
        )
    return DtypeInference(picks.pop(), margins, "")


def infer_pricing(
    planned: Mapping[str, int],
    budget_estimate: int,
    tolerance: int = PRICING_TOLERANCE_BYTES,
) -> str | None:
    """The pricing whose plan for SGLang's token count matches the estimated budget; None when
    none or both are within the tolerance and the plans differ (both match when the plans are
    equal, as with fp8 index-K: then 'legacy', upstream's)."""
    near = [p for p, b in sorted(planned.items()) if abs(b - budget_estimate) <= tolerance]
    if len(set(planned.values())) == 1 and near:
        return "legacy" if "legacy" in planned else near[0]
    return near[0] if len(near) == 1 else None
