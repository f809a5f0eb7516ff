"""Every metric a rule, a panel or a runbook queries is one the sidecar exports.

Two layers:

- ``EXPECTED`` mirrors the metric contract of issue 7 (names, kinds, labels) and is the
  allowlist: a name (or a label) that is not in it fails, which catches typos today.
- ``exporter.metrics.catalog.CATALOG`` is the source of truth once filled: every used name must
  be in it, with the same kind and labels, unless it is listed in ``PENDING``. A name in
  ``PENDING`` that the catalog already has fails too, so the set shrinks to empty as the
  sidecar lands and the check ends up strict against the catalog alone.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from dashboards.queries import iter_queries, load
from exporter.metrics.catalog import CATALOG
from tests.obs.conftest import RULE_FILE, RUNBOOKS
from tests.obs.promql import bare_metric_tokens, grouping_labels, recording_names, selectors

GPU = ("rank", "gpu", "uuid")
POOL = ("rank", "pool")

# name -> (kind, labels), exactly as the sidecar exports them (histograms by base name).
EXPECTED: dict[str, tuple[str, tuple[str, ...]]] = {
    # GPU / NVML
    "dsv4_gpu_memory_total_bytes": ("gauge", GPU),
    "dsv4_gpu_memory_used_bytes": ("gauge", GPU),
    "dsv4_gpu_memory_free_bytes": ("gauge", GPU),
    "dsv4_gpu_memory_reserved_bytes": ("gauge", GPU),
    "dsv4_gpu_info": ("info", (*GPU, "name", "pci_bus_id", "driver_version")),
    "dsv4_gpu_count": ("gauge", ()),
    "dsv4_nvml_up": ("gauge", ()),
    "dsv4_nvml_last_success_timestamp_seconds": ("gauge", ()),
    "dsv4_nvml_collect_duration_seconds": ("gauge", ()),
    "dsv4_nvml_errors_total": ("counter", ("error",)),
    # SGLang
    "dsv4_sglang_up": ("gauge", ()),
    "dsv4_sglang_last_success_timestamp_seconds": ("gauge", ()),
    "dsv4_sglang_errors_total": ("counter", ("reason",)),
    "dsv4_sglang_info": ("info", ("version", "model")),
    "dsv4_sglang_running_requests": ("gauge", ()),
    "dsv4_sglang_max_total_num_tokens": ("gauge", ()),
    "dsv4_sglang_hicache_host_used_tokens": ("gauge", ()),
    "dsv4_sglang_hicache_host_total_tokens": ("gauge", ()),
    # Footprint
    "dsv4_kv_pool_planned_bytes": ("gauge", POOL),
    "dsv4_kv_pool_allocated_bytes": ("gauge", POOL),
    "dsv4_kv_pool_overcommit_bytes": ("gauge", ("rank",)),
    "dsv4_kv_pool_tokens": ("gauge", POOL),
    "dsv4_kv_bytes_per_full_token": ("gauge", ("pricing",)),
    "dsv4_memory_reserve_bytes": ("gauge", ("rank",)),
    "dsv4_deployment_info": ("info", ("index_k_dtype", "configurator", "hicache", "model")),
    # Sampling: grading, canary, tap
    "dsv4_dsml_samples_total": ("counter", ("source", "verdict", "concurrency_le")),
    "dsv4_dsml_reasons_total": ("counter", ("source", "reason")),
    "dsv4_canary_requests_total": ("counter", ("result",)),
    "dsv4_canary_last_success_timestamp_seconds": ("gauge", ()),
    "dsv4_canary_latency_seconds": ("histogram", ()),
    "dsv4_tap_requests_total": ("counter", ("code",)),
    "dsv4_tap_inflight_requests": ("gauge", ()),
    "dsv4_tap_added_latency_seconds": ("histogram", ()),
    "dsv4_tap_sampled_total": ("counter", ()),
    "dsv4_tap_sampling_errors_total": ("counter", ("stage",)),
    # Probe
    "dsv4_probe_up": ("gauge", ("rank",)),
    "dsv4_probe_last_report_timestamp_seconds": ("gauge", ("rank",)),
    "dsv4_hicache_layer_loads_total": ("counter", ("rank",)),
    "dsv4_hicache_index_k_reads_total": ("counter", ("rank", "gated")),
    "dsv4_hicache_transfer_gap_seconds": ("histogram", ("rank",)),
    "dsv4_hicache_index_k_checksum_mismatches_total": ("counter", ("rank",)),
    # measured pool memory (probe) and model drift
    "dsv4_probe_pool_bytes": ("gauge", POOL),
    "dsv4_probe_pool_budget_bytes": ("gauge", ("rank",)),
    "dsv4_probe_overcommit_bytes": ("gauge", ("rank",)),
    "dsv4_probe_configurator_bytes_per_full_token": ("gauge", ("rank",)),
    "dsv4_probe_index_k_info": ("info", ("rank", "dtype", "layout", "bytes_per_slot")),
    "dsv4_footprint_model_drift_bytes": ("gauge", POOL),
    # Sidecar self
    "dsv4_source_up": ("gauge", ("source",)),
    "dsv4_sidecar_build_info": ("info", ("version", "python")),
}

# Not in exporter/metrics/catalog.py YET: the sidecar, sampling and probe work add them in
# parallel. The integrating engineer empties this set as they land; test_pending_is_current
# fails for any entry the catalog already has, so it cannot go stale.
PENDING: set[str] = set()

# Series Prometheus itself produces, with their labels (target labels added below).
PROMETHEUS_SERIES: dict[str, tuple[str, ...]] = {
    "up": (),
    "scrape_duration_seconds": (),
    "ALERTS": ("alertname", "alertstate", "severity", "risk"),
}
# Labels every scraped series carries (target labels) and the histogram bucket label.
TARGET_LABELS = ("job", "instance")
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def _runbook_promql() -> dict[str, str]:
    out = {}
    for page in sorted(RUNBOOKS.glob("DSV4*.md")):
        blocks = re.findall(r"```promql\n(.*?)```", page.read_text(), re.S)
        for i, block in enumerate(blocks):
            out[f"{page.name}#{i}"] = block.strip()
    return out


def used_expressions() -> dict[str, str]:
    """Every PromQL expression of the rules, the dashboards (targets and variable queries)
    and the runbooks, keyed by where it lives."""
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
    return exprs


def base_name(name: str) -> str:
    """Histogram series -> the histogram's name; anything else unchanged."""
    for suffix in HISTOGRAM_SUFFIXES:
        stem = name.removesuffix(suffix)
        if stem != name and EXPECTED.get(stem, ("",))[0] == "histogram":
            return stem
    return name


