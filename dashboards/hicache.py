"""HiCache transfer gap: gated vs ungated index-K reads, the load-to-read gap, loads, probe
health."""

from __future__ import annotations

from grafana_foundation_sdk.models import dashboard as dm

from dashboards.common import (
    ALERTS,
    Board,
    increase,
    increase_range,
    rate,
    sel,
    sglang_rate,
    sglang_sel,
    target,
    up_down_mappings,
)

A = ALERTS
READS = "dsv4_hicache_index_k_reads_total"
UNGATED = 'gated="false"'
MISMATCHES = "dsv4_hicache_index_k_checksum_mismatches_total"


def build() -> dm.Dashboard:
    b = Board(
        "hicache-transfer-gap",
        "The HiCache index-K transfer race, as the in-process probe sees it: index-K reads that "
        "were (not) ordered after their layer's host-to-device load, and the gap between them.",
        rank_metric="dsv4_probe_up",
        sglang=True,
    )

    b.row("Index-K reads")
    b.timeseries(
        "Index-K reads, gated vs ungated",
        "Reads of the c4 index-K buffer per second, by rank and whether they waited on the "
        "layer's load event (gated). Any ungated read means the transfer race is live.",
        "ops",
        [
            target(
                f"sum by (rank, gated) ({rate(READS, rank=True)})",
                "rank {{rank}} · gated={{gated}}",
            )
        ],
    )
    b.stat(
        "Ungated reads (time range)",
        "Index-K reads not ordered after the layer load over the time range, all selected "
        "ranks. Any fires DSV4IndexKUngatedReads.",
        "short",
        [target(f"sum({increase_range(READS, UNGATED, rank=True)})", "ungated", instant=True)],
        steps=((None, "green"), (1, "red")),
    )
    b.stat(
        "Checksum mismatches (time range)",
        "Sampled index-K reads whose data differed from the layer as loaded (probe "
        "verification on): the reader saw stale or half-loaded index-K, not just risked it.",
        "short",
        [
            target(
                f"sum({increase_range(MISMATCHES, rank=True)})",
                "mismatches",
                instant=True,
            )
        ],
        steps=((None, "green"), (1, "red")),
    )
    b.timeseries(
        "Ungated share of index-K reads",
        "Ungated / all index-K reads per rank.",
        "percentunit",
        [
            target(
                f"sum by (rank) ({rate(READS, UNGATED, rank=True)})\n/\n"
                f"sum by (rank) ({rate(READS, rank=True)})",
                "rank {{rank}}",
            )
        ],
        steps=((None, "green"), (0.000001, "red")),
        min_val=0,
    )
    b.timeseries(
        "Checksum mismatches",
        "Index-K checksum mismatches per second by rank.",
        "ops",
        [
            target(
                "sum by (rank) (" + rate(MISMATCHES, rank=True) + ")",
                "rank {{rank}}",
            )
        ],
    )

    b.row("Transfer gap")
    b.heatmap(
        "Load-to-read gap",
        "For each ungated index-K read, how long its layer's host-to-device load was still "
        "outstanding when the read ran (the probe's histogram; le=0 holds reads whose layer "
        "had already landed). Mass above 0 is the race corrupting reads.",
        "s",
        [
            target(
                "sum by (le) ("
                + increase("dsv4_hicache_transfer_gap_seconds_bucket", rank=True)
                + ")",
                "{{le}}",
                fmt="heatmap",
            )
        ],
    )
    b.timeseries(
        "Load-to-read gap quantiles",
        "p50 and p99 of how long the load was still outstanding at ungated index-K reads.",
        "s",
        [
            target(
                f"histogram_quantile({q}, sum by (le) "
                f"({rate('dsv4_hicache_transfer_gap_seconds_bucket', rank=True)}))",
                f"p{int(q * 100)}",
            )
            for q in (0.5, 0.99)
        ],
    )
    b.timeseries(
        "Layer loads",
        "HiCache host-to-device layer loads per second by rank.",
        "ops",
        [
            target(
                f"sum by (rank) ({rate('dsv4_hicache_layer_loads_total', rank=True)})",
                "rank {{rank}}",
            )
        ],
    )
    b.timeseries(
        "HiCache host pool usage",
        "Host (CPU) cache tokens used / total, from SGLang's own /metrics "
        "(sglang:hicache_host_used_tokens / hicache_host_total_tokens, per TP rank).",
        "percentunit",
        [
            target(
                f"max by (instance, tp_rank) ({sglang_sel('hicache_host_used_tokens')})\n/\n"
                f"max by (instance, tp_rank) ({sglang_sel('hicache_host_total_tokens')})",
                "{{instance}} · tp {{tp_rank}}",
            )
        ],
        min_val=0,
        max_val=1,
    )

    b.row("Probe health")
    b.states(
        "Probe up",
        "Whether each rank's in-process probe reports (DSV4ProbeStale fires when down).",
        [target(sel("dsv4_probe_up", rank=True), "rank {{rank}} · {{instance}}")],
        mappings=up_down_mappings(),
        steps=((None, "red"), (1, "green")),
    )
    b.timeseries(
        "Since last probe report",
        f"Age of each rank's last probe report; DSV4ProbeStale fires past "
        f"{A.probe_stale_seconds}s.",
        "s",
        [
            target(
                f"time() - {sel('dsv4_probe_last_report_timestamp_seconds', rank=True)}",
                "rank {{rank}} · {{instance}}",
            )
        ],
        steps=((None, "green"), (A.probe_stale_seconds, "red")),
        min_val=0,
    )
    b.timeseries(
        "Down probes by reason",
        "Ranks whose probe is down, by reason (stale, writer_exited, writer_dead, unreadable, "
        "malformed, unsupported_version); 0 while every probe reports.",
        "short",
        [
            target(
                "sum by (instance, reason) ("
                + sel("dsv4_probe_down_reason", rank=True)
                + ")\nor\nvector(0)",
                "{{reason}} · {{instance}}",
            )
        ],
        min_val=0,
    )
    b.timeseries(
        "Probe errors",
        "Exceptions caught inside the probe per second (never raised into SGLang; a hook failing "
        "100 times is switched off).",
        "ops",
        [
            target(
                f"sum by (instance, rank) ({rate('dsv4_probe_errors_total', rank=True)})",
                "rank {{rank}} · {{instance}}",
            )
        ],
        min_val=0,
    )
    b.table(
        "Probe hooks",
        "Which SGLang methods the probe wrapped on each rank (0: this SGLang version lacks it, "
        "that measurement is off).",
        [target(sel("dsv4_probe_hook_installed", rank=True), instant=True, fmt="table")],
        hidden_columns=("Time", "__name__"),
    )
    b.table(
        "Probe build",
        "Per up rank: how gaps are timed (device_events, host_bound, none), probe version, "
        "sampled index-K verification.",
        [target(sel("dsv4_probe_info", rank=True), instant=True, fmt="table")],
        hidden_columns=("Time", "__name__", "Value"),
    )

    b.row("HiCache load-back detail")
    b.timeseries(
        "Layer loads started vs completed",
        "Per-layer host-to-device loads the probe saw start and complete; a lasting gap means "
        "loads whose event never fired.",
        "ops",
        [
            target(
                f"sum by (instance) ({rate('dsv4_hicache_layer_loads_total', rank=True)})",
                "started · {{instance}}",
            ),
            target(
                "sum by (instance) ("
                + rate("dsv4_hicache_layer_loads_completed_total", rank=True)
                + ")",
                "completed · {{instance}}",
            ),
        ],
        min_val=0,
    )
    b.timeseries(
        "Main KV reads during loads",
        "Reads of the main KV accessors while a HiCache load was bound, by gated: the baseline "
        "the index-K reads compare against.",
        "ops",
        [
            target(
                f"sum by (instance, gated) ({rate('dsv4_hicache_kv_reads_total', rank=True)})",
                "gated={{gated}} · {{instance}}",
            )
        ],
        min_val=0,
    )
    b.timeseries(
        "Load-back tokens by pool",
        "Tokens SGLang loaded back from host to device per second, from SGLang's own /metrics "
        "(sglang:load_back_tokens_total).",
        "short",
        [
            target(
                f"sum by (instance, pool) ({sglang_rate('load_back_tokens_total')})",
                "{{pool}} · {{instance}}",
            )
        ],
        min_val=0,
    )
    b.timeseries(
        "Mean load-back duration",
        "Seconds per load-back operation, from SGLang's own histogram "
        "(sglang:load_back_duration_seconds sum over count, per rate window).",
        "s",
        [
            target(
                f"sum by (instance) ({sglang_rate('load_back_duration_seconds_sum')})\n/\n"
                f"sum by (instance) ({sglang_rate('load_back_duration_seconds_count')})",
                "{{instance}}",
            )
        ],
        min_val=0,
    )
    return b.build()
