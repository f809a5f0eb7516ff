"""Deployment- and fleet-level rules: one answer per deployment, not one per rank or pod.

A deployment's *configuration* (bf16 index-K with HiCache, the legacy configurator) is the
same on every pod, so per-pod alerts for it page N times for one cause. The rules here
aggregate over the pods of a deployment and page once, listing the pods in the annotation.

Federation-safe by construction:

- Aggregations are ``without (<pod_labels>, rank, ...)``, never ``by (instance)`` nor a join
  on ``instance``: the deployment is "every label that is not a pod's", so the Kubernetes
  labels the scrape adds (``namespace``, ``deployment``; docker/k8s/servicemonitor.yaml) and
  whatever external labels Thanos / Mimir attach (``cluster``, ``prometheus``) survive into
  every recorded series and alert, and two clusters' deployments of the same name never merge.
- Per-pod joins (``unless``) match on the *whole* label set of one target, so they hold in a
  global ruler where ``instance`` values repeat across clusters.
- "Pods without a working canary" is counted from ``up`` (every scraped pod), so a pod whose
  canary series is missing altogether counts, which a count of ``dsv4_source_up == 0`` misses.

Fleet level (``fleet_*``) sums over everything the evaluating Prometheus or ruler sees: one
cluster in a local Prometheus, every cluster in a Thanos / Mimir ruler (docs/fleet.md).
"""

from __future__ import annotations

from typing import Any

from alerts.text import human_bytes, num
from exporter.thresholds import AlertConfig

# The Kubernetes target labels the fleet rules and the fleet dashboard group by; produced by
# the ServiceMonitor / PodMonitor relabelling in docker/k8s/. Absent (non-Kubernetes scrape),
# a deployment is its job.
NAMESPACE, DEPLOYMENT, POD = "namespace", "deployment", "pod"
KUBERNETES_LABELS = (NAMESPACE, DEPLOYMENT, POD)

GROUP_RECORDING = "dsv4-sidecar.fleet"
GROUP_ALERTS = "dsv4-sidecar.deployment"


class FleetNames:
    """Recording rule names (level:metric:operations); the corruption window is in the name."""

    def __init__(self, c: AlertConfig) -> None:
        w = c.corruption_window
        level = "deployment_concurrency_le"
        self.samples = f"{level}:dsv4_dsml_samples:increase{w}"
        self.degenerate = f"{level}:dsv4_dsml_samples_degenerate:increase{w}"
        self.degenerate_ratio = f"{level}:dsv4_dsml_degenerate:ratio{w}"
        self.fleet_degenerate_ratio = f"fleet_concurrency_le:dsv4_dsml_degenerate:ratio{w}"
        self.ranks = "deployment:dsv4_kv_ranks:count"
        self.ranks_overcommitted = "deployment:dsv4_kv_ranks_overcommitted:count"
        self.pods = "deployment:dsv4_pods:count"
        self.pods_without_canary = "deployment:dsv4_pods_without_canary:count"
        self.pods_without_probe = "deployment:dsv4_pods_without_probe:count"
        self.fleet_ranks_overcommitted = "fleet:dsv4_kv_ranks_overcommitted:count"
        lw, bw = c.length_window, c.length_baseline_window
        self.length_samples = f"deployment:dsv4_dsml_output_tokens_count:increase{lw}"
        self.length_p50 = f"deployment:dsv4_dsml_output_tokens:p50_{lw}"
        self.length_p50_baseline = (
            f"deployment:dsv4_dsml_output_tokens:p50_{lw}_median_offset"
            f"{c.length_baseline_period}x{c.length_baseline_periods}"
        )
        self.finish_share = f"deployment_finish_reason:dsv4_dsml_finish_reasons:share{lw}"
        self.finish_share_baseline = (
            f"deployment_finish_reason:dsv4_dsml_finish_reasons:share{lw}_median{bw}"
        )


def pod_labels(c: AlertConfig) -> str:
    """The knob's label list, normalised for a ``without (...)`` clause."""
    return ", ".join(x.strip() for x in c.pod_labels.split(","))