def used_selectors():
    for where, expr in used_expressions().items():
        for s in selectors(expr):
            yield where, s


def test_every_used_metric_is_expected() -> None:
    bad = [
        f"{where}: {s.metric}"
        for where, s in used_selectors()
        if s.metric not in PROMETHEUS_SERIES and base_name(s.metric) not in EXPECTED
    ]
    assert not bad, "unknown metric names:\n" + "\n".join(bad)


def test_histograms_and_counters_referenced_by_series_name() -> None:
    """A histogram is queried through _bucket/_sum/_count, never bare."""
    for where, s in used_selectors():
        kind = EXPECTED.get(s.metric, ("",))[0]
        assert kind != "histogram", f"{where}: {s.metric} without _bucket/_sum/_count"


def test_no_bare_metric_names() -> None:
    for where, expr in used_expressions().items():
        assert not bare_metric_tokens(expr), f"{where}: {bare_metric_tokens(expr)}"


def test_matcher_labels_exist() -> None:
    """Matchers only use labels the series has (a typo'd label silently matches nothing)."""
    for where, s in used_selectors():
        if s.metric in PROMETHEUS_SERIES:
            allowed = set(PROMETHEUS_SERIES[s.metric]) | set(TARGET_LABELS)
            if s.metric == "ALERTS":
                allowed |= {label for _, labels in EXPECTED.values() for label in labels}
        else:
            _, labels = EXPECTED[base_name(s.metric)]
            allowed = set(labels) | set(TARGET_LABELS) | {"le"}
        assert s.labels() <= allowed, f"{where}: {s.metric} {s.labels() - allowed}"


def test_grouping_labels_exist() -> None:
    known = {label for _, labels in EXPECTED.values() for label in labels}
    known |= set(TARGET_LABELS) | {"le"} | set(PROMETHEUS_SERIES["ALERTS"])
    for where, expr in used_expressions().items():
        assert grouping_labels(expr) <= known, f"{where}: {grouping_labels(expr) - known}"


def test_recording_names_are_defined() -> None:
    recorded = {
        r["record"]
        for g in yaml.safe_load(RULE_FILE.read_text())["groups"]
        for r in g["rules"]
        if "record" in r
    }
    for where, expr in used_expressions().items():
        assert recording_names(expr) <= recorded, f"{where}: {recording_names(expr) - recorded}"


def test_every_exported_metric_is_shown_somewhere() -> None:
    """The dashboards and rules cover the whole contract: nothing exported goes unwatched."""
    used = {base_name(s.metric) for _, s in used_selectors()}
    assert set(EXPECTED) - used == set()


def test_used_metrics_are_in_catalog_or_pending() -> None:
    missing = sorted(
        {
            base_name(s.metric)
            for _, s in used_selectors()
            if s.metric not in PROMETHEUS_SERIES
            and base_name(s.metric) not in CATALOG
            and base_name(s.metric) not in PENDING
        }
    )
    assert not missing, f"not in exporter.metrics.catalog.CATALOG (nor PENDING): {missing}"


def test_pending_is_current() -> None:
    """PENDING only lists names the catalog does not have yet, all from the contract."""
    landed = sorted(PENDING & set(CATALOG))
    assert not landed, f"now in the catalog, remove from PENDING: {landed}"
    assert set(EXPECTED) >= PENDING


@pytest.mark.parametrize("name", sorted(set(EXPECTED) & set(CATALOG)))
def test_catalog_agrees_with_contract(name: str) -> None:
    """Where the catalog has a name, its kind and label set are the ones the rules and panels
    were written against."""
    kind, labels = EXPECTED[name]
    spec = CATALOG[name]
    assert spec.kind == kind
    assert set(spec.labels) == set(labels)


# The helpers the checks above rely on, with cases they must reject.


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
    assert base_name("dsv4_hicache_transfer_gap_seconds_bucket") == (
        "dsv4_hicache_transfer_gap_seconds"
    )
    assert base_name("dsv4_gpu_count") == "dsv4_gpu_count"
    assert base_name("dsv4_tap_requests_total_count") == "dsv4_tap_requests_total_count"
