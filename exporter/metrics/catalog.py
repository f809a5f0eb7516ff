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
SOURCE_ERRORS = _m(
    "dsv4_source_errors_total",
    "counter",
    "Failed polls of the named source, by bounded reason.",
    ("source", "reason"),
    "sidecar",
)

# --- gpu (NVML) ----------------------------------------------------------------------------
GPU_LABELS = ("rank", "gpu", "uuid")
GPU_INFO = _m(
    "dsv4_gpu_info",
    "info",
    "Identity of each visible GPU and the rank it serves (value 1).",
    ("rank", "gpu", "uuid", "name", "pci_bus_id", "driver_version"),
    "gpu",
)
GPU_COUNT = _m(
    "dsv4_gpu_count",
    "gauge",
    "GPUs read successfully in the last NVML poll (drops when a GPU is lost).",
    (),
    "gpu",
)
GPU_MEMORY_TOTAL = _m(
    "dsv4_gpu_memory_total_bytes",
    "gauge",
    "GPU memory total (NVML, polled).",
    GPU_LABELS,
    "gpu",
)
GPU_MEMORY_USED = _m(
    "dsv4_gpu_memory_used_bytes",
    "gauge",
    "GPU memory used (NVML, polled).",
    GPU_LABELS,
    "gpu",
)
GPU_MEMORY_FREE = _m(
    "dsv4_gpu_memory_free_bytes",
    "gauge",
    "GPU memory free (NVML, polled).",
    GPU_LABELS,
    "gpu",
)
GPU_MEMORY_RESERVED = _m(
    "dsv4_gpu_memory_reserved_bytes",
    "gauge",
    "GPU memory reserved by the driver (NVML v2 memory info; absent where unsupported).",
    GPU_LABELS,
    "gpu",
)
GPU_PROCESS_MEMORY = _m(
    "dsv4_gpu_process_memory_used_bytes",
    "gauge",
    "GPU memory used per process (opt-in: one series per pid).",
    (*GPU_LABELS, "pid"),
    "gpu",
)
NVML_UP = _m(
    "dsv4_nvml_up", "gauge", "1 when the last NVML poll succeeded for every GPU.", (), "gpu"
)
NVML_LAST_SUCCESS = _m(
    "dsv4_nvml_last_success_timestamp_seconds",
    "gauge",
    "Unix time of the last successful NVML poll (alert on time() - this).",
    (),
    "gpu",
)
NVML_DURATION = _m(
    "dsv4_nvml_collect_duration_seconds",
    "gauge",
    "Duration of the last NVML poll.",
    (),
    "gpu",
)
NVML_ERRORS = _m(
    "dsv4_nvml_errors_total",
    "counter",
    "NVML failures by error (library_not_found, driver_not_loaded, gpu_lost, uninitialized, "
    "version_mismatch, no_gpus, timeout, wedged, not_found, unknown).",
    ("error",),
    "gpu",
)

