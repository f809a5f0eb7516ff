"""Overview: DSV4 alert states, sidecar and source health, the headline signal of each detail
dashboard with a link to it."""

from __future__ import annotations

from grafana_foundation_sdk.models import dashboard as dm

from dashboards.common import (
    ALERTS,
    Board,
    increase_range,
    link,
    rate,
    sel,
    target,
    up_down_mappings,
)

A = ALERTS
# ALERTS carries the labels of the alerting series; DSV4SidecarAbsent has no instance, so only
# the job is matched here.
DSV4_ALERTS = 'ALERTS{alertname=~"DSV4.+", job=~"$job"}'
FIRING = 'ALERTS{alertname=~"DSV4.+", alertstate="firing", job=~"$job"}'
PENDING = 'ALERTS{alertname=~"DSV4.+", alertstate="pending", job=~"$job"}'


def build() -> dm.Dashboard:
    b = Board(
        "overview",
        "Start here: which DSV4 alerts are pending or firing, whether the sidecars and their "
        "sources are healthy, and the headline of each detail dashboard.",
        rank_metric="dsv4_kv_pool_overcommit_bytes",
    )
    # Explicit links to the three detail dashboards (the tag dropdown lists them too).
    for slug in ("memory-overcommit", "tool-call-corruption", "hicache-transfer-gap"):
        b.link(link(slug))

    b.row("Alerts")
    b.stat(
        "Firing DSV4 alerts",
        "Number of DSV4 alerts firing now for the selected jobs (pending ones excluded).",
        "short",
        [target(f"count({FIRING}) or vector(0)", "firing", instant=True)],
        steps=((None, "green"), (1, "red")),
        w=4,
        h=8,
    )
    b.table(
        "Active DSV4 alerts",
        "Every pending or firing DSV4 alert with its labels; the alert name links to its runbook.",
        [
            target(
                f"max by (alertname, alertstate, severity, instance, rank, source, risk) "
                f"({DSV4_ALERTS})",
                instant=True,
                fmt="table",
            )
        ],
        hidden_columns=("Time", "Value"),
        links=(("alertname", A.runbook_base_url + "/${__data.fields.alertname}.md"),),
        w=20,
        h=8,
    )
    b.states(
        "DSV4 alert history",
        "Alert states over time (pending orange, firing red), one row per alert and severity.",
        [
            target(
                f"max by (alertname, severity) (\n  {PENDING}\n  or\n  ({FIRING} + 1)\n)",
                "{{alertname}} · {{severity}}",
            )
        ],
        mappings=[
            dm.ValueMap(
                options={
                    "1": dm.ValueMappingResult(text="pending", color="orange", index=0),
                    "2": dm.ValueMappingResult(text="firing", color="red", index=1),
                }
            )
        ],
        steps=((None, "orange"), (2, "red")),
        w=24,
    )

    b.row("Sidecar health")
    b.states(
        "Sidecar targets",
        "Prometheus' scrape health of each sidecar (DSV4SidecarDown / DSV4SidecarAbsent).",
        [target('up{job=~"$job", instance=~"$instance"}', "{{instance}}")],
        mappings=up_down_mappings(),
        steps=((None, "red"), (1, "green")),
    )
    b.states(
        "Sources",
        "Each source the sidecar polls (nvml, sglang, footprint, probe, canary): 1 when its last "
        "poll succeeded.",
        [target(sel("dsv4_source_up"), "{{instance}} · {{source}}")],
        mappings=up_down_mappings(),
        steps=((None, "red"), (1, "green")),
    )
    b.timeseries(
        "Source staleness",
        "Age of each source's last successful poll; DSV4NVMLDown / DSV4EngineDown "
        f"fire past {A.source_stale_seconds}s.",
        "s",
        [
            target(
                f"time() - {sel('dsv4_source_last_success_timestamp_seconds')}",
                "{{source}} · {{instance}}",
            ),
        ],
        steps=((None, "green"), (A.source_stale_seconds, "red")),
        min_val=0,
    )
    b.timeseries(
        "Source errors",
        "Poll failures per second by source and reason, and samples dropped past a family's cap.",
        "ops",
        [
            target(
                f"sum by (instance, source, reason) (rate({sel('dsv4_source_errors_total')}"
                "[$__rate_interval]))",
                "{{source}} {{reason}} · {{instance}}",
            ),
            target(
                f"sum by (instance, source) (rate({sel('dsv4_source_samples_dropped_total')}"
                "[$__rate_interval]))",
                "{{source}} samples over the family cap · {{instance}}",
            ),
        ],
    )
    b.timeseries(
        "Source poll duration",
        "How long each source's last poll took (polling runs off the scrape path).",
        "s",
        [target(sel("dsv4_source_poll_duration_seconds"), "{{source}} · {{instance}}")],
        min_val=0,
    )
    b.timeseries(
        "Background task restarts",
        "A source loop (or the event loop's handler) raised and the supervisor restarted it: "
        "the source shows reason internal_error meanwhile. Any restart is a sidecar bug.",
        "short",
        [
            target(
                f"sum by (instance, task) (increase({sel('dsv4_sidecar_task_restarts_total')}"
                "[$__rate_interval]))",
                "{{task}} · {{instance}}",
            ),
        ],
        min_val=0,
    )
    b.table(
        "Versions",
        "Sidecar build, Python version and DSML grader build (dsml_kernel: c compiled text "
        "checks and grammar, python fallback) per instance.",
        [target(sel("dsv4_sidecar_build_info"), instant=True, fmt="table")],
        hidden_columns=("Time", "__name__", "Value"),
    )
    b.table(
        "Tap build",
        "How each tap forwards streamed answers (relay: c compiled relay of unsampled chunked "
        "answers, python llhttp and Python on every chunk: more CPU per chunk).",
        [target(sel("dsv4_tap_build_info"), instant=True, fmt="table")],
        hidden_columns=("Time", "__name__", "Value"),
    )

    b.row("Headlines")
    b.stat(
        "Largest KV over-commit",
        "Largest bytes allocated beyond the plan on any selected rank. Opens Memory & over-commit.",
        "bytes",
        [
            target(
                f"max({sel('dsv4_kv_pool_overcommit_bytes', rank=True)})",
                "over-commit",
                instant=True,
            )
        ],
        steps=((None, "green"), (A.kv_overcommit_warning_bytes, "orange")),
        links=[link("memory-overcommit", "Memory & over-commit")],
    )
    b.stat(
        "Least free GPU memory",
        "Smallest NVML free bytes on any selected GPU. Opens Memory & over-commit.",
        "bytes",
        [target(f"min({sel('dsv4_gpu_memory_free_bytes', rank=True)})", "min free", instant=True)],
        steps=(
            (None, "red"),
            (A.gpu_free_critical_bytes, "orange"),
            (A.gpu_free_warning_bytes, "green"),
        ),
        links=[link("memory-overcommit", "Memory & over-commit")],
    )
    b.stat(
        "Degenerate ratio (time range)",
        "Degenerate share of all graded samples over the time range, all sources. Opens "
        "Tool-call corruption.",
        "percentunit",
        [
            target(
                "sum("
                + increase_range("dsv4_dsml_samples_total", 'verdict="degenerate"')
                + ")\n/\nsum("
                + increase_range("dsv4_dsml_samples_total")
                + ")",
                "degenerate",
                instant=True,
            )
        ],
        steps=(
            (None, "green"),
            (A.corruption_warning_ratio, "orange"),
            (A.corruption_critical_ratio, "red"),
        ),
        links=[link("tool-call-corruption", "Tool-call corruption")],
    )
    b.stat(
        "Ungated index-K reads (time range)",
        "Index-K reads not gated by the HiCache layer load over the time range. Opens HiCache "
        "transfer gap.",
        "short",
        [
            target(
                "sum("
                + increase_range("dsv4_hicache_index_k_reads_total", 'gated="false"', rank=True)
                + ")",
                "ungated",
                instant=True,
            )
        ],
        steps=((None, "green"), (1, "red")),
        links=[link("hicache-transfer-gap", "HiCache transfer gap")],
    )

    b.row("Pipeline internals")
    b.states(
        "Footprint computed",
        "1 when the footprint is computed; 0 with the reason (unknown_model, no_sglang, "
        "bad_config, budget) when it is not.",
        [target(sel("dsv4_footprint_up"), "{{instance}} · {{reason}}")],
        mappings=up_down_mappings(),
        steps=((None, "red"), (1, "green")),
    )
    b.timeseries(
        "Samples lost before grading",
        "Per second: grading queue full, grader raised, tap selections dropped (queue_full, "
        "too_large). Any of these makes the degenerate ratio a sample of fewer outputs.",
        "ops",
        [
            target(
                f"sum by (instance, source) ({rate('dsv4_dsml_samples_dropped_total')})",
                "dropped {{source}} · {{instance}}",
            ),
            target(
                f"sum by (instance, source) ({rate('dsv4_dsml_grading_errors_total')})",
                "grading error {{source}} · {{instance}}",
            ),
            target(
                f"sum by (instance, reason) ({rate('dsv4_tap_samples_dropped_total')})",
                "tap {{reason}} · {{instance}}",
            ),
        ],
        min_val=0,
    )
    b.timeseries(
        "Tap aborts, rejections and upstream connections",
        "Requests ended without a complete response, by reason; requests the tap refused itself "
        "(hostile or broken HTTP framing, by reason); new connections to SGLang per second "
        "(far above the request rate: keep-alive is not reused); and SGLang connections closed "
        "because SGLang sent bytes after a complete response (any rate: SGLang and the tap "
        "disagree on framing; those bytes were dropped, never given to another client).",
        "ops",
        [
            target(
                f"sum by (instance, reason) ({rate('dsv4_tap_aborted_total')})",
                "aborted {{reason}} · {{instance}}",
            ),
            target(
                f"sum by (instance) ({rate('dsv4_tap_upstream_connections_total')})",
                "connections · {{instance}}",
            ),
            target(
                f"sum by (instance, reason) ({rate('dsv4_tap_rejected_total')})",
                "rejected {{reason}} · {{instance}}",
            ),
            target(
                f"sum by (instance, reason) ({rate('dsv4_tap_upstream_discarded_total')})",
                "upstream discarded {{reason}} · {{instance}}",
            ),
        ],
        min_val=0,
    )
    b.timeseries(
        "Stored bad samples",
        "Degenerate/suspect samples held in the bounded, redacted triage buffer.",
        "short",
        [target(sel("dsv4_dsml_stored_samples"), "{{instance}}")],
        min_val=0,
    )
    return b.build()