def recording_rules(c: AlertConfig, sel: Any) -> list[dict[str, Any]]:
    """The deployment- and fleet-level recording rules; ``sel`` is ``Builder.sel``."""
    n = FleetNames(c)
    w = c.corruption_window
    pods = pod_labels(c)
    up = f"up{{{c.selector}}}"

    def count_or_zero(filtered: str, everything: str, extra: str = "") -> str:
        # count() of an empty vector is empty: add 0 per deployment so "none" reads 0.
        drop = f"{pods}{extra}"
        return (
            f"count without ({drop}) (\n  {filtered}\n)\nor\n"
            f"0 * count without ({drop}) (\n  {everything}\n)"
        )

    lw, bw = c.length_window, c.length_baseline_window
    tokens_bucket = sel("dsv4_dsml_output_tokens_bucket")
    tokens_count = sel("dsv4_dsml_output_tokens_count")
    finishes = sel("dsv4_dsml_finish_reasons_total")
    length_rules = [
        {
            # Samples whose length the deployment measured in the window (all sources).
            "record": n.length_samples,
            "expr": f"sum without ({pods}, concurrency_le) (\n  increase({tokens_count}[{lw}])\n)",
        },
        {
            # The deployment's p50 output tokens (all concurrency buckets together).
            "record": n.length_p50,
            "expr": "histogram_quantile(0.5,\n"
            f"  sum without ({pods}, concurrency_le) (rate({tokens_bucket}[{lw}]))\n)",
        },
        {
            # Its own baseline: the median of that p50 at the same time of each earlier period
            # (the same half hour of the last 7 days; the same window, so a pattern that
            # recurs every day, a nightly batch of long reports, compares equal and does not
            # fire). Days without data drop out of the `or`; the offset label keeps each
            # day's series apart until the median joins them.
            "record": n.length_p50_baseline,
            "expr": "quantile without (baseline_offset) (0.5,\n"
            + "\nor\n".join(
                f'  label_replace({n.length_p50} offset {o}, "baseline_offset", "{o}", "", "")'
                for o in c.baseline_offsets()
            )
            + "\n)",
        },
        {
            # The finish-reason mix: each reason's share of the deployment's graded samples.
            "record": n.finish_share,
            "expr": f"sum without ({pods}, verdict) (increase({finishes}[{lw}]))\n"
            "/ ignoring (finish_reason) group_left ()\n"
            f"(sum without ({pods}, verdict, finish_reason) (increase({finishes}[{lw}])) > 0)",
        },
        {
            "record": n.finish_share_baseline,
            "expr": f"quantile_over_time(0.5, {n.finish_share}[{bw}] offset {lw})",
        },
    ]
    canary_up = sel("dsv4_source_up", 'source="canary"')
    samples = sel("dsv4_dsml_samples_total")
    degenerate = sel("dsv4_dsml_samples_total", 'verdict="degenerate"')
    overcommit = sel("dsv4_kv_pool_overcommit_bytes")
    return [
        *length_rules,
        {
            # All graded samples of every pod of a deployment, per concurrency bucket (every
            # source: the canary lands in the low buckets, the tap and ingest where the load is).
            "record": n.samples,
            "expr": f"sum without ({pods}, source, verdict) (\n  increase({samples}[{w}])\n)",
        },
        {
            # 0, not absent, for a bucket that graded samples but has no degenerate series.
            # Reads the record above: rules of a group run in order at one timestamp, so it
            # is this evaluation's value (and the costly increase() runs once, not twice).
            "record": n.degenerate,
            "expr": f"sum without ({pods}, source, verdict) (\n  increase({degenerate}[{w}])\n)"
            f"\nor\n0 * {n.samples}",
        },
        {
            # No value (not NaN) for a bucket where the deployment graded nothing.
            "record": n.degenerate_ratio,
            "expr": f"{n.degenerate}\n/\n({n.samples} > 0)",
        },
        {
            # The whole fleet this evaluator sees, per concurrency bucket.
            "record": n.fleet_degenerate_ratio,
            "expr": f"sum by (concurrency_le) ({n.degenerate})\n/\n"
            f"(sum by (concurrency_le) ({n.samples}) > 0)",
        },
        {
            # Ranks with a footprint (a rank the model cannot price is not counted).
            "record": n.ranks,
            "expr": f"count without ({pods}, rank) (\n  {overcommit}\n)",
        },
        {
            "record": n.ranks_overcommitted,
            "expr": count_or_zero(
                f"{overcommit} > {c.kv_overcommit_warning_bytes}", overcommit, ", rank"
            ),
        },
        {
            "record": n.fleet_ranks_overcommitted,
            "expr": f"sum({n.ranks_overcommitted})",
        },
        {
            # Every scraped pod, up or not: the denominator of the coverage counts below.
            "record": n.pods,
            "expr": f"count without ({pods}) (\n  {up}\n)",
        },
        {
            # Pods whose canary is not up, including pods that export no canary at all and
            # pods that are not scraped (up == 0). Matched on the target's whole label set.
            "record": n.pods_without_canary,
            "expr": count_or_zero(
                f"{up} unless ignoring (source) ({canary_up} == 1)",
                up,
            ),
        },
        {
            # Pods where some rank's HiCache probe is down or absent (probe coverage).
            "record": n.pods_without_probe,
            "expr": count_or_zero(
                f"{up} unless (min without (rank) ({sel('dsv4_probe_up')}) == 1)", up
            ),
        },
    ]


def _pods_listed(c: AlertConfig, selector: str) -> str:
    """Annotation text listing the pods of the alert's deployment that ``selector`` (a Go
    ``printf`` format with two ``%q`` for namespace and deployment) returns; the pod name,
    else the instance where the scrape adds no ``pod`` label."""
    return (
        f"{{{{ range printf `{selector}` $labels.{NAMESPACE} $labels.{DEPLOYMENT} | query "
        f'| sortByLabel "{POD}" }}}}{{{{ or .Labels.{POD} .Labels.instance }}}} {{{{ end }}}}'
    )


