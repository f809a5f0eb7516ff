"""Memory & over-commit: GPU memory per rank, KV pools planned vs allocated, reserve, forecast."""

from __future__ import annotations

from grafana_foundation_sdk.models import dashboard as dm

from dashboards.common import ALERTS, Board, sel, sglang_rate, sglang_sel, target, vllm_sel

A = ALERTS
# Panels only a sidecar beside vLLM fills (tests/obs: empty beside SGLang, filled beside vLLM).
VLLM_PANELS = ("vLLM KV cache usage", "vLLM KV capacity and waiting", "vLLM")
FORECAST = (
    f"predict_linear({sel('dsv4_gpu_memory_free_bytes', rank=True)}"
    f"[{A.gpu_fill_lookback}], {A.gpu_fill_horizon_seconds})"
)


def build() -> dm.Dashboard:
    b = Board(
        "memory-overcommit",
        "Per-rank GPU memory and the DeepSeek-V4 KV-pool over-commit: what SGLang's "
        "configurator planned against what the pools really allocate, and the reserve it eats.",
        rank_metric="dsv4_gpu_memory_total_bytes",
        sglang=True,
        vllm=True,
    )

    b.row("GPU memory (NVML, polled)")
    b.timeseries(
        "GPU memory used / total",
        "NVML used and total bytes per GPU (rank, gpu). Used includes SGLang's pre-allocated KV "
        "pools, weights, CUDA graphs and the PyTorch cache; reserved is the driver's share.",
        "bytes",
        [
            target(
                sel("dsv4_gpu_memory_used_bytes", rank=True), "used · rank {{rank}} gpu {{gpu}}"
            ),
            target(
                sel("dsv4_gpu_memory_total_bytes", rank=True), "total · rank {{rank}} gpu {{gpu}}"
            ),
            target(
                sel("dsv4_gpu_memory_reserved_bytes", rank=True),
                "reserved · rank {{rank}} gpu {{gpu}}",
            ),
        ],
        min_val=0,
    )
    b.timeseries(
        "GPU memory free",
        "NVML free bytes per GPU. Dashed lines: the DSV4GPUMemoryHeadroomLow warning and "
        "critical thresholds.",
        "bytes",
        [target(sel("dsv4_gpu_memory_free_bytes", rank=True), "rank {{rank}} gpu {{gpu}}")],
        steps=(
            (None, "red"),
            (A.gpu_free_critical_bytes, "orange"),
            (A.gpu_free_warning_bytes, "green"),
        ),
        min_val=0,
    )
    b.timeseries(
        "Headroom forecast",
        f"Free bytes now and the linear forecast {A.gpu_fill_horizon_seconds // 60}m ahead from "
        f"the last {A.gpu_fill_lookback} (the DSV4GPUMemoryFillingUp fit). A forecast below 0 "
        "on a mostly-full GPU fires that alert.",
        "bytes",
        [
            target(sel("dsv4_gpu_memory_free_bytes", rank=True), "free now · rank {{rank}}"),
            target(
                FORECAST,
                f"forecast +{A.gpu_fill_horizon_seconds // 60}m · rank {{{{rank}}}}",
            ),
        ],
        steps=((None, "red"), (0, "green")),
    )
    b.stat(
        "Least free GPU memory",
        "The smallest NVML free bytes among the selected GPUs (the first to OOM).",
        "bytes",
        [target(f"min({sel('dsv4_gpu_memory_free_bytes', rank=True)})", "min free", instant=True)],
        steps=(
            (None, "red"),
            (A.gpu_free_critical_bytes, "orange"),
            (A.gpu_free_warning_bytes, "green"),
        ),
    )
    b.stat(
        "GPUs visible",
        "GPUs NVML sees per sidecar; a drop fires DSV4GPUCountDropped.",
        "short",
        [target(sel("dsv4_gpus_visible"), "{{instance}}", instant=True)],
    )

    b.row("KV pools: plan vs allocation")
    b.bars(
        "Planned vs allocated by pool",
        "Per pool, the bytes SGLang's configurator priced (planned) and the bytes the device "
        "pool allocates, for the largest selected rank. bf16 index-K under the legacy "
        "configurator shows as c4_index_k allocated ~2x planned.",
        "bytes",
        [
            target(
                f"max by (pool) ({sel('dsv4_kv_pool_planned_bytes', rank=True)})",
                "{{pool}} planned",
                instant=True,
            ),
            target(
                f"max by (pool) ({sel('dsv4_kv_pool_allocated_bytes', rank=True)})",
                "{{pool}} allocated",
                instant=True,
            ),
        ],
        h=10,
    )
    b.timeseries(
        "Unplanned bytes by pool",
        "Allocated minus planned per pool (largest selected rank): where the over-commit comes "
        "from. Page padding leaves a small positive remainder in swa_kv, c4_kv and c128_kv.",
        "bytes",
        [
            target(
                "max by (pool) (\n  "
                + sel("dsv4_kv_pool_allocated_bytes", rank=True)
                + "\n  - "
                + sel("dsv4_kv_pool_planned_bytes", rank=True)
                + "\n)",
                "{{pool}}",
            )
        ],
        h=10,
    )
    b.timeseries(
        "Over-commit vs reserve",
        "Per rank: bytes the pools allocate beyond the plan, and the (1 - mem_fraction_static) "
        "reserve they come out of. Dashed: the DSV4KVPoolOvercommit warning threshold; "
        "over-commit above the reserve is critical.",
        "bytes",
        [
            target(sel("dsv4_kv_pool_overcommit_bytes", rank=True), "over-commit · rank {{rank}}"),
            target(sel("dsv4_memory_reserve_bytes", rank=True), "reserve · rank {{rank}}"),
        ],
        steps=((None, "green"), (A.kv_overcommit_warning_bytes, "orange")),
        min_val=0,
    )
    b.stat(
        "Over-commit share of reserve",
        "The largest over-commit / reserve ratio among the selected ranks: at 100% activations "
        "and CUDA graphs no longer fit (DSV4KVPoolOvercommit critical).",
        "percentunit",
        [
            target(
                f"max(\n  {sel('dsv4_kv_pool_overcommit_bytes', rank=True)}\n  /\n  "
                f"{sel('dsv4_memory_reserve_bytes', rank=True)}\n)",
                "over-commit / reserve",
                instant=True,
            )
        ],
        steps=(
            (None, "green"),
            (0.5, "orange"),
            (A.kv_overcommit_critical_reserve_ratio, "red"),
        ),
    )
    b.stat(
        "Bytes per full token",
        "The configurator's coefficient: what the legacy formula prices per full-pool token "
        "and what the fixed (dtype-aware) formula prices. They differ only for non-fp8 index-K.",
        "bytes",
        [target(sel("dsv4_kv_bytes_per_full_token"), "{{pricing}}", instant=True)],
    )
    b.timeseries(
        "Pool tokens",
        "Token capacity per pool (largest selected rank); full-pool tokens equal SGLang's "
        "max_total_num_tokens.",
        "short",
        [
            target(f"max by (pool) ({sel('dsv4_kv_pool_tokens', rank=True)})", "{{pool}}"),
            target(sel("dsv4_sglang_max_total_num_tokens"), "max_total_num_tokens · {{instance}}"),
        ],
    )
    b.timeseries(
        "Running requests",
        "Requests the engine is running: SGLang's own /metrics (sglang:num_running_reqs, "
        "summed over DP ranks), or beside vLLM the sidecar's dsv4_vllm_running_requests: "
        "memory pressure beyond the pools grows with them (lower --max-running-requests, "
        "vLLM --max-num-seqs, to buy headroom).",
        "short",
        [
            target(
                f"sum by (instance) ({sglang_sel('num_running_reqs')}) or "
                f"{sel('dsv4_vllm_running_requests')}",
                "{{instance}}",
            )
        ],
        min_val=0,
    )
    b.timeseries(
        "Reclaimable KV budget (under-commit)",
        "Per rank: bytes the configurator planned that the pools never allocate (fp4 index-K "
        "priced as fp8 on NVIDIA, every upstream release). Not a danger, lost capacity: "
        "priced by its real dtype the same budget holds dsv4_kv_correct_full_tokens tokens. "
        "Rules unverified for this SGLang version: dsv4_footprint_rules_unverified.",
        "bytes",
        [
            target(
                sel("dsv4_kv_pool_reclaimable_bytes", rank=True),
                "reclaimable · rank {{rank}}",
            ),
        ],
        min_val=0,
        w=24,
    )

    b.row("Memory reconciliation per rank")
    b.timeseries(
        "Measured vs predicted vs NVML per rank",
        "Per rank: NVML used, and what explains it: SGLang's weights and CUDA graphs (its own "
        "gauges), the KV pools as the probe measured them and as the footprint model predicts "
        "them, and the rest nothing explains (CUDA context, NCCL, activations, or pool bytes "
        "the model does not know: a bf16 fork priced as fp8 shows ~4 GiB here).",
        "bytes",
        [
            target(sel("dsv4_gpu_memory_used_bytes", rank=True), "NVML used · rank {{rank}}"),
            target(
                f"sum by (instance, rank) ({sel('dsv4_probe_pool_bytes', rank=True)})",
                "KV measured (probe) · rank {{rank}}",
            ),
            target(
                f"sum by (instance, rank) ({sel('dsv4_kv_pool_allocated_bytes', rank=True)})",
                "KV predicted (model) · rank {{rank}}",
            ),
            target(sel("dsv4_sglang_weight_memory_bytes", rank=True), "weights · rank {{rank}}"),
            target(
                f"sum by (instance, rank) ({sel('dsv4_sglang_graph_memory_bytes', rank=True)})",
                "CUDA graphs · rank {{rank}}",
            ),
            target(sel("dsv4_memory_unexplained_bytes", rank=True), "unexplained · rank {{rank}}"),
        ],
        h=10,
    )
    b.timeseries(
        "Over-commit: measured vs predicted",
        "Per rank: pool bytes beyond the configurator's budget as the probe measured them and "
        "as the footprint model prices them. Apart means a wrong or assumed fact "
        "(DSV4FootprintModelDrift, DSV4OvercommitOnAssumption).",
        "bytes",
        [
            target(sel("dsv4_probe_overcommit_bytes", rank=True), "measured · rank {{rank}}"),
            target(sel("dsv4_kv_pool_overcommit_bytes", rank=True), "predicted · rank {{rank}}"),
        ],
        h=10,
    )
    b.table(
        "Deployment facts and their sources",
        "Every fact the over-commit rests on and where its value came from: configured, probe "
        "(measured in SGLang), inferred (SGLang's memory figures with NVML) or assumed "
        "(DSV4OvercommitOnAssumption fires for index_k_dtype and pricing).",
        [target(sel("dsv4_deployment_fact_info"), instant=True, fmt="table")],
        hidden_columns=("Time", "__name__", "Value", "job"),
    )
    b.table(
        "SGLang memory figures",
        "What this SGLang release reports (0 = field missing: older releases degrade), the "
        "free memory at its start-up, the KV figure it reports (0 for DSV4 pools: never used) "
        "and NVML used split into weights, KV pools and CUDA graphs.",
        [
            target(sel("dsv4_sglang_memory_field_present"), "{{field}}", instant=True, fmt="table"),
            target(
                sel("dsv4_sglang_startup_available_memory_bytes", rank=True),
                instant=True,
                fmt="table",
            ),
            target(
                sel("dsv4_sglang_kv_cache_memory_reported_bytes", rank=True),
                instant=True,
                fmt="table",
            ),
            target(sel("dsv4_memory_accounted_bytes", rank=True), instant=True, fmt="table"),
        ],
        hidden_columns=("Time", "job"),
    )

    b.row("Deployment")
    b.table(
        "Deployment",
        "What the sidecar detected: index-K dtype, configurator (legacy/fixed), HiCache and "
        "model. bf16 + HiCache, or legacy + non-fp8, fires DSV4RiskyConfiguration.",
        [target(sel("dsv4_deployment_info"), instant=True, fmt="table")],
        hidden_columns=("Time", "__name__", "Value"),
        w=24,
        h=5,
    )
    b.table(
        "Footprint rules",
        "Which SGLang release's pool rules price this deployment; Value 1 in the first table "
        "means the version is newer than every release they were checked against "
        "(unverified). Any switch listed below is not modelled: no pool numbers are exported.",
        [
            target(sel("dsv4_footprint_rules_unverified"), instant=True, fmt="table"),
            target(sel("dsv4_footprint_not_modelled"), instant=True, fmt="table"),
        ],
        hidden_columns=("Time", "__name__"),
        w=24,
        h=5,
    )
    b.table(
        "SGLang",
        "SGLang version and served model, from /server_info.",
        [target(sel("dsv4_sglang_info"), instant=True, fmt="table")],
        hidden_columns=("Time", "__name__", "Value"),
    )
    b.table(
        "GPUs",
        "GPU inventory from NVML: name, PCI bus id, driver version per rank.",
        [target(sel("dsv4_gpu_info", rank=True), instant=True, fmt="table")],
        hidden_columns=("Time", "__name__", "Value"),
    )

    b.row("Engine: vLLM's KV cache beside a vLLM server (the footprint is not modelled there)")
    b.timeseries(
        "vLLM KV cache usage",
        "Beside vLLM, the share of its KV cache in use, from vLLM's own /metrics ($vllm_job: "
        "vllm:kv_cache_usage_perc per engine core, labels intact), next to NVML's memory "
        "above. Empty beside SGLang, whose pools the footprint rows price.",
        "percentunit",
        [target(vllm_sel("kv_cache_usage_perc"), "{{instance}} {{engine}}")],
        min_val=0,
        max_val=1,
    )
    b.timeseries(
        "vLLM KV capacity and waiting",
        "The tokens vLLM's KV cache holds, which the sidecar derives (cache_config_info "
        "kv_cache_size_tokens, else num_gpu_blocks x block_size), and the requests waiting "
        "for it (vllm:num_requests_waiting from $vllm_job). On a panel of their own: a 0-1 "
        "usage beside ~10^5 tokens would read as zero.",
        "short",
        [
            target(sel("dsv4_vllm_kv_cache_capacity_tokens"), "capacity tokens · {{instance}}"),
            target(vllm_sel("num_requests_waiting"), "waiting · {{instance}} {{engine}}"),
        ],
        min_val=0,
    )
    b.table(
        "Engine",
        "Which engine the sidecar sits beside, how it knows (configured or discovered) and "
        "whether its KV footprint is modelled (dsv4_engine_info).",
        [target(sel("dsv4_engine_info"), instant=True, fmt="table")],
        hidden_columns=("Time", "__name__", "Value"),
    )
    b.table(
        "vLLM",
        "Beside vLLM: its release and served model (/version, /v1/models) and its cache "
        "configuration (block size, GPU blocks, cache dtype: vllm:cache_config_info).",
        [
            target(sel("dsv4_vllm_info"), instant=True, fmt="table"),
            target(sel("dsv4_vllm_cache_config_info"), instant=True, fmt="table"),
        ],
        hidden_columns=("Time", "__name__", "Value"),
    )

    b.row("Pool and engine detail")
    b.timeseries(
        "Reserve left after the over-commit",
        "Intended reserve minus over-commit per rank; below 0 the pools ate the whole reserve.",
        "bytes",
        [
            target(
                sel("dsv4_memory_reserve_remaining_bytes", rank=True),
                "rank {{rank}} · {{instance}}",
            )
        ],
        steps=((None, "red"), (0, "green")),
    )
    b.timeseries(
        "Full tokens: deployed vs priced by real dtype",
        "SGLang's max_total_num_tokens against the tokens the same budget gives when every pool "
        "is priced by its real dtype.",
        "short",
        [
            target(sel("dsv4_sglang_max_total_num_tokens"), "deployed · {{instance}}"),
            target(
                sel("dsv4_kv_correct_full_tokens", rank=True),
                "correct rank {{rank}} · {{instance}}",
            ),
        ],
        min_val=0,
    )
    b.timeseries(
        "KV token usage and queue",
        "SGLang's own sglang:token_usage (0-1) per TP rank, against the mem_fraction_static "
        "it runs with: a full pool queues.",
        "percentunit",
        [
            target(
                f"max by (instance, tp_rank) ({sglang_sel('token_usage')})",
                "usage · {{instance}} · tp {{tp_rank}}",
            ),
            target(
                sel("dsv4_sglang_mem_fraction_static_ratio"), "mem_fraction_static · {{instance}}"
            ),
        ],
        min_val=0,
        max_val=1,
    )
    b.timeseries(
        "Queued requests",
        "Requests waiting in SGLang's queue, from SGLang's own /metrics (sglang:num_queue_reqs, "
        "summed over DP ranks).",
        "short",
        [target(f"sum by (instance) ({sglang_sel('num_queue_reqs')})", "{{instance}}")],
        min_val=0,
    )
    b.timeseries(
        "Time to first token",
        "SGLang's own TTFT histogram (sglang:time_to_first_token_seconds): p50 and p99 per "
        "engine. Rising with the over-commit and the queue: the reserve is gone.",
        "s",
        [
            target(
                f"histogram_quantile({q}, sum by (instance, le) "
                f"({sglang_rate('time_to_first_token_seconds_bucket')}))",
                f"p{int(q * 100)} · {{{{instance}}}}",
            )
            for q in (0.5, 0.99)
        ],
        min_val=0,
    )
    b.timeseries(
        "GPU memory per process",
        "Per-pid GPU memory (opt-in setting: empty unless per-process collection is on).",
        "bytes",
        [target(sel("dsv4_gpu_process_memory_used_bytes", rank=True), "rank {{rank}} pid {{pid}}")],
        min_val=0,
    )
    return b.build()
