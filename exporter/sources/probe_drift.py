"""Model drift: the footprint model's allocated bytes minus the probe's measured bytes, per pool.

The footprint view (``sources/footprint.py``) predicts what each rank's device pool allocates
from SGLang's token count and the release's rules; the probe measures the pool's tensors. Equal
numbers mean the model knows this SGLang build. A difference means it does not: a release
whose pools changed, a fork, or a deployment fact the sidecar was told or assumed wrongly (the
index-K dtype above all). Exported only where both sides have a number for the rank; pools
only one side knows are exported too (the other side counts as 0).
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import Metric

from exporter.metrics import catalog as C
from exporter.sources.footprint import FootprintView
from exporter.sources.probe_files import ProbeFileSource


def drift_by_rank(
    predicted: dict[int, dict[str, int]], measured: dict[str, dict[str, int]]
) -> dict[str, dict[str, int]]:
    """rank -> pool -> predicted minus measured, over the ranks both sides cover."""
    out: dict[str, dict[str, int]] = {}
    for rank, pools in predicted.items():
        got = measured.get(str(rank))
        if got is None:
            continue
        names = sorted(set(pools) | set(got))
        out[str(rank)] = {n: pools.get(n, 0) - got.get(n, 0) for n in names}
    return out


class ModelDrift:
    """Collector over the footprint view and the probe source; no state, no I/O."""

    def __init__(self, footprint: FootprintView, probe: ProbeFileSource) -> None:
        self.footprint = footprint
        self.probe = probe

    def predicted(self) -> dict[int, dict[str, int]]:
        if self.footprint.status != "ok":
            return {}
        return {
            r.rank: {name: p.allocated_bytes for name, p in r.footprint.pools.items()}
            for r in self.footprint.ranks
        }

    def collect(self) -> Iterable[Metric]:
        fam = C.MODEL_DRIFT.family()
        for rank, pools in drift_by_rank(self.predicted(), self.probe.measured_pools()).items():
            for name, diff in pools.items():
                fam.add_metric([rank, name], float(diff))
        yield fam
