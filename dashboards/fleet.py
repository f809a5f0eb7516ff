"""DSV4 sidecar / Fleet: every pod of every deployment on one page, to answer "which pods, of
which deployment, are over-committed or corrupting tool calls right now, and since which
rollout?".

Grouped by the Kubernetes labels the scrape adds (namespace, deployment, pod: the relabelling
in docker/k8s/servicemonitor.yaml) and by SGLang version. Pod-level panels read the sidecars'
own series aggregated to one row per pod (``without (rank, ...)``, so every query of the pods
table returns the same label set and Grafana's ``merge`` joins them into one row); the
deployment-level panels read the recording rules of alerts/fleet.py, which is what keeps them
cheap at hundreds of pods (bench/bench_fleet.py measures it). Each pod links to the per-pod
dashboards.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders.dashboard import CustomVariable
from grafana_foundation_sdk.models import dashboard as dm

from alerts.fleet import FleetNames, pod_labels
from dashboards.common import (
    ALERTS,
    CONCURRENCY_BUCKETS,
    UIDS,
    Board,
    link,
    sel,
    target,
    up_down_mappings,
)

SCOPE = 'namespace=~"$namespace", deployment=~"$deployment"'
# "High" concurrency (the corruption follows concurrency) starts at a bucket the viewer picks
# (default 32): the variable's value is the regex of the buckets below it ("none": every bucket).
HIGH_FROM_DEFAULT = "32"
HIGH = 'concurrency_le!~"$below"'


def _high_from_variable() -> CustomVariable:
    """The ``below`` variable: option text = first high bucket, value = the buckets below."""
    buckets = [b for b in CONCURRENCY_BUCKETS if b != "+Inf"]
    options = [
        dm.VariableOption(
            selected=b == HIGH_FROM_DEFAULT,
            text=b,
            value="|".join(buckets[:i]) or "none",
        )
        for i, b in enumerate(buckets)
    ]
    default = next(o for o in options if o.selected)
    return (
        CustomVariable("below")
        .label("High concurrency from")
        .description(
            "The smallest concurrency bucket counted as high in the degenerate-ratio columns "
            "and heatmap (1: every sample)."
        )
        .values(", ".join(f"{o.text} : {o.value}" for o in options))
        .options(options)
        .current(default)
    )


N = FleetNames(ALERTS)


def eq(**labels: str) -> str:
    """Equality matchers: ``eq(source="canary")`` -> ``source="canary"``."""
    return ", ".join(f'{k}="{v}"' for k, v in labels.items())


# The two warning risks of DSV4RiskyConfiguration / DSV4DeploymentRiskyConfiguration.
RISK_HICACHE = eq(index_k_dtype="bf16", hicache="true")
RISK_PRICING = eq(configurator="legacy", index_k_dtype="bf16")


def psel(metric: str, extra: str = "") -> str:
    """A sidecar series scoped by job, instance, namespace and deployment."""
    return sel(metric, ", ".join(m for m in (SCOPE, extra) if m))


def dsel(record: str, extra: str = "") -> str:
    """A deployment-level recorded series (no instance label) scoped by job and deployment."""
    matchers = ", ".join(m for m in ('job=~"$job"', SCOPE, extra) if m)
    return f"{record}{{{matchers}}}"


def _pod_link(slug: str) -> str:
    """URL of a per-pod dashboard for the row's job and instance, keeping the time range."""
    return (
        f"/d/{UIDS[slug]}?var-job=${{__data.fields.job}}"
        "&var-instance=${__data.fields.instance}&${__url_time_range}"
    )


def _high(metric_filter: str) -> str:
    """Graded samples at high concurrency over the dashboard's range, one value per pod."""
    extra = ", ".join(m for m in (HIGH, metric_filter) if m)
    return (
        "sum without (source, verdict, concurrency_le) (\n"
        f"  increase({psel('dsv4_dsml_samples_total', extra)}[$__range])\n)"
    )


def _by_deployment(metric_filter: str) -> str:
    """Graded samples per step and concurrency bucket over the pods of each deployment."""
    extra = ", ".join(m for m in (HIGH, metric_filter) if m)
    return (
        f"  sum without ({pod_labels(ALERTS)}, source, verdict) (\n"
        f"    increase({psel('dsv4_dsml_samples_total', extra)}[$__rate_interval])\n  )"
    )


