"""Tool-call corruption: degenerate DSML ratio over time, by reason, by concurrency bucket and by
output length, length drift and finish reasons, canary health and tap traffic."""

from __future__ import annotations

from grafana_foundation_sdk.models import dashboard as dm

from dashboards.common import (
    ALERTS,
    CONCURRENCY_BUCKETS,
    Board,
    increase_range,
    rate,
    sel,
    target,
)
from exporter.dsml.catalog import SIGNALS
from exporter.samplers.length import LENGTH_LABELS

A = ALERTS
SAMPLES = "dsv4_dsml_samples_total"
DEGENERATE = 'verdict="degenerate"'
CANARY = 'source="canary"'
REASONS = "dsv4_dsml_reasons_total"
# Severity-signal codes are counted, never a verdict (clean answers have them too): the reason
# panels leave them out, and they get a panel of their own.
_SIGNAL_RE = "|".join(sorted(SIGNALS))
VERDICT_REASONS = f'reason!~"{_SIGNAL_RE}"'
SIGNAL_REASONS = f'reason=~"{_SIGNAL_RE}"'
RATIO_STEPS = (
    (None, "green"),
    (A.corruption_warning_ratio, "orange"),
    (A.corruption_critical_ratio, "red"),
)


def _ratio(by: str, extra: str = "") -> str:
    """Degenerate / all graded samples, rate over $__rate_interval, grouped ``by``."""
    both = ", ".join(m for m in (extra, DEGENERATE) if m)
    return f"sum by ({by}) ({rate(SAMPLES, both)})\n/\nsum by ({by}) ({rate(SAMPLES, extra)})"


def _bucket_ratio(le: str) -> str:
    """Degenerate share of one concurrency bucket over the dashboard range."""
    m = f'concurrency_le="{le}"'
    return (
        f"sum({increase_range(SAMPLES, f'{m}, {DEGENERATE}')})\n/\n"
        f"sum({increase_range(SAMPLES, m)})"
    )


