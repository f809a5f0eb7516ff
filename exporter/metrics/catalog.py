"""Every metric the sidecar exports, in one place.

Each :class:`MetricSpec` names a metric once; collectors build fresh families from it at
scrape time (``spec.family()``), and ``docs/metrics.md`` is generated from this module, so a
name cannot be exported without being documented. Names follow the Prometheus conventions:
one ``dsv4_`` prefix, base units, counters end in ``_total``, identity in ``*_info``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, cast

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)

from exporter.dsml.catalog import SIGNALS
from exporter.probe.snapshot import GAP_BUCKETS_S
from exporter.sources import reasons as source_reasons

Kind = Literal["gauge", "counter", "histogram", "info"]

if TYPE_CHECKING:

    class Family(Metric):
        """What :meth:`MetricSpec.family` returns, for the type checker: a family of the
        spec's kind. ``add_metric``'s value is the kind's (a float for gauges and counters,
        ``(le, count)`` buckets then the sum for histograms), hence ``Any``."""

        def add_metric(self, labels: Sequence[str], value: Any, *args: Any, **kw: Any) -> None: ...

else:
    Family = Metric


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

    def family(self, labels: Sequence[str] | None = None) -> Family:
        """A fresh, empty family for this spec; ``add_metric`` label values in spec order."""
        names = list(self.labels if labels is None else labels)
        fam: Metric
        if self.kind == "gauge":
            fam = GaugeMetricFamily(self.family_name, self.help, labels=names)
        elif self.kind == "counter":
            fam = CounterMetricFamily(self.family_name, self.help, labels=names)
        elif self.kind == "histogram":
            fam = HistogramMetricFamily(self.family_name, self.help, labels=names)
        else:
            fam = InfoMetricFamily(self.family_name, self.help, labels=[])
        return cast(Family, fam)

    def one(self, value: float, labels: Sequence[str] = ()) -> Metric:
        """A family holding a single sample (the common case for gauges of a snapshot)."""
        fam = self.family()
        fam.add_metric(list(labels), float(value))
        return fam

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
    "Sidecar version, Python version and the DSML grader's implementation (value 1): "
    "dsml_kernel c is the compiled accelerator of the text passes (exporter/dsml/_textscan.c; "
    "the grammar is Python only), python its pure-Python twin, which runs when the sidecar was "
    "installed without a C compiler or DSV4_DSML_KERNEL=python (same results, slower on clean "
    "text: bench/RESULTS.md).",
    ("version", "python", "dsml_kernel"),
    "sidecar",
)
# One health family per source, node_exporter style (``node_scrape_collector_*{collector}``):
# every background source (nvml, sglang, footprint, probe, canary) reports through these four
# series under the one label name ``source``; no source has an ``*_up`` of its own.
SOURCE_LABELS = ("source",)
SOURCE_UP = _m(
    "dsv4_source_up",
    "gauge",
    "1 when the named source's last poll succeeded, 0 when it is down (see its errors).",
    SOURCE_LABELS,
    "sidecar",
)
SOURCE_ERRORS = _m(
    "dsv4_source_errors_total",
    "counter",
    # generated from the reasons each source declares (exporter/sources/reasons.py)
    source_reasons.help_text("Failed polls of the named source, by bounded reason"),
    (*SOURCE_LABELS, "reason"),
    "sidecar",
)
SOURCE_LAST_SUCCESS = _m(
    "dsv4_source_last_success_timestamp_seconds",
    "gauge",
    "Unix time of the named source's last successful poll (alert on time() - this); absent "
    "until the first success.",
    SOURCE_LABELS,
    "sidecar",
)
SOURCE_DURATION = _m(
    "dsv4_source_poll_duration_seconds",
    "gauge",
    "Duration of the named source's last poll, successful or not; absent before the first.",
    SOURCE_LABELS,
    "sidecar",
)
SOURCE_SAMPLES_DROPPED = _m(
    "dsv4_source_samples_dropped_total",
    "counter",
    "Samples the named source read but did not keep: a family of what it reads (SGLang's or vLLM's "
    "/metrics) passed its per-family cap (MAX_SAMPLES_PER_FAMILY, 1,024), which bounds what a "
    "hostile or misconfigured server can make the sidecar parse and export.",
    SOURCE_LABELS,
    "sidecar",
)
TASK_RESTARTS = _m(
    "dsv4_sidecar_task_restarts_total",
    "counter",
    "Background loops (source pollers, the canary) that raised and were restarted by the "
    'supervisor, by `task`; `task="event_loop"` counts exceptions no task retrieved (caught by '
    "the loop's exception handler, not restarted). Tracebacks are logged once per task and "
    "exception type.",
    ("task",),
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
    "dsv4_gpus_visible",
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
# --- engine ------------------------------------------------------------------------------
ENGINE_INFO = _m(
    "dsv4_engine_info",
    "info",
    "The serving engine beside the sidecar (value 1): engine sglang, vllm or unknown (auto, "
    "not yet discovered); source configured (DSV4_SIDECAR_ENGINE), discovered (SGLang's "
    "/server_info, or vLLM's /version with vllm: families on /metrics) or unknown; footprint: "
    "modelled (the KV footprint model prices this engine's pools) or `not modelled: vllm`.",
    ("engine", "source", "footprint"),
    "engine",
)

# --- vllm (area "engine": one budget for the engine seam and the engine's own figures) -----
# Re-exported only where the sidecar adds something (docs/vllm.md): the load and the KV figures
# the corruption-by-concurrency and memory boards put next to the grading and NVML's per-rank
# memory on the sidecar's own job. vLLM's preemptions and token counters are neither read nor
# re-exported: scrape vLLM's /metrics for them.
VLLM_INFO = _m(
    "dsv4_vllm_info",
    "info",
    "vLLM version (/version) and served model (/v1/models, first id) (value 1).",
    ("version", "model"),
    "engine",
)
VLLM_RUNNING = _m(
    "dsv4_vllm_running_requests",
    "gauge",
    "Running requests (vllm:num_requests_running, summed over engine cores).",
    (),
    "engine",
)
VLLM_KV_TOKENS = _m(
    "dsv4_vllm_kv_cache_capacity_tokens",
    "gauge",
    "Tokens vLLM's KV cache holds (vllm:cache_config_info kv_cache_size_tokens, else "
    "num_gpu_blocks x block_size): the figure vLLM sized, where SGLang's is priced by the "
    "footprint model.",
    (),
    "engine",
)
VLLM_CACHE_CONFIG = _m(
    "dsv4_vllm_cache_config_info",
    "info",
    "vLLM's KV cache configuration (vllm:cache_config_info, engine 0): block size, GPU blocks, "
    "cache dtype (value 1).",
    ("block_size", "num_gpu_blocks", "cache_dtype"),
    "engine",
)

# --- sglang --------------------------------------------------------------------------------
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
    "Running requests (sglang:num_running_reqs, summed over DP ranks), on the sidecar's own "
    "target for triage; dashboards read SGLang's own series (docs/sglang.md).",
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
SGLANG_MEM_FRACTION = _m(
    "dsv4_sglang_mem_fraction_static_ratio",
    "gauge",
    "mem_fraction_static SGLang runs with.",
    (),
    "sglang",
)
HICACHE_LOAD_BACKS = _m(
    "dsv4_sglang_hicache_load_backs_total",
    "counter",
    "Load-back operations (count of sglang:load_back_duration_seconds): triage infers HiCache "
    "on from them when it reaches only the sidecar; dashboards read SGLang's own series.",
    (),
    "hicache",
)
# SGLang's own memory accounting per rank (re-exported in bytes; SGLang's "GB" is GiB, its
# get_available_gpu_memory divides by 1 << 30). /metrics has the sglang:*_gb constants
# (weights, KV, graphs: 0.5.17+; startup_available_gpu_memory_gb: 0.5.12+), /server_info's
# internal_states[].memory_usage the same (weight, kvcache, graph: 0.5.12+; startup_available
# and graph per phase: 0.5.17+). Reported by each stage's TP rank 0 and applied to the
# stage's ranks (TP shards hold equal weights and pools).
SGLANG_WEIGHT_BYTES = _m(
    "dsv4_sglang_weight_memory_bytes",
    "gauge",
    "GPU memory the weights took at load, as SGLang measured it (sglang:weight_memory_usage_gb, "
    "else internal_states memory_usage.weight).",
    ("rank",),
    "sglang",
)
SGLANG_GRAPH_BYTES = _m(
    "dsv4_sglang_graph_memory_bytes",
    "gauge",
    "GPU memory captured CUDA graphs took, by phase, as SGLang measured it "
    '(sglang:graph_memory_usage_gb{phase}; before 0.5.17 one total, phase="all").',
    ("rank", "phase"),
    "sglang",
)
SGLANG_KV_REPORTED_BYTES = _m(
    "dsv4_sglang_kv_cache_memory_reported_bytes",
    "gauge",
    "KV cache memory as SGLang reports it (sglang:kv_cache_memory_usage_gb). Reads 0 for DSV4 "
    "pools (DeepSeekV4TokenToKVPool never sets mem_usage, 0.5.12-0.5.23): never used; the "
    "pools are measured by the probe or priced by the footprint model.",
    ("rank",),
    "sglang",
)
SGLANG_STARTUP_AVAILABLE_BYTES = _m(
    "dsv4_sglang_startup_available_memory_bytes",
    "gauge",
    "Free GPU memory SGLang measured when its scheduler started, after weights, KV pools and "
    "CUDA graphs (sglang:startup_available_gpu_memory_gb).",
    ("rank",),
    "sglang",
)
SGLANG_MEMORY_FIELD = _m(
    "dsv4_sglang_memory_field_present",
    "gauge",
    "1 when this SGLang reports the memory field (weight, kv_cache, graph, startup_available, "
    "swa_tokens, context_len), 0 when its release lacks it (the sidecar then degrades).",
    ("field",),
    "sglang",
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
KV_POOL_RECLAIMABLE = _m(
    "dsv4_kv_pool_reclaimable_bytes",
    "gauge",
    "Planned minus allocated KV bytes on this rank when the plan is larger (fp4 index-K priced "
    "as fp8 on NVIDIA): budget held back for KV that is never allocated. 0 otherwise.",
    ("rank",),
    "footprint",
)
# What PyTorch's caching allocator takes for this rank's KV pools (modelled by
# exporter/footprint/device_bytes.py over the pools' tensors): the measure "pytorch_allocated"
# is torch.cuda.memory_allocated's share (each tensor rounded to its block), "pytorch_reserved"
# the segments cudaMalloc'd for them, which is what NVML counts of the pools.
DEVICE_MEASURES = ("pytorch_allocated", "pytorch_reserved")
KV_POOL_DEVICE = _m(
    "dsv4_kv_pool_device_bytes",
    "gauge",
    "Bytes PyTorch's caching allocator takes for this rank's KV pools (modelled, not read): "
    "measure pytorch_allocated (memory_allocated: tensors rounded to their blocks) or "
    "pytorch_reserved (memory_reserved: the cudaMalloc'd segments NVML sees). Compare with the "
    "tensors' own bytes, sum of dsv4_kv_pool_allocated_bytes.",
    ("rank", "measure"),
    "footprint",
)
KV_POOL_DEVICE_OVERCOMMIT = _m(
    "dsv4_kv_pool_device_overcommit_bytes",
    "gauge",
    'PyTorch-reserved KV pool bytes (dsv4_kv_pool_device_bytes{measure="pytorch_reserved"}) '
    "minus planned bytes on this rank: the over-commit as NVML sees it, larger than "
    "dsv4_kv_pool_overcommit_bytes (tensor bytes) by the caching allocator's rounding.",
    ("rank",),
    "footprint",
)
FOOTPRINT_RULES_UNVERIFIED = _m(
    "dsv4_footprint_rules_unverified",
    "gauge",
    "1 when SGLang's version is newer than every release the footprint rules were checked "
    "against (computed with the newest rules, unverified); 0 when the rules are its own.",
    ("sglang_version", "rules"),
    "footprint",
)
FOOTPRINT_NOT_MODELLED = _m(
    "dsv4_footprint_not_modelled",
    "gauge",
    "Per known deployment switch whose footprint is not modelled: 1 when in use (then no pool "
    "numbers are exported), 0 otherwise.",
    ("switch",),
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
RANK_INFO = _m(
    "dsv4_rank_info",
    "info",
    "Where each rank this sidecar reports runs (value 1): `rank` is the deployment-wide rank "
    "(SGLang's torch.distributed rank, tp_size * pp_rank + tp_rank) that every per-GPU and "
    "per-rank series is labelled with; `node_rank` the node (SGLang's --node-rank, from the "
    "node_rank setting), `local_rank` the GPU position on that node, and the TP / PP ranks "
    "(docs/deploy.md, multi-node).",
    ("rank", "node_rank", "local_rank", "tp_rank", "pp_rank"),
    "footprint",
)
DEPLOYMENT_FACT = _m(
    "dsv4_deployment_fact_info",
    "info",
    "Every deployment fact the over-commit rests on, with where its value came from: "
    "configured (a setting, SGLang's env or server args), probe (measured in SGLang), inferred "
    "(from SGLang's memory figures and NVML) or assumed (nothing told; a default).",
    ("fact", "value", "source"),
    "footprint",
)
MEMORY_ACCOUNTED = _m(
    "dsv4_memory_accounted_bytes",
    "gauge",
    "NVML used memory per rank, split into what is known: weights and cuda_graphs (SGLang's "
    "measurement), kv_pools (probe-measured, else the footprint model).",
    ("rank", "part"),
    "footprint",
)
MEMORY_UNEXPLAINED = _m(
    "dsv4_memory_unexplained_bytes",
    "gauge",
    "NVML used minus weights, KV pools and CUDA graphs: CUDA context, NCCL buffers, "
    "activations, and any pool memory the model does not know.",
    ("rank",),
    "footprint",
)
INDEX_K_INFERENCE_MARGIN = _m(
    "dsv4_index_k_inference_margin_bytes",
    "gauge",
    "Index-K dtype inferred from memory reconciliation: the gap between the candidate dtypes' "
    "pool bytes. The inference holds while the rank's unexplained rest stays below it.",
    ("rank",),
    "footprint",
)
FOOTPRINT_STATUS = _m(
    "dsv4_footprint_up",
    "gauge",
    "1 when the footprint is computed; 0 with the reason (unknown_model, no_sglang, "
    "no_token_count, bad_config, unsupported_version, not_modelled) when it is not.",
    ("reason",),
    "footprint",
)

# --- probe ---------------------------------------------------------------------------------
# From the in-process probe's per-rank snapshot files (exporter/sources/probe_files.py). A
# down rank keeps only up/last_report/down_reason: its counters are dropped, not frozen.
PROBE_UP = _m(
    "dsv4_probe_up",
    "gauge",
    "1 while the rank's in-process probe rewrites its snapshot file; 0 when the file is stale, "
    "closed, unreadable or its writer is gone (see dsv4_probe_down_reason). Polled.",
    ("rank",),
    "probe",
)
PROBE_LAST_REPORT = _m(
    "dsv4_probe_last_report_timestamp_seconds",
    "gauge",
    "Wall-clock time of the rank's last valid probe snapshot (alert on time() - this).",
    ("rank",),
    "probe",
)
PROBE_DOWN = _m(
    "dsv4_probe_down_reason",
    "gauge",
    "1 for a down rank, with why: stale, clock_skew (written_at in the future by more than "
    "the staleness window), writer_exited, writer_dead, unreadable (also: not a regular "
    "file), malformed (also: numbers out of range, an odd probe_version), "
    "unsupported_version.",
    ("rank", "reason"),
    "probe",
)
PROBE_INFO = _m(
    "dsv4_probe_info",
    "info",
    "Per up rank: how transfer gaps are timed (device_events, host_bound, none), the probe "
    "version and whether sampled index-K verification is on.",
    ("rank", "gap_source", "probe_version", "verify"),
    "probe",
)
PROBE_HOOK = _m(
    "dsv4_probe_hook_installed",
    "gauge",
    "1 when the probe wrapped that SGLang method in the rank's process, 0 when this SGLang "
    "version lacks it (that measurement is off). index_k_*, kv_* and state_* hooks are the "
    "pool's accessors; load_start, layer_done, consumer, wait, counter_reset are "
    "LayerDoneCounter's; pool_sizes is the configurator's sizing call, pool_memory the pool's "
    "constructor (the measured pool memory).",
    ("rank", "hook"),
    "probe",
)
PROBE_ERRORS = _m(
    "dsv4_probe_errors_total",
    "counter",
    "Exceptions caught inside the probe (never raised into SGLang); a hook failing 100 times "
    "is switched off.",
    ("rank",),
    "probe",
)
HICACHE_LAYER_LOADS = _m(
    "dsv4_hicache_layer_loads_total",
    "counter",
    "HiCache host-to-device layer loads started (one per layer per load-back), from the probe.",
    ("rank",),
    "probe",
)
HICACHE_LAYER_LOADS_DONE = _m(
    "dsv4_hicache_layer_loads_completed_total",
    "counter",
    "HiCache layer loads seen completed (their load event fired), from the probe.",
    ("rank",),
    "probe",
)
HICACHE_INDEX_K_READS = _m(
    "dsv4_hicache_index_k_reads_total",
    "counter",
    "Reads of a c4 layer's index-K buffer while a HiCache load was bound to the forward pass; "
    'gated="false" means the reading stream had not waited for that layer\'s load event: the '
    "index-K race. Should stay 0.",
    ("rank", "gated"),
    "probe",
)
HICACHE_KV_READS = _m(
    "dsv4_hicache_kv_reads_total",
    "counter",
    "Same as dsv4_hicache_index_k_reads_total for the main KV accessors (SWA, compressed, "
    "unified KV) and the compress-state accessors, for comparison.",
    ("rank", "gated"),
    "probe",
)
HICACHE_GAP = _m(
    "dsv4_hicache_transfer_gap_seconds",
    "histogram",
    "For each ungated index-K read: how long the layer's load was still outstanding when the "
    "read ran (CUDA events; a host-side upper bound without them). le=0 holds reads whose "
    "layer had already landed.",
    ("rank",),
    "probe",
    GAP_BUCKETS_S,
)
HICACHE_CHECKS = _m(
    "dsv4_hicache_index_k_checksum_checks_total",
    "counter",
    "Sampled index-K reads checksummed against the layer as loaded (DSV4_PROBE_VERIFY > 0).",
    ("rank",),
    "probe",
)
HICACHE_MISMATCHES = _m(
    "dsv4_hicache_index_k_checksum_mismatches_total",
    "counter",
    "Sampled index-K reads whose data differed from the layer as loaded: the reader saw stale "
    "or half-loaded index-K (DSV4_PROBE_VERIFY > 0).",
    ("rank",),
    "probe",
)

# Start-up memory measured by the probe inside SGLang (snapshot "memory", format version 2):
# tensor bytes, never a formula, so they hold for any release or fork.
PROBE_POOL_BYTES = _m(
    "dsv4_probe_pool_bytes",
    "gauge",
    "Bytes of the rank's DeepSeekV4TokenToKVPool tensors per sub-pool, measured by the probe "
    "(numel x element size of every storage the pool holds, each counted once; the target "
    "model's pool plus, with speculative decoding, the draft worker's). pool=other: tensors "
    "under an attribute the probe does not name.",
    ("rank", "pool"),
    "probe",
)
PROBE_POOL_BUDGET = _m(
    "dsv4_probe_pool_budget_bytes",
    "gauge",
    "The byte budget SGLang's pool configurator was given on this rank (available_bytes of "
    "DSV4PoolConfigurator.calculate_pool_sizes), recorded by the probe.",
    ("rank",),
    "probe",
)
PROBE_OVERCOMMIT = _m(
    "dsv4_probe_overcommit_bytes",
    "gauge",
    "Measured over-commit: bytes the rank's pool tensors take minus the budget the "
    "configurator was given. Positive: taken from the reserve for activations and CUDA graphs.",
    ("rank",),
    "probe",
)
PROBE_BYTES_PER_TOKEN = _m(
    "dsv4_probe_configurator_bytes_per_full_token",
    "gauge",
    "The configurator's own bytes_per_full_token as it held it when sizing (probe).",
    ("rank",),
    "probe",
)
PROBE_INDEX_K = _m(
    "dsv4_probe_index_k_info",
    "info",
    "The c4 index-K cache as the rank's pool allocated it (probe): dtype read off the measured "
    "bytes per slot against the index head dim, layout fused (values+scales per row) or split.",
    ("rank", "dtype", "layout", "bytes_per_slot"),
    "probe",
)
MODEL_DRIFT = _m(
    "dsv4_footprint_model_drift_bytes",
    "gauge",
    "Footprint model minus measurement per rank and pool: the model's allocated bytes "
    "(dsv4_kv_pool_allocated_bytes) minus the probe's (dsv4_probe_pool_bytes). Non-zero: the "
    "model does not know this SGLang build (release rules, index-K dtype, a fork's pools).",
    ("rank", "pool"),
    "probe",
)

# --- dsml (grading of sampled outputs) -----------------------------------------------------
DSML_SAMPLES = _m(
    "dsv4_dsml_samples_total",
    "counter",
    "Graded model outputs by source (canary, tap, ingest), verdict and concurrency bucket "
    "(non-cumulative: each sample in the smallest le holding its concurrency). Degenerate "
    "series carry the last request id as an OpenMetrics exemplar.",
    ("source", "verdict", "concurrency_le"),
    "dsml",
)
DSML_REASONS = _m(
    "dsv4_dsml_reasons_total",
    "counter",
    "Reason codes found in graded outputs (see docs/dsml-grading.md), by source. Codes of "
    f"severity signal ({', '.join(sorted(SIGNALS))}) are counted and never change a verdict: "
    "clean answers have them too (issue 32); watch their rate, do not alert on one.",
    ("source", "reason"),
    "dsml",
)
DSML_LENGTH_SAMPLES = _m(
    "dsv4_dsml_length_samples_total",
    "counter",
    "Graded model outputs by source, verdict and output-length bucket (output tokens, "
    "non-cumulative like concurrency_le: 256, 1024, 4096, 16384, +Inf). Tokens from the "
    "response's usage, else streamed deltas, else estimated "
    "(dsv4_dsml_output_tokens_counted_total).",
    ("source", "verdict", "output_tokens_le"),
    "dsml",
)
DSML_OUTPUT_TOKENS = _m(
    "dsv4_dsml_output_tokens",
    "histogram",
    "Output tokens of graded samples (all sources) per concurrency bucket: length drift "
    "(p50 against the deployment's own baseline) and where corruption lives.",
    ("concurrency_le",),
    "dsml",
    buckets=(256, 1024, 4096, 16384),
)
DSML_FINISH_REASONS = _m(
    "dsv4_dsml_finish_reasons_total",
    "counter",
    "Graded samples by finish reason (stop incl. eos, length, tool_calls, other, unknown) and "
    "verdict: the finish-reason mix and what each ending graded as.",
    ("finish_reason", "verdict"),
    "dsml",
)
DSML_TOKENS_COUNTED = _m(
    "dsv4_dsml_output_tokens_counted_total",
    "counter",
    "How graded samples' output tokens were counted: usage (the response's "
    "usage.completion_tokens), stream (streamed deltas) or estimate (4 characters a token).",
    ("counted",),
    "dsml",
)
DSML_DROPPED = _m(
    "dsv4_dsml_samples_dropped_total",
    "counter",
    "Samples not graded because the grading queue was full, by count (grading_queue) or by the "
    "bytes the waiting samples hold (grading_queue_bytes); grading never slows responses.",
    ("source",),
    "dsml",
)
DSML_GRADING_ERRORS = _m(
    "dsv4_dsml_grading_errors_total",
    "counter",
    "Samples whose grading raised (counted, never propagated).",
    ("source",),
    "dsml",
)
DSML_DIALECT_INFO = _m(
    "dsv4_dsml_dialect_info",
    "info",
    "The DSML dialect samples are graded in (v3.2, v4, v4.1, or auto: each block's own "
    "spelling; under vLLM qualified with the release its /version reports, v4@vllm-0.30.0) "
    "and where it came from: configured (DSV4_SIDECAR_DSML_DIALECT), server_info "
    "(SGLang's tool_call_parser), model_config (config.json) or unknown. engine_rules: under "
    "vLLM the release rule set graded by and its source (release: in the table; inferred: "
    "a release the table lacks, graded by the nearest rules; unknown: /version not yet "
    "read, the newest rules); empty under SGLang.",
    ("dialect", "source", "engine_rules"),
    "dsml",
)
DSML_STORED = _m(
    "dsv4_dsml_stored_samples",
    "gauge",
    "Degenerate/suspect samples held in the bounded triage buffer.",
    (),
    "dsml",
)

# --- canary --------------------------------------------------------------------------------
CANARY_REQUESTS = _m(
    "dsv4_canary_requests_total",
    "counter",
    "Canary tool-call requests by result (success, http_error, timeout, error, too_large = "
    "answer over its cap, too_deep = answer JSON nested too deep).",
    ("result",),
    "canary",
)
CANARY_LATENCY = _m(
    "dsv4_canary_latency_seconds",
    "histogram",
    "End-to-end latency of canary requests that got an answer.",
    (),
    "canary",
    buckets=(0.25, 0.5, 1, 2, 5, 10, 20, 30, 60),
)

# --- tap -----------------------------------------------------------------------------------
# The pass-through tap (exporter/samplers/tap): label values are fixed sets defined in
# exporter/samplers/tap/stats.py and zero-initialised at start, so a dead path still shows.
TAP_REQUESTS = _m(
    "dsv4_tap_requests_total",
    "counter",
    "Requests the tap finished, by `code`: `1xx`..`5xx` = status class forwarded from SGLang "
    "(also when the body was later cut short); `400_bad_request` = malformed client request "
    "answered by the tap; `408_request_timeout` = request body stalled; `501_not_implemented` "
    "= a transfer coding besides chunked (why: dsv4_tap_rejected_total); "
    "`502_upstream_unreachable` = connecting to SGLang failed; "
    "`502_upstream_failed` = SGLang closed or broke the connection before a response head; "
    "`client_closed` = the client left before any response head.",
    ("code",),
    "tap",
)
TAP_ABORTED = _m(
    "dsv4_tap_aborted_total",
    "counter",
    "Requests that ended without a complete response, by `reason`: `upstream_reset` (SGLang "
    "closed mid-body; the client got the bytes so far, then a closed connection), "
    "`client_disconnect` (client left; the upstream request was cancelled at once) or "
    "`upstream_timeout` (no byte from SGLang for upstream_read_timeout: 504 before a head, "
    "else the response is cut) or `client_send_timeout` (the client read nothing of the "
    "response for client_send_timeout: cut, the upstream request cancelled).",
    ("reason",),
    "tap",
)
TAP_REJECTED = _m(
    "dsv4_tap_rejected_total",
    "counter",
    "Client requests the tap refused itself (answered 400/408/501/503, or cut when a response "
    "was already under way; the client connection is closed and any half-sent SGLang request "
    "dropped), by `reason`: `malformed_head`, `head_too_large`, `bad_version` (not HTTP/1.1 "
    "or 1.0), `bad_target` (a path nginx refuses: a bad %-escape, %00, dot segments above the "
    "root), `bad_host` (not exactly one valid Host), `bad_connection` (Connection names "
    "Content-Length, Transfer-Encoding, Host or Expect), `bad_transfer_encoding` (final "
    "coding not chunked, or chunked on HTTP/1.0), `unsupported_transfer_coding`, "
    "`bad_chunked_body` (body framing broke after the head was forwarded), `body_timeout`, "
    "`junk_after_request` (garbage pipelined after a request), `pipelined_after_chunked` (a "
    "request in the same read as the end of a chunked body), `too_many_connections` (over "
    "max_connections: 503), `too_many_client_connections` (over max_connections_per_client "
    "from one address: 503).",
    ("reason",),
    "tap",
)
TAP_INFLIGHT = _m(
    "dsv4_tap_inflight_requests",
    "gauge",
    "Requests inside the tap now (head received, response not finished); the value each "
    "sample records as its concurrency.",
    (),
    "tap",
)
TAP_ADDED_LATENCY = _m(
    "dsv4_tap_added_latency_seconds",
    "histogram",
    "Latency the tap adds per proxied request, measured in-process: (start of the client read "
    "completing the request head -> head written to SGLang, including any connect) + (start of "
    "the SGLang read completing the response head -> head written to the client). Excludes "
    "kernel and event-loop queueing before the tap's callbacks run and per-chunk forwarding "
    "(see docs/tap.md); responses the tap generates itself are not observed.",
    (),
    "tap",
    (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 1.0),
)
TAP_SAMPLED = _m(
    "dsv4_tap_sampled_total",
    "counter",
    "Responses selected by the sampler (deterministic request hash) and handed to the grading "
    "queue (or the standalone tap's consumer); selected responses that were not are in "
    "dsv4_tap_samples_dropped_total.",
    (),
    "tap",
)
TAP_SAMPLES_DROPPED = _m(
    "dsv4_tap_samples_dropped_total",
    "counter",
    "Selected responses not handed to grading, by `reason`: `queue_full` (consumer behind, or "
    "the grading queue full by count or bytes), `too_large` (request + response over the "
    "tap's max_sample_bytes), `capture_budget` (the budget shared by all in-flight captures, "
    "capture_budget_bytes, was spent: the request was still forwarded), `not_ok` (status "
    "other than 200) or `incomplete` (response cut short): only complete 200 answers are "
    "graded. The tap in its own process (`dsv4-sidecar tap`) also drops `queue_full` when its "
    "queue to the sidecar is full, `sidecar_unavailable` (the sidecar's ingest could not be "
    "reached, timed out or answered 5xx) and `sidecar_refused` (it answered 4xx: a wrong "
    "token, a body over ingest_max_bytes).",
    ("reason",),
    "tap",
)
TAP_UPSTREAM_DISCARDED = _m(
    "dsv4_tap_upstream_discarded_total",
    "counter",
    "SGLang connections closed instead of pooled because of what SGLang sent, by `reason`: "
    "`extra_bytes` (bytes after a complete response, a body after a HEAD response, or bytes "
    "while the connection was idle), `response_head_too_large` (a response head, 1xx heads "
    "included, over the tap's max_header_bytes: the client gets 502), `too_many_interim` "
    "(more 1xx responses to one request than the tap forwards: 502). They "
    "are dropped, never handed to the next client; a rising count means SGLang and the tap "
    "disagree on where a response ends.",
    ("reason",),
    "tap",
)
TAP_SAMPLING_ERRORS = _m(
    "dsv4_tap_sampling_errors_total",
    "counter",
    "Errors in the sampling side path, by `stage`: `capture` (building a sample) or `consumer` "
    "(the grading callback raised). Never affects a response.",
    ("stage",),
    "tap",
)
TAP_BUILD_INFO = _m(
    "dsv4_tap_build_info",
    "info",
    "How the tap forwards streamed answers (value 1): relay c is the compiled relay "
    "(exporter/samplers/tap/_relay.c) that forwards an unsampled chunked answer's bytes as they "
    "came, reading only their framing; python runs llhttp and Python on every chunk, which "
    "happens when the tap was installed without a C compiler or DSV4_TAP_RELAY=python (same "
    "answers, more CPU per chunk: bench/RESULTS.md). Sampled answers, and anything outside "
    "plain chunked framing, take the Python path either way.",
    ("relay",),
    "tap",
)
TAP_UPSTREAM_CONNECTIONS = _m(
    "dsv4_tap_upstream_connections_total",
    "counter",
    "Connections the tap opened to SGLang; growing much faster than requests means the "
    "keep-alive pool is not reused.",
    (),
    "tap",
)


# --- lookups for everything that queries these names (rules, panels, runbooks, triage, demo) ---
HISTOGRAM_SERIES_SUFFIXES = ("_bucket", "_sum", "_count")


def spec_for_series(series: str) -> MetricSpec:
    """The spec behind a scraped series name: the name itself, or a histogram's
    ``_bucket``/``_sum``/``_count`` series. Raises ``KeyError`` naming the fix, so a dashboard,
    rule or query that refers to a name the sidecar does not export fails when it is built."""
    spec = CATALOG.get(series)
    if spec is not None:
        return spec
    for suffix in HISTOGRAM_SERIES_SUFFIXES:
        stem = series.removesuffix(suffix)
        if stem != series and stem in CATALOG and CATALOG[stem].kind == "histogram":
            return CATALOG[stem]
    raise KeyError(
        f"{series!r} is not exported by the sidecar: declare it in exporter/metrics/catalog.py "
        "or fix the name"
    )