def build() -> dm.Dashboard:
    b = Board(
        "fleet",
        "Every SGLang pod of every deployment: which are over-committed, corrupting tool calls "
        "at high concurrency, or unwatched (no canary, no probe), grouped by namespace, "
        "deployment and SGLang version so a bad rollout stands out. Links into the per-pod "
        "dashboards.",
        rank_metric=None,
        kubernetes=True,
    )
    b.variable(_high_from_variable())
    for slug in ("overview", "memory-overcommit", "tool-call-corruption"):
        b.link(link(slug))

    b.row("Fleet at a glance (recording rules, alerts/fleet.py)")
    for title, description, record, steps in (
        (
            "Pods",
            "Scraped sidecar pods (up or not) of the selected deployments.",
            N.pods,
            ((None, "blue"),),
        ),
        (
            "Over-committed ranks",
            "Ranks whose KV pools allocate more than planned by over "
            f"{ALERTS.kv_overcommit_warning_bytes >> 20} MiB (the DSV4KVPoolOvercommit "
            "threshold), over all selected deployments.",
            N.ranks_overcommitted,
            ((None, "green"), (1, "orange")),
        ),
        (
            "Pods without a working canary",
            "Pods whose canary source is down or absent, or that are not scraped at all.",
            N.pods_without_canary,
            ((None, "green"), (1, "orange")),
        ),
        (
            "Pods without a working probe",
            "Pods where some rank's in-process HiCache probe is down or not installed: the "
            "index-K transfer race is unwatched there.",
            N.pods_without_probe,
            ((None, "green"), (1, "orange")),
        ),
    ):
        b.stat(
            title,
            description,
            "short",
            [target(f"sum({dsel(record)})", title, instant=True)],
            steps=steps,
            w=5,
            h=4,
        )
    b.stat(
        "Deployment alerts firing",
        "DSV4Deployment* alerts firing now: one per bad deployment and cause (risky "
        "configuration, over-commit on every rank).",
        "short",
        [
            target(
                'count(ALERTS{job=~"$job", alertname=~"DSV4Deployment.*", '
                'alertstate="firing"}) or vector(0)',
                "firing",
                instant=True,
            )
        ],
        steps=((None, "green"), (1, "red")),
        w=4,
        h=4,
    )

    b.row("Pods")
    b.table(
        "Pods at risk",
        "One row per pod (sort by any column): worst rank's KV over-commit, reclaimable bytes "
        "and over-commit as a share of the reserve; lowest GPU free memory; degenerate ratio "
        "and graded samples at high concurrency over the time range; canary up; share of "
        "ranks with a working probe; risky configuration (1: bf16 index-K with HiCache or the "
        "legacy configurator with bf16). The instance links to the pod's memory dashboard, the "
        "pod to its tool-call dashboard.",
        [
            target(
                f"max without (rank) ({psel('dsv4_kv_pool_overcommit_bytes')})",
                instant=True,
                fmt="table",
            ),
            target(
                f"max without (rank) ({psel('dsv4_kv_pool_reclaimable_bytes')})",
                instant=True,
                fmt="table",
            ),
            target(
                "max without (rank) (\n"
                f"  {psel('dsv4_kv_pool_overcommit_bytes')}\n"
                f"  / {psel('dsv4_memory_reserve_bytes')}\n)",
                instant=True,
                fmt="table",
            ),
            target(
                f"min without (rank, gpu, uuid) ({psel('dsv4_gpu_memory_free_bytes')})",
                instant=True,
                fmt="table",
            ),
            target(
                f"{_high(eq(verdict='degenerate'))}\n/\n({_high('')} > 0)",
                instant=True,
                fmt="table",
            ),
            target(_high(""), instant=True, fmt="table"),
            target(
                f"max without (source) ({psel('dsv4_source_up', eq(source='canary'))})",
                instant=True,
                fmt="table",
            ),
            target(
                f"avg without (rank) ({psel('dsv4_probe_up')})",
                instant=True,
                fmt="table",
            ),
            target(
                "max without (index_k_dtype, configurator, hicache, model) (\n"
                f"  {psel('dsv4_deployment_info', RISK_HICACHE)}\n"
                f"  or\n  {psel('dsv4_deployment_info', RISK_PRICING)}\n)",
                instant=True,
                fmt="table",
            ),
        ],
        merge=True,
        hidden_columns=("Time", "__name__", "job"),
        renames={
            "Value #A": "over-commit",
            "Value #B": "reclaimable",
            "Value #C": "share of reserve",
            "Value #D": "GPU free (min)",
            "Value #E": "degenerate @ high concurrency",
            "Value #F": "samples @ high concurrency",
            "Value #G": "canary up",
            "Value #H": "probe coverage",
            "Value #I": "risky config",
        },
        column_units={
            "Value #A": "bytes",
            "Value #B": "bytes",
            "Value #C": "percentunit",
            "Value #D": "bytes",
            "Value #E": "percentunit",
            "Value #F": "short",
            "Value #G": "short",
            "Value #H": "percentunit",
            "Value #I": "short",
        },
        links=(
            ("instance", _pod_link("memory-overcommit")),
            ("pod", _pod_link("tool-call-corruption")),
        ),
        link_title="Per-pod dashboard",
        w=24,
        h=12,
    )
    b.table(
        "Pod configuration and SGLang version",
        "Per pod: the served model, index-K dtype, configurator variant and HiCache switch the "
        "footprint rests on, and the SGLang version; sort by version to see a rollout.",
        [
            target(
                f"{psel('dsv4_deployment_info')}\n"
                "* ignoring (version, model, index_k_dtype, configurator, hicache)\n"
                "  group_left (version)\n"
                f"{psel('dsv4_sglang_info')}",
                instant=True,
                fmt="table",
            )
        ],
        hidden_columns=("Time", "__name__", "job", "Value"),
        links=(("instance", _pod_link("memory-overcommit")),),
        link_title="Per-pod dashboard",
        w=12,
        h=10,
    )
    rules = psel("dsv4_footprint_rules_unverified")
    fact = psel("dsv4_deployment_fact_info", 'fact="index_k_dtype"')
    ign = "ignoring (sglang_version, rules, fact, value, source)"
    b.table(
        "Release rules and index-K fact source",
        "Per pod: the SGLang release whose footprint rules priced it (Value 1: newer than "
        "every checked release, rules unverified), the index-K dtype the footprint used and "
        "where that fact came from (configured, probe, inferred, assumed).",
        [
            target(
                f"({rules}\n* {ign} group_left (value, source)\n{fact})\nor\n"
                f"({rules}\nunless {ign}\n{fact})",
                instant=True,
                fmt="table",
            )
        ],
        hidden_columns=("Time", "__name__", "job"),
        renames={
            "value": "index-K dtype",
            "source": "index-K source",
            "Value": "rules unverified",
        },
        w=12,
        h=10,
    )

    b.row("Heatmaps: pods and deployments over time")
    b.states(
        "Over-commit share of reserve per pod",
        "Worst rank's KV over-commit as a share of the (1 - mem_fraction_static) reserve, one "
        "row per pod: orange above half, red where the whole reserve is gone (the critical "
        "DSV4KVPoolOvercommit).",
        [
            target(
                "max without (rank) (\n"
                f"  {psel('dsv4_kv_pool_overcommit_bytes')}\n"
                f"  / {psel('dsv4_memory_reserve_bytes')}\n)",
                "{{namespace}}/{{pod}} {{instance}}",
            )
        ],
        mappings=(),
        steps=(
            (None, "green"),
            (0.5, "orange"),
            (ALERTS.kv_overcommit_critical_reserve_ratio, "red"),
        ),
        w=12,
        h=10,
    )
    b.states(
        "Degenerate ratio per deployment at high concurrency",
        "Worst high-concurrency bucket's degenerate ratio over "
        "each step (the same sum as the recording rule "
        f"{N.degenerate_ratio}, at the panel's resolution), one row per deployment: orange and red "
        "at the DSV4ToolCallCorruptionHigh thresholds.",
        [
            target(
                f"max without (concurrency_le) (\n{_by_deployment(eq(verdict='degenerate'))}\n/\n"
                f"({_by_deployment('')} > 0)\n)",
                "{{namespace}}/{{deployment}}",
            )
        ],
        mappings=(),
        steps=(
            (None, "green"),
            (ALERTS.corruption_warning_ratio, "orange"),
            (ALERTS.corruption_critical_ratio, "red"),
        ),
        w=12,
        h=10,
    )

    b.row("Deployments and versions")
    b.table(
        "Deployments",
        "Per deployment (recording rules): pods, ranks with a footprint, over-committed ranks, "
        "pods without a working canary and without a working probe.",
        [
            target(dsel(N.pods), instant=True, fmt="table"),
            target(dsel(N.ranks), instant=True, fmt="table"),
            target(dsel(N.ranks_overcommitted), instant=True, fmt="table"),
            target(dsel(N.pods_without_canary), instant=True, fmt="table"),
            target(dsel(N.pods_without_probe), instant=True, fmt="table"),
        ],
        merge=True,
        hidden_columns=("Time", "__name__"),
        renames={
            "Value #A": "pods",
            "Value #B": "ranks",
            "Value #C": "over-committed ranks",
            "Value #D": "pods without canary",
            "Value #E": "pods without probe",
        },
        w=14,
        h=8,
    )
    b.table(
        "Pods per deployment and SGLang version",
        "How many pods of each deployment run each SGLang version: two versions in one "
        "deployment is a rollout in progress; compare their rows in the pods table.",
        [
            target(
                f"count by (namespace, deployment, version) ({psel('dsv4_sglang_info')})",
                instant=True,
                fmt="table",
            )
        ],
        hidden_columns=("Time",),
        renames={"Value": "pods"},
        w=10,
        h=8,
    )
    b.states(
        "Canary per pod",
        "The canary source of each pod over time (up green, down red).",
        [
            target(
                f"max without (source) ({psel('dsv4_source_up', eq(source='canary'))})",
                "{{namespace}}/{{pod}} {{instance}}",
            )
        ],
        mappings=up_down_mappings(),
        steps=((None, "red"), (1, "green")),
        w=24,
        h=8,
    )
    return b.build()
