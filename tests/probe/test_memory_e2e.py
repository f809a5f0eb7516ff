"""Measured pool memory end to end: simulated SGLang 0.5.23 with the probe, the real sidecar,
Prometheus' promtool on the real rule file.

The simulator writes what the probe measures from its own ground truth (the release's pool at
SGLang's token count, the index-K dtype it really runs) and does not tell the sidecar. With the
facts the sidecar assumes matching the deployment (fp8), the probe's bytes per pool equal the
model's prediction and drift is 0. Beside a bf16 fork, the
probe reports ~4.3 GiB measured over-commit per rank; a sidecar told the wrong dtype (fp8)
drifts on c4_index_k only, and DSV4FootprintModelDrift fires on exactly that scraped value.
"""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import pytest
import yaml

from exporter.app import create_app
from exporter.config_loader import load_settings
from exporter.footprint.pools import BASE_POOLS as POOLS
from exporter.sim.server import create_sim_app
from exporter.sim.settings import SimSettings
from exporter.units import GIB
from tests.support import ServerThread, require, sample_value, scrape, wait_for

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
DRIFT_TEST = REPO / "alerts" / "tests" / "DSV4FootprintModelDrift.test.yaml"


def _scrape_with_memory(
    dtype: str, probe_dir: Path, pp_size: int = 1, told: str | None = None
) -> str:
    sim = create_sim_app(
        SimSettings(
            index_k_dtype=dtype,
            sglang_version="0.5.23",
            tp_size=2 // pp_size,
            pp_size=pp_size,
            probe_dir=probe_dir,
            seed=1,
        )
    )
    with ServerThread(sim) as s:
        sidecar = create_app(
            load_settings(
                {
                    "gpu_backend": "fake",
                    "canary": False,
                    "probe_dir": str(probe_dir),
                    "sglang_url": s.url,
                    **({"index_k_dtype": told} if told else {}),
                }
            )
        )
        with ServerThread(sidecar) as sc:

            def ready() -> str | None:
                t = scrape(sc.url)
                both = sample_value(t, "dsv4_footprint_model_drift_bytes", rank="1", pool="swa_kv")
                return t if both is not None else None

            return wait_for(ready)


@pytest.mark.parametrize("pp_size", [1, 2])
def test_measured_bytes_equal_the_model_on_a_matching_deployment(tmp_path, pp_size):
    """Also with two pipeline stages: each rank's probe measures its own stage's layers."""
    text = _scrape_with_memory("fp8", tmp_path, pp_size)
    for rank in ("0", "1"):
        for pool in POOLS:
            measured = sample_value(text, "dsv4_probe_pool_bytes", rank=rank, pool=pool)
            predicted = sample_value(text, "dsv4_kv_pool_allocated_bytes", rank=rank, pool=pool)
            assert measured is not None and measured > 0, (rank, pool)
            assert measured == predicted, (rank, pool)
            drift = sample_value(text, "dsv4_footprint_model_drift_bytes", rank=rank, pool=pool)
            assert drift == 0, (rank, pool)
    if pp_size == 2:  # the two stages hold different layer slices: different bytes
        first = sample_value(text, "dsv4_probe_pool_bytes", rank="0", pool="c4_index_k")
        assert first != sample_value(text, "dsv4_probe_pool_bytes", rank="1", pool="c4_index_k")
    assert sample_value(text, "dsv4_probe_index_k_info", rank="0", dtype="fp8") == 1
    assert sample_value(text, "dsv4_probe_pool_budget_bytes", rank="0") == 50 * GIB
    # page padding only, on the rank that set the token count (SGLang takes the minimum over
    # stages: the other stage allocates less than its budget)
    over = max(sample_value(text, "dsv4_probe_overcommit_bytes", rank=r) or -GIB for r in "01")
    assert 0 <= over < 0.05 * GIB


def test_wrong_model_drifts_and_the_alert_fires(tmp_path):
    # told fp8 (a configured fact outranks the probe's: told nothing, the sidecar would take
    # the probe's bf16 and agree, tests/sidecar/test_memory_truth_e2e.py) ...
    text = _scrape_with_memory("bf16", tmp_path, told="fp8")
    assert sample_value(text, "dsv4_deployment_info", index_k_dtype="fp8") == 1
    # ... the probe measured bf16 and the real over-commit
    assert sample_value(text, "dsv4_probe_index_k_info", rank="0", dtype="bf16") == 1
    measured_over = sample_value(text, "dsv4_probe_overcommit_bytes", rank="0")
    assert measured_over is not None and 4.2 * GIB < measured_over < 4.5 * GIB
    model_over = sample_value(text, "dsv4_kv_pool_overcommit_bytes", rank="0")
    assert model_over is not None and model_over < 0.5 * GIB
    drift = {
        pool: sample_value(text, "dsv4_footprint_model_drift_bytes", rank="0", pool=pool)
        for pool in POOLS
    }
    assert {p for p, d in drift.items() if d != 0} == {"c4_index_k"}
    assert drift["c4_index_k"] < -4 * GIB
    # the promtool test of the alert uses this very value
    assert str(int(drift["c4_index_k"])) in DRIFT_TEST.read_text()
    _promtool_fires(tmp_path, int(drift["c4_index_k"]))


SERIES = 'dsv4_footprint_model_drift_bytes{{job="dsv4-sidecar", rank="0", pool="c4_index_k"}}'
ALERT = (
    'ALERTS{{alertname="DSV4FootprintModelDrift", alertstate="{state}", severity="warning", '
    'job="dsv4-sidecar", rank="0", pool="c4_index_k"}}'
)


def _promtool_fires(tmp_path: Path, drift: int) -> None:
    promtool = require("promtool")
    rules = REPO / "alerts" / "dsv4-sidecar.rules.yaml"
    groups = [g["name"] for g in yaml.safe_load(rules.read_text())["groups"]]
    test = tmp_path / "drift.test.yaml"
    test.write_text(
        textwrap.dedent(
            f"""\
            rule_files: [{rules}]
            group_eval_order: {groups}
            evaluation_interval: 1m
            tests:
              - interval: 1m
                input_series:
                  - series: '{SERIES.format()}'
                    values: '{drift}x20'
                promql_expr_test:
                  - expr: ALERTS{{alertname="DSV4FootprintModelDrift"}}
                    eval_time: 14m
                    exp_samples:
                      - labels: '{ALERT.format(state="pending")}'
                        value: 1
                  - expr: ALERTS{{alertname="DSV4FootprintModelDrift"}}
                    eval_time: 16m
                    exp_samples:
                      - labels: '{ALERT.format(state="firing")}'
                        value: 1
            """
        )
    )
    res = subprocess.run(
        [promtool, "test", "rules", str(test)], capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stdout + res.stderr
