"""The fleet's cardinality budget: series one sidecar pod exports, per catalog area.

Prometheus' memory and rule-evaluation time grow with series, and a fleet multiplies every
per-pod series by hundreds (bench/bench_fleet.py measures Prometheus at 50 and 200 pods).
The budget is for the worst pod the simulator can be: TP 8 (one rank per GPU), bf16 index-K
with HiCache on, the probe on every rank, the tap and the canary on. It is documented in
docs/fleet.md; a change that adds series beyond it fails here, so raising it is a decision
(update the table, docs/fleet.md and re-run the bench), never an accident.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from exporter.metrics.catalog import CATALOG, spec_for_series
from tests.obs.fleet_pod import capture_pod, series_by_family

pytestmark = pytest.mark.e2e

# Series per pod (TP 8, worst configuration) by catalog area; measured 1206 in all when set
# (probe 552, dsml 277, footprint 221, tap 44, sidecar 41, gpu 41, canary 18, sglang 6,
# hicache 6), each with headroom for a few more label values. Issue 26 added length as a
# dimension (dsml 278 -> 484: length samples 90, output-tokens histogram 56, finish reasons 30,
# tokens counted 3, 9 more reasons x 3 sources), a decision recorded in docs/fleet.md.
BUDGET_BY_AREA: dict[str, int] = {
    "probe": 600,
    "dsml": 540,
    "footprint": 300,
    # issue 31: dsv4_tap_build_info{relay} (1)
    "tap": 61,
    # issue 36: each source's declared error reasons zero-initialised (probe 6, internal_error)
    "sidecar": 65,
    "gpu": 50,
    "canary": 25,
    "sglang": 100,
    "hicache": 10,
    # issue 27: dsv4_engine_info beside SGLang (1); beside vLLM that and vLLM's 6 (info,
    # running, waiting, KV usage, KV capacity, cache config), none per rank
    "engine": 10,
}
BUDGET_TOTAL = 1650
TP_SIZE = 8


def by_area(families: Counter[str]) -> Counter[str]:
    out: Counter[str] = Counter()
    for name, n in families.items():
        out[spec_for_series(name).area] += n
    return out


def over_budget(families: Counter[str]) -> list[str]:
    """What exceeds the budget, phrased with the biggest families of the offending area."""
    problems = []
    areas = by_area(families)
    for area, n in sorted(areas.items()):
        limit = BUDGET_BY_AREA.get(area)
        if limit is None:
            problems.append(f"area {area!r} ({n} series) has no budget: add one")
        elif n > limit:
            top = [
                f"{k}={v}" for k, v in families.most_common() if spec_for_series(k).area == area
            ][:3]
            problems.append(f"area {area!r}: {n} series > budget {limit} ({', '.join(top)})")
    total = sum(families.values())
    if total > BUDGET_TOTAL:
        problems.append(f"{total} series per pod > budget {BUDGET_TOTAL}")
    return problems


@pytest.fixture(scope="module")
def worst_pod(tmp_path_factory: pytest.TempPathFactory) -> Counter[str]:
    text = capture_pod(tmp_path_factory.mktemp("pod"), tp_size=TP_SIZE)
    return series_by_family(text)


def test_worst_pod_is_within_the_budget(worst_pod: Counter[str]) -> None:
    assert sum(worst_pod.values()) > 1000, "the capture missed sources: not the worst pod"
    assert by_area(worst_pod).keys() == BUDGET_BY_AREA.keys(), "every area exported"
    assert over_budget(worst_pod) == []


def test_budget_check_catches_a_new_label_value_per_rank(worst_pod: Counter[str]) -> None:
    """One more probe label value on every rank's hooks (8 x 20 series) breaks the budget."""
    grown = worst_pod.copy()
    grown["dsv4_probe_hook_installed"] += 20 * TP_SIZE
    assert any("probe" in p for p in over_budget(grown))


def test_every_catalog_area_has_a_budget() -> None:
    assert {s.area for s in CATALOG.values()} <= set(BUDGET_BY_AREA)


def test_series_by_family_counts_samples_not_comments(tmp_path: Path) -> None:
    text = (
        "# HELP dsv4_gpus_visible x\n# TYPE dsv4_gpus_visible gauge\ndsv4_gpus_visible 8.0\n"
        'dsv4_source_up{source="nvml"} 1.0\ndsv4_source_up{source="sglang"} 0.0\n'
    )
    assert series_by_family(text) == Counter({"dsv4_gpus_visible": 1, "dsv4_source_up": 2})
