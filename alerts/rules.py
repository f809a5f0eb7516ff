"""The rule groups, built from an :class:`~alerts.config.AlertConfig`.

Style (monitoring-mixins): CamelCase names with the ``DSV4`` prefix; every alert has an
explicit ``for:``, a ``severity`` label, a ``summary``, a templated ``description`` that says
what to do, and a ``runbook_url`` from the config's one base URL. Aggregations use
``without (...)`` so whatever target labels a deployment adds (namespace, pod) survive into
the alert. Variants of one alert (warning/critical) share the name and differ by ``severity``
so an Alertmanager inhibit rule on ``alertname`` can mute the warning while critical fires.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from alerts import fleet
from alerts.text import human_bytes, num, pct
from exporter.metrics.catalog import spec_for_series
from exporter.thresholds import AlertConfig

RULE_FILE = "dsv4-sidecar.rules.yaml"


@dataclass
class Names:
    """Recording rule names; the window is part of the name so a changed window renames them."""

    samples: str
    degenerate: str
    degenerate_ratio: str
    reserve_ratio: str = "instance_rank:dsv4_kv_pool_overcommit_bytes:reserve_ratio"

    @classmethod
    def for_config(cls, c: AlertConfig) -> Names:
        w = c.corruption_window
        return cls(
            samples=f"instance_source:dsv4_dsml_samples:increase{w}",
            degenerate=f"instance_source:dsv4_dsml_samples_degenerate:increase{w}",
            degenerate_ratio=f"instance_source:dsv4_dsml_degenerate:ratio{w}",
        )


@dataclass
class Builder:
    """Accumulates rules with the config's selector applied to every metric reference."""

    c: AlertConfig
    groups: list[dict[str, Any]] = field(default_factory=list)

    def sel(self, metric: str, extra: str = "") -> str:
        """``metric{<selector>[,extra]}``; ``metric`` must be in the metrics catalog (a typo
        fails the generator, not the alert, which would otherwise never fire)."""
        spec_for_series(metric)
        matchers = ", ".join(m for m in (self.c.selector, extra) if m)
        return f"{metric}{{{matchers}}}"

    def group(self, name: str, rules: list[dict[str, Any]]) -> None:
        self.groups.append({"name": name, "rules": rules})

    def alert(
        self,
        name: str,
        expr: str,
        for_: str,
        severity: str,
        summary: str,
        description: str,
        labels: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        return {
            "alert": name,
            "expr": expr,
            "for": for_,
            "labels": {"severity": severity, **(labels or {})},
            "annotations": {
                "summary": summary,
                "description": description,
                "runbook_url": self.c.runbook_url(name),
            },
        }


def build(c: AlertConfig) -> dict[str, Any]:
    """The whole rule file as a mapping (``groups: [...]``)."""
    b = Builder(c)
    n = Names.for_config(c)
    _recording(b, n)
    b.group(fleet.GROUP_RECORDING, fleet.recording_rules(c, b.sel))
    _memory(b, n)
    _toolcalls(b, n)
    _hicache(b)
    _config(b)
    _meta(b)
    b.group(fleet.GROUP_ALERTS, fleet.alerts(c, b))
    return {"groups": b.groups}


def _recording(b: Builder, n: Names) -> None:
    w = b.c.corruption_window
    degenerate = b.sel("dsv4_dsml_samples_total", 'verdict="degenerate"')
    b.group(
        "dsv4-sidecar.rules",
        [
            {
                # All graded samples per sidecar and source; the alert's minimum sample count.
                "record": n.samples,
                "expr": "sum without (verdict, concurrency_le) (\n"
                f"  increase({b.sel('dsv4_dsml_samples_total')}[{w}])\n)",
            },
            {
                "record": n.degenerate,
                "expr": "sum without (verdict, concurrency_le) (\n"
                f"  increase({degenerate}[{w}])\n)",
            },
            {
                # No result (rather than NaN) while a source has graded nothing in the window.
                "record": n.degenerate_ratio,
                "expr": f"{n.degenerate}\n/\n({n.samples} > 0)",
            },
            {
                # Over-commit as a fraction of the reserve it eats; +Inf when the reserve is 0.
                "record": n.reserve_ratio,
                "expr": f"{b.sel('dsv4_kv_pool_overcommit_bytes')}\n/\n"
                f"{b.sel('dsv4_memory_reserve_bytes')}",
            },
        ],
    )


def _memory(b: Builder, n: Names) -> None:
    c = b.c
    where = "rank {{ $labels.rank }} of {{ $labels.instance }}"
    gpu = "GPU {{ $labels.gpu }} (rank {{ $labels.rank }}) of {{ $labels.instance }}"
    free = b.sel("dsv4_gpu_memory_free_bytes")
    total = b.sel("dsv4_gpu_memory_total_bytes")
    b.group(
        "dsv4-sidecar.memory",
        [
            b.alert(
                "DSV4KVPoolOvercommit",
                f"{b.sel('dsv4_kv_pool_overcommit_bytes')} > {c.kv_overcommit_warning_bytes}",
                c.kv_overcommit_for,
                "warning",
                "KV pools allocate more than SGLang planned.",
                f"The KV pools on {where} allocate {{{{ $value | humanize1024 }}}}B more than "
                "the configurator planned (threshold "
                f"{human_bytes(c.kv_overcommit_warning_bytes)}); the excess comes out of the "
                "activation / CUDA-graph reserve. Deploy the fixed configurator or use fp8 "
                "index-K; until then lower --mem-fraction-static by the excess.",
            ),
            b.alert(
                "DSV4KVPoolOvercommit",
                f"{n.reserve_ratio} > {num(c.kv_overcommit_critical_reserve_ratio)}",
                c.kv_overcommit_for,
                "critical",
                "KV-pool over-commit exceeds the memory reserve.",
                f"The KV-pool over-commit on {where} is {{{{ $value | humanizePercentage }}}} "
                "of the (1 - mem_fraction_static) reserve: activations and CUDA graphs no "
                "longer fit and the next long batch can OOM. Lower --mem-fraction-static or "
                "--max-running-requests now; then deploy the fixed configurator or fp8 index-K.",
            ),
            b.alert(
                "DSV4GPUMemoryHeadroomLow",
                f"{free} < {c.gpu_free_warning_bytes}",
                c.gpu_free_warning_for,
                "warning",
                "GPU free memory is low.",
                f"{gpu} has {{{{ $value | humanize1024 }}}}B free (threshold "
                f"{human_bytes(c.gpu_free_warning_bytes)}). Check KV over-commit first; "
                "lower --max-running-requests or --mem-fraction-static before it OOMs.",
            ),
            b.alert(
                "DSV4GPUMemoryHeadroomLow",
                f"{free} < {c.gpu_free_critical_bytes}",
                c.gpu_free_critical_for,
                "critical",
                "GPU free memory is almost exhausted.",
                f"{gpu} has only {{{{ $value | humanize1024 }}}}B free (threshold "
                f"{human_bytes(c.gpu_free_critical_bytes)}); an OOM is imminent. Lower "
                "--max-running-requests now, then fix the over-commit (see the runbook).",
            ),
            b.alert(
                "DSV4FootprintModelDrift",
                f"abs({b.sel('dsv4_footprint_model_drift_bytes')}) > {c.model_drift_bytes}",
                c.model_drift_for,
                "warning",
                "The footprint model disagrees with the probe's measured pool bytes.",
                "The model's {{ $labels.pool }} pool on "
                f"{where} differs from the bytes the probe measured by "
                "{{ $value | humanize1024 }}B (threshold "
                f"{human_bytes(c.model_drift_bytes)}): the model does not know this SGLang "
                "build (release, fork, or a deployment fact it was not told, the index-K dtype "
                "first). Trust the measured dsv4_probe_overcommit_bytes and set the sidecar's "
                "index_k_dtype to the dtype in dsv4_probe_index_k_info; if they already match, "
                "this release's pools are not modelled: report it with the SGLang version.",
            ),
            b.alert(
                "DSV4OvercommitOnAssumption",
                "max without (value, source) ("
                + b.sel(
                    "dsv4_deployment_fact_info",
                    f'source="assumed", fact=~"{c.assumed_facts}"',
                )
                + ") == 1",
                c.assumed_fact_for,
                "warning",
                "The KV over-commit figure rests on an assumed deployment fact.",
                "On {{ $labels.instance }} nothing told, measured or inferred the "
                "{{ $labels.fact }} the footprint model prices the pools with: "
                "dsv4_kv_pool_overcommit_bytes is a guess (a bf16 index-K fork assumed fp8 "
                "hides ~4 GiB per rank). Settle it: index_k_dtype with the in-process probe "
                "(DSV4_PROBE=1) or the sidecar's index_k_dtype setting; pricing with the "
                "sidecar's configurator setting (legacy/fixed). SGLang 0.5.17+ memory figures "
                "with NVML let the sidecar infer both; see the runbook for why it could not.",
            ),
            b.alert(
                "DSV4GPUMemoryFillingUp",
                f"predict_linear({free}[{c.gpu_fill_lookback}], {c.gpu_fill_horizon_seconds}) < 0"
                f"\nand\n{free} / {total} < {num(c.gpu_fill_max_free_ratio)}",
                c.gpu_fill_for,
                "warning",
                "GPU free memory is predicted to run out.",
                f"At the trend of the last {c.gpu_fill_lookback}, {gpu} runs out of free "
                f"memory within {c.gpu_fill_horizon_seconds // 60}m (forecast "
                "{{ $value | humanize1024 }}B free). Find what grows (requests, HiCache, another "
                "process) and lower --max-running-requests before it OOMs.",
            ),
        ],
    )


def _toolcalls(b: Builder, n: Names) -> None:
    c = b.c
    w = c.corruption_window
    src = "{{ $labels.source }} samples of {{ $labels.instance }}"
    enough = f"{n.samples} >= {c.corruption_min_samples}"
    action = (
        "Switch index-K to fp8 and disable HiCache (the index-K transfer race), and lower "
        "--max-running-requests; check DSV4IndexKUngatedReads and the samples endpoint."
    )
    canary_degenerate = b.sel("dsv4_dsml_samples_total", 'source="canary", verdict="degenerate"')
    b.group(
        "dsv4-sidecar.toolcalls",
        [
            b.alert(
                "DSV4ToolCallCorruptionHigh",
                f"{n.degenerate_ratio} > {num(c.corruption_warning_ratio)}\nand\n{enough}",
                c.corruption_warning_for,
                "warning",
                "DSML tool-call outputs are degenerating.",
                f"{{{{ $value | humanizePercentage }}}} of the {src} over {w} graded "
                f"degenerate (threshold {pct(c.corruption_warning_ratio)}). {action}",
            ),
            b.alert(
                "DSV4ToolCallCorruptionHigh",
                f"{n.degenerate_ratio} > {num(c.corruption_critical_ratio)}\nand\n{enough}",
                c.corruption_critical_for,
                "critical",
                "DSML tool-call outputs are heavily corrupted.",
                f"{{{{ $value | humanizePercentage }}}} of the {src} over {w} graded "
                f"degenerate (threshold {pct(c.corruption_critical_ratio)}): agents are "
                f"getting garbage tool calls. {action}",
            ),
            b.alert(
                "DSV4CanaryFailing",
                "time() - "
                + b.sel("dsv4_source_last_success_timestamp_seconds", 'source="canary"')
                + f" > {c.canary_stale_seconds}",
                c.canary_stale_for,
                "critical",
                "No successful canary request for too long.",
                "The last successful canary of {{ $labels.instance }} was "
                "{{ $value | humanizeDuration }} ago (threshold "
                f"{c.canary_stale_seconds}s): SGLang is not answering tool-call requests. "
                "Check dsv4_canary_requests_total by result and the server's health; restart "
                "the engine if it is wedged.",
            ),
            b.alert(
                "DSV4CanaryFailing",
                "sum without (verdict, concurrency_le) (\n"
                f"  increase({canary_degenerate}[{c.canary_degenerate_window}])\n) > 0",
                c.canary_degenerate_for,
                "warning",
                "The canary got a degenerate tool-call reply.",
                "{{ $value | humanize }} canary replies of {{ $labels.instance }} graded "
                f"degenerate in {c.canary_degenerate_window}: corruption even at canary "
                "concurrency. Read the reasons on the samples endpoint; switch index-K to fp8, "
                "disable HiCache and check DSV4IndexKUngatedReads.",
            ),
        ],
    )


def _hicache(b: Builder) -> None:
    c = b.c
    ungated = b.sel("dsv4_hicache_index_k_reads_total", 'gated="false"')
    w = c.index_k_window
    b.group(
        "dsv4-sidecar.hicache",
        [
            b.alert(
                "DSV4IndexKUngatedReads",
                # Second branch: a series that appears already non-zero (reads before the
                # first scrape), which increase() cannot see.
                f"increase({ungated}[{w}]) > 0\nor\n({ungated} > 0 unless {ungated} offset {w})",
                c.index_k_for,
                "critical",
                "Index-K reads are not ordered after the HiCache layer load.",
                "{{ $value | humanize }} index-K reads on rank {{ $labels.rank }} of "
                "{{ $labels.instance }} were not gated by the layer's load event: the HiCache "
                "transfer race is live and outputs can degenerate. Disable HiCache "
                "(--enable-hierarchical-cache off) or deploy a build that waits on the layer "
                "before get_index_k_with_scale_buffer.",
            ),
        ],
    )


def _config(b: Builder) -> None:
    c = b.c
    info = "dsv4_deployment_info"
    who = "{{ $labels.instance }} ({{ $labels.model }})"
    b.group(
        "dsv4-sidecar.config",
        [
            b.alert(
                "DSV4RiskyConfiguration",
                b.sel(info, 'index_k_dtype="bf16", hicache="true"') + " == 1",
                c.risky_config_for,
                "warning",
                "bf16 index-K with HiCache on.",
                f"{who} runs bf16 index-K with HiCache on: the configuration that exposes the "
                "index-K transfer race. Use fp8 index-K or disable HiCache.",
                labels={"risk": "bf16_index_k_with_hicache"},
            ),
            b.alert(
                "DSV4RiskyConfiguration",
                b.sel(info, 'configurator="legacy", index_k_dtype="bf16"') + " == 1",
                c.risky_config_for,
                "warning",
                "Legacy configurator with bf16 index-K.",
                f"{who} prices bf16 index-K as fp8 (legacy configurator): the KV pools "
                "over-commit the reserve. Deploy the fixed configurator or use fp8 index-K.",
                labels={"risk": "legacy_configurator_bf16_index_k"},
            ),
            b.alert(
                "DSV4RiskyConfiguration",
                b.sel(info, 'configurator="legacy", index_k_dtype!~"fp8|bf16"') + " == 1",
                c.risky_config_for,
                "info",
                "Legacy configurator with a non-fp8 index-K.",
                f"{who} runs the legacy configurator with {{{{ $labels.index_k_dtype }}}} "
                "index-K, which it prices as fp8: the plan is wrong (for fp4 it wastes "
                "capacity). Deploy the fixed configurator.",
                labels={"risk": "legacy_configurator_non_fp8_index_k"},
            ),
        ],
    )


def _meta(b: Builder) -> None:
    c = b.c

    def source_down(name: str, label: str, source: str, action: str) -> dict[str, Any]:
        only = f'source="{source}"'
        return b.alert(
            name,
            f"{b.sel('dsv4_source_up', only)} == 0\nor\n"
            f"time() - {b.sel('dsv4_source_last_success_timestamp_seconds', only)}"
            f" > {c.source_stale_seconds}",
            c.source_down_for,
            "warning",
            f"The sidecar's {label} source is down.",
            f"The {label} source of {{{{ $labels.instance }}}} is down or has not succeeded "
            f"for over {c.source_stale_seconds}s; its panels and alerts are blind. {action}",
        )

    b.group(
        "dsv4-sidecar.meta",
        [
            b.alert(
                "DSV4SidecarAbsent",
                f"absent(up{{{c.selector}}})",
                c.sidecar_absent_for,
                "warning",
                "No dsv4-sidecar target is scraped.",
                f"Prometheus has scraped no target matching {{{c.selector}}} for "
                f"{c.sidecar_absent_for}: every DSV4 alert of job {{{{ $labels.job }}}} is "
                "blind. Check the scrape config / ServiceMonitor and that the sidecar "
                "container is deployed beside the SGLang pod.",
            ),
            b.alert(
                "DSV4SidecarDown",
                f"up{{{c.selector}}} == 0",
                c.sidecar_down_for,
                "warning",
                "The dsv4-sidecar target is down.",
                "Prometheus cannot scrape {{ $labels.instance }}: its DSV4 alerts are blind. "
                "Check the sidecar container's logs and restarts, and its /metrics port.",
            ),
            source_down(
                "DSV4NVMLDown",
                "NVML",
                "nvml",
                'Read dsv4_source_errors_total{source="nvml"} by reason; a lost GPU or driver '
                "mismatch needs the node drained.",
            ),
            # One page for whichever engine the sidecar sits beside (the engine table's rows,
            # exporter/sources/engines.py): dsv4_engine_info names the engine, whose source
            # has the engine's name; while the engine is unknown, discovery's own source.
            b.alert(
                "DSV4EngineDown",
                f"(\n  {b.sel('dsv4_source_up')} == 0\n  or\n  time() - "
                f"{b.sel('dsv4_source_last_success_timestamp_seconds')}"
                f" > {c.source_stale_seconds}\n)\n"
                "and ignoring (engine, footprint)\n"
                "label_replace(\n  label_replace("
                f"{b.sel('dsv4_engine_info')}, "
                '"source", "$1", "engine", "(.+)"),\n'
                '  "source", "engine", "engine", "unknown"\n)',
                c.source_down_for,
                "warning",
                "The sidecar's engine source is down.",
                "The {{ $labels.source }} source of {{ $labels.instance }} (the serving "
                "engine's; engine while it is not yet known) is down or has not succeeded for "
                f"over {c.source_stale_seconds}s; its panels and alerts are blind. Read "
                'dsv4_source_errors_total{source="{{ $labels.source }}"} by reason; check '
                "the server's /health and the sidecar's server_url.",
            ),
            b.alert(
                "DSV4ProbeStale",
                f"{b.sel('dsv4_probe_up')} == 0\nor\ntime() - "
                f"{b.sel('dsv4_probe_last_report_timestamp_seconds')} > {c.probe_stale_seconds}",
                c.probe_stale_for,
                "warning",
                "The HiCache index-K probe stopped reporting.",
                "The probe on rank {{ $labels.rank }} of {{ $labels.instance }} is down or "
                f"silent for over {c.probe_stale_seconds}s: the transfer race is unwatched. "
                "Check that the probe is installed in the SGLang image and can reach the "
                "sidecar.",
            ),
            b.alert(
                "DSV4GPUCountDropped",
                f"{b.sel('dsv4_gpus_visible')}\n<\n"
                f"max_over_time({b.sel('dsv4_gpus_visible')}[{c.gpu_count_lookback}])",
                c.gpu_count_for,
                "critical",
                "A GPU disappeared from NVML.",
                "{{ $labels.instance }} sees {{ $value }} GPUs, fewer than in the last "
                f"{c.gpu_count_lookback}: a GPU fell off the bus or lost its driver and the "
                "TP group is broken. Drain the node and replace or reset the GPU.",
            ),
        ],
    )
