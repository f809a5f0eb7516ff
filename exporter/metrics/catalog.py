"""Every metric the sidecar exports, in one place.

Each :class:`MetricSpec` names a metric once; collectors build fresh families from it at
scrape time (``spec.family()``), and ``docs/metrics.md`` is generated from this module, so a
name cannot be exported without being documented. Names follow the Prometheus conventions:
one ``dsv4_`` prefix, base units, counters end in ``_total``, identity in ``*_info``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)

Kind = Literal["gauge", "counter", "histogram", "info"]


@dataclass(frozen=True)
class MetricSpec:
    """One exported metric: name (as scraped), kind, help, label names, and where it comes from."""

    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...] = ()
    area: str = ""
    buckets: tuple[float, ...] = field(default=())

    def __post_init__(self) -> None:
        if not self.name.startswith("dsv4_"):
            raise ValueError(f"{self.name}: every exported name starts with dsv4_")
        if self.kind == "counter" and not self.name.endswith("_total"):
            raise ValueError(f"{self.name}: counters end in _total")
        if self.kind == "info" and not self.name.endswith("_info"):
            raise ValueError(f"{self.name}: info metrics end in _info")

    @property
    def family_name(self) -> str:
        """The name prometheus_client's family classes take (suffix added back on render)."""
        if self.kind == "counter":
            return self.name.removesuffix("_total")
        if self.kind == "info":
            return self.name.removesuffix("_info")
        return self.name

    def family(self, labels: Sequence[str] | None = None) -> Metric:
        """A fresh, empty family for this spec; ``add_metric`` label values in spec order."""
        names = list(self.labels if labels is None else labels)
        if self.kind == "gauge":
            return GaugeMetricFamily(self.family_name, self.help, labels=names)
        if self.kind == "counter":
            return CounterMetricFamily(self.family_name, self.help, labels=names)
        if self.kind == "histogram":
            return HistogramMetricFamily(self.family_name, self.help, labels=names)
        return InfoMetricFamily(self.family_name, self.help, labels=[])

    def info(self, values: dict[str, str]) -> Metric:
        """An ``*_info`` series of value 1 carrying identity labels (rendered as a gauge in the
        text format and as an info metric in OpenMetrics, by prometheus_client)."""
        fam = InfoMetricFamily(self.family_name, self.help)
        fam.add_metric([], {k: str(values.get(k, "")) for k in self.labels})
        return fam


CATALOG: dict[str, MetricSpec] = {}


def _m(
    name: str,
    kind: Kind,
    help: str,
    labels: Sequence[str] = (),
    area: str = "",
    buckets: Sequence[float] = (),
) -> MetricSpec:
    if name in CATALOG:
        raise ValueError(f"duplicate metric {name}")
    spec = MetricSpec(name, kind, help, tuple(labels), area, tuple(buckets))
    CATALOG[name] = spec
    return spec


# --- sidecar self --------------------------------------------------------------------------
BUILD_INFO = _m(
    "dsv4_sidecar_build_info",
    "info",
    "Sidecar version and Python version (value 1).",
    ("version", "python"),
    "sidecar",
)
SOURCE_UP = _m(
    "dsv4_source_up",
    "gauge",
    "1 when the named source's last poll succeeded, 0 when it is down (see its errors).",
    ("source",),
    "sidecar",
)