def build() -> dm.Dashboard:
    b = Board(
        "tool-call-corruption",
        "DSML tool-call grading of DeepSeek-V4 outputs (canary, tap and ingested samples): "
        "how often outputs degenerate, why, and at which concurrency.",
        rank_metric=None,
    )

    b.row("Degenerate outputs")
    b.timeseries(
        "Degenerate ratio by source",
        "Share of graded samples whose verdict is degenerate, per sidecar and source. Dashed: "
        f"the DSV4ToolCallCorruptionHigh warning and critical ratios (the alert uses "
        f"{A.corruption_window} windows and at least {A.corruption_min_samples} samples).",
        "percentunit",
        [target(_ratio("instance, source"), "{{instance}} · {{source}}")],
        steps=RATIO_STEPS,
        min_val=0,
    )
    b.bars(
        "Degenerate ratio by concurrency (time range)",
        "Degenerate share of the samples in each concurrency bucket (<= le concurrent requests "
        "when the sample was taken) over the whole time range: the 'fine at 1, broken at 60' "
        "picture. An empty bucket has no value.",
        "percentunit",
        [target(_bucket_ratio(le), f"<= {le}", instant=True) for le in CONCURRENCY_BUCKETS],
        steps=RATIO_STEPS,
        max_val=1,
    )
    b.timeseries(
        "Degenerate ratio by concurrency bucket",
        "The same split over time (rate windows): a bucket's line appears once it has samples.",
        "percentunit",
        [target(_ratio("concurrency_le"), "<= {{concurrency_le}}")],
        steps=RATIO_STEPS,
        min_val=0,
    )
    b.timeseries(
        "Samples by verdict",
        "Graded samples per second by verdict (well_formed, no_tool_call, suspect, truncated, "
        "degenerate), all sources.",
        "ops",
        [target(f"sum by (verdict) ({rate(SAMPLES)})", "{{verdict}}")],
        stacked=True,
    )
    b.timeseries(
        "Reasons, share of graded samples",
        "For each grading reason that decides a verdict, the share of graded samples that "
        "showed it (a degenerate sample can carry several reasons, so shares can add up past "
        "the degenerate ratio). Signals are left out (their own panel below). The samples "
        "endpoint has examples of each.",
        "percentunit",
        [
            target(
                f"sum by (reason) ({rate(REASONS, VERDICT_REASONS)})\n"
                f"/ on () group_left ()\nsum({rate(SAMPLES)})",
                "{{reason}}",
            )
        ],
        min_val=0,
    )
    b.bars(
        "Top reasons (time range)",
        "The ten most frequent verdict reasons over the whole time range (signals left out).",
        "short",
        [
            target(
                f"topk(10, sum by (reason) ({increase_range(REASONS, VERDICT_REASONS)}))",
                "{{reason}}",
                instant=True,
            )
        ],
    )
    b.table(
        "DSML dialect graded against",
        "The deployment's tool-call dialect (v3.2, v4, v4.1; auto = each block's own spelling) "
        "and where the sidecar learned it: configured, SGLang's tool_call_parser (server_info) "
        "or the model's config.json. A block of another dialect grades dialect_mismatch.",
        [target(sel("dsv4_dsml_dialect_info"), instant=True, fmt="table")],
        hidden_columns=("Time", "__name__", "Value"),
        w=24,
        h=4,
    )
    b.timeseries(
        "Signals, share of graded samples",
        f"Shapes that are counted but never change a verdict ({', '.join(sorted(SIGNALS))}): "
        "clean answers show them too (an answer ending in a list item or a CJK sentence "
        "without its final full stop; the same call twice). Watch a change in their rate "
        "beside the verdict reasons; never alert on one.",
        "percentunit",
        [
            target(
                f"sum by (reason) ({rate(REASONS, SIGNAL_REASONS)})\n"
                f"/ on () group_left ()\nsum({rate(SAMPLES)})",
                "{{reason}}",
            )
        ],
        min_val=0,
        w=24,
    )

    b.row("Length (output tokens)")
    lsamples = "dsv4_dsml_length_samples_total"

    def length_ratio(le: str) -> str:
        m = f'output_tokens_le="{le}"'
        return (
            f"sum({increase_range(lsamples, f'{m}, {DEGENERATE}')})\n/\n"
            f"sum({increase_range(lsamples, m)})"
        )

    b.bars(
        "Degenerate ratio by output length (time range)",
        "Degenerate share of the samples in each output-length bucket (<= le output tokens: "
        "usage.completion_tokens, else streamed deltas, else estimated) over the time range: "
        "corruption of long generations (sglang#33397: 0 of 19 short answers, 6 of 11 long "
        "ones). Read it next to the concurrency split above.",
        "percentunit",
        [target(length_ratio(le), f"<= {le}", instant=True) for le in LENGTH_LABELS],
        steps=RATIO_STEPS,
        max_val=1,
    )
    b.timeseries(
        "Degenerate ratio by output length",
        "The same split over time: a bucket's line appears once it has samples.",
        "percentunit",
        [
            target(
                f"sum by (output_tokens_le) ({rate(lsamples, DEGENERATE)})\n/\n"
                f"sum by (output_tokens_le) ({rate(lsamples)})",
                "<= {{output_tokens_le}} tokens",
            )
        ],
        steps=RATIO_STEPS,
        min_val=0,
    )
    b.timeseries(
        "Output tokens p50 and p90 by concurrency bucket (length drift)",
        "Quantiles of graded samples' output tokens per concurrency bucket over time. "
        "DSV4OutputLengthInflation compares the deployment's 30m p50 with the median of its "
        f"30m p50 at the same time of the last {A.length_baseline_periods} periods of "
        f"{A.length_baseline_period} (it fires above "
        f"{A.length_inflation_factor}x it). Inflation is how token loops show first "
        "(sglang#36179).",
        "short",
        [
            target(
                "histogram_quantile(0.5, sum by (concurrency_le, le) "
                f"({rate('dsv4_dsml_output_tokens_bucket')}))",
                "p50 · <= {{concurrency_le}}",
            ),
            target(
                f"histogram_quantile(0.9, sum by (le) ({rate('dsv4_dsml_output_tokens_bucket')}))",
                "p90 · all",
            ),
        ],
        min_val=0,
    )
    b.timeseries(
        "Finish reasons by verdict",
        "Graded samples per second by finish reason and verdict: a rising share of length "
        "(generations that run out of tokens) is DSV4FinishLengthShareHigh.",
        "ops",
        [
            target(
                f"sum by (finish_reason, verdict) ({rate('dsv4_dsml_finish_reasons_total')})",
                "{{finish_reason}} · {{verdict}}",
            )
        ],
        stacked=True,
    )
    b.timeseries(
        "How output tokens were counted",
        "usage: the response's usage.completion_tokens; stream: streamed deltas; estimate: "
        "4 characters a token. Mostly estimate means clients do not ask for usage.",
        "ops",
        [
            target(
                f"sum by (counted) ({rate('dsv4_dsml_output_tokens_counted_total')})",
                "{{counted}}",
            )
        ],
        stacked=True,
    )

    b.row("Canary")
    b.timeseries(
        "Canary requests by result",
        "Canary tool-call requests per second: success, error or timeout.",
        "reqps",
        [target(f"sum by (result) ({rate('dsv4_canary_requests_total')})", "{{result}}")],
        stacked=True,
    )
    b.stat(
        "Since last successful canary",
        f"Age of the last successful canary per sidecar; DSV4CanaryFailing fires past "
        f"{A.canary_stale_seconds}s. Never succeeded shows as decades.",
        "s",
        [
            target(
                "time() - " + sel("dsv4_source_last_success_timestamp_seconds", 'source="canary"'),
                "{{instance}}",
                instant=True,
            )
        ],
        steps=((None, "green"), (A.canary_stale_seconds, "red")),
    )
    b.stat(
        "Degenerate canary replies (time range)",
        "Canary replies graded degenerate over the time range; any fires DSV4CanaryFailing "
        "(warning).",
        "short",
        [
            target(
                "sum(" + increase_range(SAMPLES, f"{CANARY}, {DEGENERATE}") + ")",
                "degenerate",
                instant=True,
            )
        ],
        steps=((None, "green"), (1, "red")),
    )
    b.timeseries(
        "Canary latency",
        "Canary request latency quantiles from its histogram.",
        "s",
        [
            target(
                f"histogram_quantile({q}, sum by (le) "
                f"({rate('dsv4_canary_latency_seconds_bucket')}))",
                f"p{int(q * 100)}",
            )
            for q in (0.5, 0.95)
        ],
        min_val=0,
    )

    b.row("Tap (pass-through proxy)")
    b.timeseries(
        "Tap requests by status code",
        "Requests through the tap per second by HTTP status code.",
        "reqps",
        [target(f"sum by (code) ({rate('dsv4_tap_requests_total')})", "{{code}}")],
        stacked=True,
    )
    b.timeseries(
        "Tap in-flight requests",
        "Requests the tap is proxying right now (the concurrency the samples are bucketed by).",
        "short",
        [target(f"sum by (instance) ({sel('dsv4_tap_inflight_requests')})", "{{instance}}")],
        min_val=0,
    )
    b.timeseries(
        "Tap added latency",
        "Latency the tap adds on top of the upstream (time to first byte), quantiles.",
        "s",
        [
            target(
                f"histogram_quantile({q}, sum by (le) "
                f"({rate('dsv4_tap_added_latency_seconds_bucket')}))",
                f"p{int(q * 100)}",
            )
            for q in (0.5, 0.99)
        ],
        min_val=0,
    )
    b.timeseries(
        "Tap sampling",
        "Responses the tap handed to the grader per second, and sampling errors (observation "
        "failures never touch the response).",
        "ops",
        [
            target(f"sum({rate('dsv4_tap_sampled_total')})", "sampled"),
            target(f"sum({rate('dsv4_tap_sampling_errors_total')})", "errors"),
        ],
    )
    return b.build()