# --- sglang --------------------------------------------------------------------------------
SGLANG_UP = _m("dsv4_sglang_up", "gauge", "1 when the last poll of SGLang succeeded.", (), "sglang")
SGLANG_LAST_SUCCESS = _m(
    "dsv4_sglang_last_success_timestamp_seconds",
    "gauge",
    "Unix time of the last successful SGLang poll.",
    (),
    "sglang",
)
SGLANG_ERRORS = _m(
    "dsv4_sglang_errors_total",
    "counter",
    "Failed SGLang polls by reason (unreachable, timeout, http_status, bad_json, bad_shape, "
    "metrics_unavailable).",
    ("reason",),
    "sglang",
)
SGLANG_INFO = _m(
    "dsv4_sglang_info",
    "info",
    "SGLang version and served model (value 1).",
    ("version", "model"),
    "sglang",
)
SGLANG_RUNNING = _m(
    "dsv4_sglang_running_requests",
    "gauge",
    "Running requests (sglang:num_running_reqs, summed over DP ranks).",
    (),
    "sglang",
)
SGLANG_QUEUED = _m(
    "dsv4_sglang_queued_requests",
    "gauge",
    "Queued requests (sglang:num_queue_reqs, summed over DP ranks).",
    (),
    "sglang",
)
SGLANG_MAX_TOTAL_TOKENS = _m(
    "dsv4_sglang_max_total_num_tokens",
    "gauge",
    "Full-pool token capacity SGLang derived at start-up (/server_info max_total_num_tokens).",
    (),
    "sglang",
)
SGLANG_TOKEN_USAGE = _m(
    "dsv4_sglang_token_usage_ratio",
    "gauge",
    "KV token usage 0-1 (sglang:token_usage, max over ranks).",
    (),
    "sglang",
)
SGLANG_MEM_FRACTION = _m(
    "dsv4_sglang_mem_fraction_static_ratio",
    "gauge",
    "mem_fraction_static SGLang runs with.",
    (),
    "sglang",
)
HICACHE_HOST_USED = _m(
    "dsv4_sglang_hicache_host_used_tokens",
    "gauge",
    "HiCache host pool tokens in use (sglang:hicache_host_used_tokens).",
    (),
    "hicache",
)
HICACHE_HOST_TOTAL = _m(
    "dsv4_sglang_hicache_host_total_tokens",
    "gauge",
    "HiCache host pool capacity in tokens (sglang:hicache_host_total_tokens).",
    (),
    "hicache",
)
HICACHE_LOAD_BACK_TOKENS = _m(
    "dsv4_sglang_hicache_load_back_tokens_total",
    "counter",
    "Tokens loaded back from host to device (sglang:load_back_tokens_total), by pool.",
    ("pool",),
    "hicache",
)
HICACHE_LOAD_BACK_SECONDS = _m(
    "dsv4_sglang_hicache_load_back_duration_seconds_total",
    "counter",
    "Total seconds spent loading back from host (sum of sglang:load_back_duration_seconds).",
    (),
    "hicache",
)
HICACHE_LOAD_BACKS = _m(
    "dsv4_sglang_hicache_load_backs_total",
    "counter",
    "Load-back operations (count of sglang:load_back_duration_seconds).",
    (),
    "hicache",
)

# --- footprint -----------------------------------------------------------------------------
POOL_LABELS = ("rank", "pool")
KV_POOL_PLANNED = _m(
    "dsv4_kv_pool_planned_bytes",
    "gauge",
    "Bytes the deployed configurator budgeted for this pool at SGLang's max_total_num_tokens.",
    POOL_LABELS,
    "footprint",
)
KV_POOL_ALLOCATED = _m(
    "dsv4_kv_pool_allocated_bytes",
    "gauge",
    "Bytes the device pool really allocates for this pool (pages, padding, real dtypes).",
    POOL_LABELS,
    "footprint",
)
KV_POOL_TOKENS = _m(
    "dsv4_kv_pool_tokens",
    "gauge",
    "Slots of each sub-pool derived from max_total_num_tokens.",
    POOL_LABELS,
    "footprint",
)
KV_POOL_OVERCOMMIT = _m(
    "dsv4_kv_pool_overcommit_bytes",
    "gauge",
    "Allocated minus planned KV bytes on this rank: taken from the activation/CUDA-graph reserve.",
    ("rank",),
    "footprint",
)
KV_BYTES_PER_TOKEN = _m(
    "dsv4_kv_bytes_per_full_token",
    "gauge",
    "Configurator coefficient: bytes per full-pool token, legacy (index-K as fp8) and fixed.",
    ("pricing",),
    "footprint",
)
KV_CORRECT_TOKENS = _m(
    "dsv4_kv_correct_full_tokens",
    "gauge",
    "Full tokens the same budget gives when every pool is priced by its real dtype.",
    ("rank",),
    "footprint",
)
MEMORY_RESERVE = _m(
    "dsv4_memory_reserve_bytes",
    "gauge",
    "Intended reserve for activations and CUDA graphs: GPU memory x (1 - mem_fraction_static).",
    ("rank",),
    "footprint",
)
MEMORY_RESERVE_LEFT = _m(
    "dsv4_memory_reserve_remaining_bytes",
    "gauge",
    "Reserve left after the over-commit: reserve - over-commit (negative means the pools ate it).",
    ("rank",),
    "footprint",
)
DEPLOYMENT_INFO = _m(
    "dsv4_deployment_info",
    "info",
    "Deployment facts that drive the footprint and the corruption risk (value 1).",
    ("index_k_dtype", "configurator", "hicache", "model"),
    "footprint",
)
FOOTPRINT_STATUS = _m(
    "dsv4_footprint_up",
    "gauge",
    "1 when the footprint is computed; 0 with the reason (unknown_model, no_sglang, "
    "bad_config, budget) when it is not.",
    ("reason",),
    "footprint",
)