def _scope(c: AlertConfig, extra: str = "") -> str:
    """Matchers of one deployment inside a ``printf`` format."""
    parts = [c.selector, f"{NAMESPACE}=%q", f"{DEPLOYMENT}=%q"]
    if extra:
        parts.append(extra)
    return ", ".join(p for p in parts if p)


def alerts(c: AlertConfig, b: Any) -> list[dict[str, Any]]:
    """Deployment-level alerts; ``b`` is the rule :class:`~alerts.rules.Builder`."""
    n = FleetNames(c)
    pods = pod_labels(c)
    who = "deployment {{ $labels.namespace }}/{{ $labels.deployment }} ({{ $labels.model }})"
    info = "dsv4_deployment_info"
    out = []
    risks = (
        (
            "bf16_index_k_with_hicache",
            'index_k_dtype="bf16", hicache="true"',
            "bf16 index-K with HiCache on, on pods of one deployment.",
            "runs bf16 index-K with HiCache on: the configuration that exposes the index-K "
            "transfer race. Use fp8 index-K or disable HiCache in the deployment's spec.",
        ),
        (
            "legacy_configurator_bf16_index_k",
            'configurator="legacy", index_k_dtype="bf16"',
            "Legacy configurator with bf16 index-K, on pods of one deployment.",
            "prices bf16 index-K as fp8 (legacy configurator): the KV pools over-commit the "
            "reserve on every rank. Deploy the fixed configurator or use fp8 index-K.",
        ),
    )
    for risk, matchers, summary, what in risks:
        out.append(
            b.alert(
                "DSV4DeploymentRiskyConfiguration",
                # The dtype, configurator and HiCache labels go too: pods mid-rollout that
                # differ in the ones not matched still make one alert per deployment.
                f"count without ({pods}, index_k_dtype, configurator, hicache) (\n"
                f"  {b.sel(info, matchers)} == 1\n)",
                c.deployment_risky_config_for,
                "warning",
                summary,
                f"{{{{ $value }}}} pod(s) of {who} {what} Pods: "
                + _pods_listed(c, f"{info}{{{_scope(c, matchers)}}}"),
                labels={"risk": risk},
            )
        )
    over = f"dsv4_kv_pool_overcommit_bytes{{{_scope(c)}}} > {c.kv_overcommit_warning_bytes}"
    out.append(
        b.alert(
            "DSV4DeploymentOvercommit",
            f"{n.ranks_overcommitted}\n>= {n.ranks}\nand\n{n.ranks} > 0",
            c.deployment_overcommit_for,
            "warning",
            "Every rank of a deployment over-commits its KV pools.",
            "All {{ $value }} ranks of deployment {{ $labels.namespace }}/"
            "{{ $labels.deployment }} allocate over "
            f"{human_bytes(c.kv_overcommit_warning_bytes)} more KV than planned: the "
            "deployment's configuration (index-K dtype vs the configurator), not one pod. "
            "Deploy the fixed configurator or fp8 index-K, or lower --mem-fraction-static by "
            "the excess in the deployment's spec. Pods: "
            + _pods_listed(c, f"max without (rank) ({over})"),
        )
    )
    who_d = "deployment {{ $labels.namespace }}/{{ $labels.deployment }}"
    enough = f"{n.length_samples} >= {c.length_min_samples}"
    out.append(
        b.alert(
            "DSV4OutputLengthInflation",
            f"{n.length_p50}\n> {num(c.length_inflation_factor)} * {n.length_p50_baseline}"
            f"\nand\n{enough}",
            c.length_inflation_for,
            "warning",
            "A deployment's answers grew much longer than its own baseline.",
            f"The p50 output of {who_d} is {{{{ $value | humanize }}}} tokens over "
            f"{c.length_window}, over {num(c.length_inflation_factor)}x its median at this "
            f"time of the last {c.length_baseline_periods} periods of "
            f"{c.length_baseline_period}: token loops inflate outputs (sglang#36179, with "
            "HiCache). Read the corruption-by-length panels and the samples endpoint for "
            "prose_loop/ngram_loop; if loops, disable HiCache or switch index-K to fp8.",
        )
    )
    share = f'{n.finish_share}{{finish_reason="length"}}'
    base = f'{n.finish_share_baseline}{{finish_reason="length"}}'
    out.append(
        b.alert(
            "DSV4FinishLengthShareHigh",
            f"{share}\n> {num(c.finish_length_share_min)}\nand\n{share} > 2 * {base}"
            f"\nand ignoring (finish_reason)\n{enough}",
            c.finish_length_for,
            "warning",
            "More of a deployment's answers run out of tokens than usual.",
            f"{{{{ $value | humanizePercentage }}}} of the graded samples of {who_d} over "
            f"{c.length_window} ended with finish_reason length, over twice its median share "
            f"of the last {c.length_baseline_window}: generations that loop until max_tokens "
            "(sglang#33397). Check length_tools_no_call and prose_loop on the samples endpoint; "
            "hold length fixed with `dsv4-sidecar repro --max-tokens` to separate length from "
            "concurrency.",
        )
    )
    return out
