"""Every metric a rule, a panel, a runbook, the triage report or the demo queries is one the
sidecar exports, with the labels it exports.

``exporter.metrics.catalog.CATALOG`` is the only contract: there is no second list here. Each
check is a function returning its problems, run once on the repository's real expressions
(must find none) and once on a broken expression (must find it), so none of them can pass by
construction.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from alerts.fleet import KUBERNETES_LABELS
from dashboards.queries import iter_queries, load
from exporter.metrics.catalog import CATALOG, spec_for_series
from exporter.oncall.triage.collect import READINGS
from tests.obs.conftest import RULE_FILE, RUNBOOKS
from tests.obs.promql import (
    Selector,
    bare_metric_tokens,
    grouping_labels,
    recording_names,
    selectors,
)

# Series Prometheus itself produces, with their labels (target labels added below).
PROMETHEUS_SERIES: dict[str, tuple[str, ...]] = {
    "up": (),
    "scrape_duration_seconds": (),
    "ALERTS": ("alertname", "alertstate", "severity", "risk"),
}
# Labels every scraped series carries (target labels): job and instance, and the Kubernetes
# labels the fleet rules group by (the ServiceMonitor/PodMonitor relabelling adds them).
TARGET_LABELS = ("job", "instance", *KUBERNETES_LABELS)

# Exported names that no rule, panel or runbook shows, each with why. The test below fails
# when one of them becomes shown (remove it here) or when an unshown name is not listed.
UNWATCHED: dict[str, str] = {
    # Modelled, not yet measured on a GPU: shown in `plan` and /api/v1/footprint beside the
    # tensor bytes, kept off dashboards and alerts until `make gpu-check` proves the model
    # (docs/gpu-validation.md, docs/footprint.md).
    "dsv4_kv_pool_device_bytes": "modelled; awaits make gpu-check on hardware",
    "dsv4_kv_pool_device_overcommit_bytes": "modelled; awaits make gpu-check on hardware",
}


def _runbook_promql() -> dict[str, str]:
    out = {}
    for page in sorted(RUNBOOKS.glob("DSV4*.md")):
        blocks = re.findall(r"```promql\n(.*?)```", page.read_text(), re.S)
        for i, block in enumerate(blocks):
            out[f"{page.name}#{i}"] = block.strip()
    return out


def used_expressions() -> dict[str, str]:
    """Every PromQL expression of the rules, the dashboards (targets and variable queries),
    the runbooks and the triage evidence table, keyed by where it lives."""
    exprs: dict[str, str] = {}
    for g in yaml.safe_load(RULE_FILE.read_text())["groups"]:
        for r in g["rules"]:
            exprs[f"rules/{r.get('alert') or r.get('record')}/{len(exprs)}"] = r["expr"]
    for q in iter_queries():
        exprs[f"{q.dashboard}/{q.title} [{q.ref_id}]"] = q.expr
    for path in sorted(Path(RULE_FILE).parents[1].joinpath("dashboards").glob("*.json")):
        for v in load(path)["templating"]["list"]:
            if v["type"] == "query":
                exprs[f"{path.stem}/${v['name']}"] = v["query"]["query"]
    exprs.update(_runbook_promql())
    for reading in READINGS:
        exprs[f"triage/{reading.key}"] = reading.promql('job="dsv4-sidecar"', "30m")
    return exprs


def _selectors(exprs: dict[str, str]) -> Iterator[tuple[str, Selector]]:
    for where, expr in exprs.items():
        for s in selectors(expr):
            yield where, s


def _known(series: str) -> bool:
    try:
        spec_for_series(series)
    except KeyError:
        return False
    return True


def unknown_names(exprs: dict[str, str]) -> list[str]:
    return [
        f"{where}: {s.metric}"
        for where, s in _selectors(exprs)
        if s.metric not in PROMETHEUS_SERIES and ":" not in s.metric and not _known(s.metric)
    ]


def bare_histograms(exprs: dict[str, str]) -> list[str]:
    """A histogram is queried through _bucket/_sum/_count, never by its bare name."""
    return [
        f"{where}: {s.metric}"
        for where, s in _selectors(exprs)
        if s.metric in CATALOG and CATALOG[s.metric].kind == "histogram"
    ]


def bare_names(exprs: dict[str, str]) -> list[str]:
    return [
        f"{w}: {sorted(bare_metric_tokens(e))}" for w, e in exprs.items() if bare_metric_tokens(e)
    ]


def _all_labels() -> set[str]:
    return {label for spec in CATALOG.values() for label in spec.labels}


def unknown_matcher_labels(exprs: dict[str, str]) -> list[str]:
    """Matchers only use labels the series has (a typo'd label silently matches nothing)."""
    bad = []
    for where, s in _selectors(exprs):
        if s.metric in PROMETHEUS_SERIES:
            allowed = set(PROMETHEUS_SERIES[s.metric]) | set(TARGET_LABELS)
            if s.metric == "ALERTS":
                allowed |= _all_labels()
        elif _known(s.metric):
            spec = spec_for_series(s.metric)
            allowed = set(spec.labels) | set(TARGET_LABELS)
            if s.metric.endswith("_bucket"):
                allowed.add("le")
        else:
            continue  # reported by unknown_names
        if not s.labels() <= allowed:
            bad.append(f"{where}: {s.metric} {sorted(s.labels() - allowed)}")
    return bad


# The label a label_replace() in the same expression creates (its destination argument).
_LABEL_REPLACE_DST = re.compile(r'label_replace\(.*?,\s*"([a-zA-Z_][a-zA-Z0-9_]*)"', re.S)


def unknown_grouping_labels(exprs: dict[str, str]) -> list[str]:
    known = _all_labels() | set(TARGET_LABELS) | {"le"} | set(PROMETHEUS_SERIES["ALERTS"])
    out = []
    for where, e in exprs.items():
        unknown = grouping_labels(e) - known - set(_LABEL_REPLACE_DST.findall(e))
        if unknown:
            out.append(f"{where}: {sorted(unknown)}")
    return out


def _recorded() -> set[str]:
    return {
        r["record"]
        for g in yaml.safe_load(RULE_FILE.read_text())["groups"]
        for r in g["rules"]
        if "record" in r
    }


def undefined_recordings(exprs: dict[str, str]) -> list[str]:
    recorded = _recorded()
    return [
        f"{where}: {sorted(recording_names(e) - recorded)}"
        for where, e in exprs.items()
        if not recording_names(e) <= recorded
    ]


def shown(exprs: dict[str, str]) -> set[str]:
    return {spec_for_series(s.metric).name for _, s in _selectors(exprs) if _known(s.metric)}


CHECKS = (
    unknown_names,
    bare_histograms,
    bare_names,
    unknown_matcher_labels,
    unknown_grouping_labels,
    undefined_recordings,
)

# One broken expression per check: each must be reported by its check.
BROKEN = {
    unknown_names: 'dsv4_nvml_up{job="x"}',  # renamed to dsv4_source_up{source="nvml"}
    bare_histograms: 'dsv4_hicache_transfer_gap_seconds{job="x"}',
    bare_names: "dsv4_gpus_visible",
    unknown_matcher_labels: 'dsv4_source_up{job="x", error="timeout"}',
    unknown_grouping_labels: 'sum by (collector) (dsv4_source_up{job="x"})',
    undefined_recordings: 'instance_source:dsv4_nothing:ratio5m{job="x"}',
}


@pytest.fixture(scope="module")
def exprs() -> dict[str, str]:
    return used_expressions()


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_repository_expressions_pass(check, exprs: dict[str, str]) -> None:
    problems = check(exprs)
    assert not problems, f"{check.__name__}:\n" + "\n".join(problems)


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_each_check_catches_its_mistake(check, exprs: dict[str, str]) -> None:
    assert check({"broken": BROKEN[check]}), f"{check.__name__} missed {BROKEN[check]!r}"
    # ... also hidden among the real ones
    assert check({**exprs, "broken": BROKEN[check]})


def test_every_exported_metric_is_shown_somewhere(exprs: dict[str, str]) -> None:
    """The dashboards, rules and runbooks cover the whole catalog: nothing exported goes
    unwatched unless UNWATCHED says why, and UNWATCHED lists nothing that is shown."""
    unshown = set(CATALOG) - shown(exprs)
    assert unshown - set(UNWATCHED) == set(), "exported but never shown"
    assert set(UNWATCHED) - unshown == set(), "shown now: remove from UNWATCHED"


def test_health_is_one_family_per_source() -> None:
    """node_exporter style: source health only as dsv4_source_*{source}, one label name."""
    # Not poll health, so they stay: dsv4_footprint_up{reason} says *why* the footprint is not
    # computed; dsv4_probe_up{rank} and dsv4_probe_errors_total{rank} are per-rank states of
    # the in-process probe (exceptions inside SGLang, not failed polls by the sidecar).
    not_health = {"dsv4_footprint_up", "dsv4_probe_up", "dsv4_probe_errors_total"}
    per_source = [
        n
        for n in CATALOG
        if re.fullmatch(
            r"dsv4_(nvml|sglang|canary|footprint|probe)_(up|errors_total|last_succ.*)", n
        )
        and n not in not_health
    ]
    assert per_source == []
    health = [s for n, s in CATALOG.items() if n.startswith("dsv4_source_")]
    assert {s.name for s in health} == {
        "dsv4_source_up",
        "dsv4_source_errors_total",
        "dsv4_source_last_success_timestamp_seconds",
        "dsv4_source_poll_duration_seconds",
        "dsv4_source_samples_dropped_total",
    }
    assert all(s.labels[0] == "source" for s in health)


def test_spec_for_series_resolves_histogram_series_only() -> None:
    assert spec_for_series("dsv4_hicache_transfer_gap_seconds_bucket").name == (
        "dsv4_hicache_transfer_gap_seconds"
    )
    assert spec_for_series("dsv4_gpus_visible").name == "dsv4_gpus_visible"
    with pytest.raises(KeyError, match="catalog"):
        spec_for_series("dsv4_gpus_visible_sum")  # a gauge has no _sum series
    with pytest.raises(KeyError, match="catalog"):
        spec_for_series("dsv4_tap_requests_total_count")


def test_builders_reject_names_outside_the_catalog() -> None:
    """Rules and panels are built through sel(), which refuses an unknown name outright."""
    from alerts.config import AlertConfig
    from alerts.rules import Builder
    from dashboards.common import sel

    with pytest.raises(KeyError, match="dsv4_nvml_up"):
        sel("dsv4_nvml_up")
    with pytest.raises(KeyError, match="dsv4_sglang_up"):
        Builder(AlertConfig()).sel("dsv4_sglang_up")
    assert sel("dsv4_source_up").startswith("dsv4_source_up{")


def test_helpers_find_what_they_should() -> None:
    expr = (
        'sum by (le) (rate(dsv4_x_bucket{job=~"$job", rank!="1"}[5m]))'
        " / on (job) instance_source:dsv4_y:ratio30m + dsv4_bare"
    )
    [s] = selectors(expr)
    assert s.metric == "dsv4_x_bucket"
    assert s.labels() == {"job", "rank"}
    assert grouping_labels(expr) == {"le", "job"}
    assert recording_names(expr) == {"instance_source:dsv4_y:ratio30m"}
    assert bare_metric_tokens(expr) == {"dsv4_bare"}
