"""`triage` against a real Prometheus and real sidecars beside simulated SGLangs, in three
scenarios: over-commit only, the index-K transfer race, and a clean deployment.

One Prometheus scrapes the three sidecars (1 s interval); triage narrows to each with an
``instance`` selector, as an on-call does for one node.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

import pytest

from exporter.cli import main
from exporter.oncall.triage.collect import CollectOptions
from exporter.oncall.triage.diagnosis import ARTEFACT, OVERCOMMIT, RACE, RULED_OUT, UNRELATED
from exporter.oncall.triage.report import write_report
from tests.oncall.scenarios import (
    SAMPLES_TOKEN,
    drive_all,
    start_stack,
    wait_counted,
    wait_scraping,
)
from tests.support import prometheus, require

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[2]
RULES_FILE = REPO / "alerts" / "dsv4-sidecar.rules.yaml"
SCREENSHOT = REPO / "docs" / "img" / "triage-report.png"


@pytest.fixture(scope="module")
def deployed():
    with contextlib.ExitStack() as es:
        stacks = {n: es.enter_context(start_stack(n)) for n in ("overcommit", "race", "clean")}
        prom = es.enter_context(prometheus([s.instance for s in stacks.values()], [RULES_FILE]))
        wait_scraping(prom, list(stacks.values()))
        drive_all(list(stacks.values()))
        wait_counted(prom, list(stacks.values()))
        yield prom, stacks


def _triage(prom: str, stack, out: Path, **kw):
    opts = CollectOptions(
        sidecar_url=stack.sidecar.url,
        prometheus_url=prom,
        selector=f'job="dsv4-sidecar", instance="{stack.instance}"',
        window_s=300,
        step_s=1,
        rate_window_s=5,
        samples_token=SAMPLES_TOKEN,
        **kw,
    )
    return write_report(opts, out)


def test_overcommit_only(deployed, tmp_path):
    prom, stacks = deployed
    result = _triage(prom, stacks["overcommit"], tmp_path)
    diag = result.diagnosis
    assert diag.supported == [OVERCOMMIT]
    assert diag.cause(OVERCOMMIT).rule == "O1"
    assert diag.cause(RACE).rule == "R1"  # HiCache off
    assert diag.cause(UNRELATED).rule == "U2" and diag.cause(ARTEFACT).rule == "A5"
    assert "c4_index_k unpriced" in diag.headline
    assert diag.headline.endswith("mitigate: deploy the fixed configurator")
    ev = result.evidence
    assert ev.corruption is not None and ev.corruption.graded >= stacks["overcommit"].graded
    assert "Prometheus" in ev.corruption.source and not ev.notes
    assert len(ev.series.overcommit) == 4 and ev.series.overcommit[0].points


def test_transfer_race(deployed, tmp_path):
    prom, stacks = deployed
    result = _triage(prom, stacks["race"], tmp_path)
    diag = result.diagnosis
    assert diag.supported == [RACE, OVERCOMMIT]
    assert diag.cause(RACE).rule == "R2"
    assert diag.cause(UNRELATED).status == RULED_OUT
    assert diag.cause(ARTEFACT).status == RULED_OUT
    h = diag.headline
    assert h.startswith("bf16 index-K + HiCache (legacy configurator): corruption rises with")
    assert "ungated index-K reads present" in h
    assert h.endswith("mitigate: HiCache off or fp8 index-K; deploy the fixed configurator")
    ev = result.evidence
    assert ev.index_k.ungated > 0 and ev.index_k.gated == 0 and ev.index_k.probe_up == 4
    assert ev.index_k.gap_buckets and ev.samples  # per-sample reasons via the token
    html = result.html_path.read_text()
    assert html.count("<svg") >= 5 and "Index-K transfer race" in html
    assert "<script" not in html and "<link" not in html and 'src="http' not in html
    md = result.md_path.read_text()
    assert md.startswith("# DSV4 triage report\n\n**Diagnosis:** bf16 index-K + HiCache")
    assert "### Index-K transfer race (HiCache): SUPPORTED (rule R2)" in md
    assert "1. Disable HiCache" in md
    doc = json.loads(result.evidence_path.read_text())
    assert doc["diagnosis"]["supported"] == [RACE, OVERCOMMIT]


def test_race_report_renders_in_chromium(deployed, tmp_path):
    """Needs Chromium (tests.support.require: `make deb-test` installs it; a skip locally
    without it, a failure in CI); DSV4_UPDATE_SCREENSHOT=1 also refreshes the committed docs
    image."""
    binary = require("chromium", "chromium-browser")
    prom, stacks = deployed
    html = _triage(prom, stacks["race"], tmp_path).html_path
    png = html.with_suffix(".png")
    with tempfile.TemporaryDirectory(prefix="dsv4-chromium-") as profile:
        subprocess.run(
            [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", f"--user-data-dir={profile}", f"--screenshot={png}",
             "--window-size=1280,2000", html.as_uri()],
            check=True, capture_output=True, timeout=90,
        )  # fmt: skip
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (1280, 2000) and len(data) > 50_000  # not a blank page
    if os.environ.get("DSV4_UPDATE_SCREENSHOT"):
        SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(png, SCREENSHOT)


def test_clean(deployed, tmp_path, capsys):
    prom, stacks = deployed
    s = stacks["clean"]
    rc = main(
        ["triage", "--sidecar", s.sidecar.url, "--prometheus", prom, "--selector",
         f'instance="{s.instance}"', "--window", "5m", "--step", "1s", "--rate-window", "5s",
         "--out", str(tmp_path), "--json", "--no-plots"]
    )  # fmt: skip
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["diagnosis"]["supported"] == []
    assert {c["cause"]: c["status"] for c in doc["diagnosis"]["causes"]} == dict.fromkeys(
        (RACE, OVERCOMMIT, UNRELATED, ARTEFACT), RULED_OUT
    )
    assert "no known cause supported" in doc["diagnosis"]["headline"]
    assert (tmp_path / "triage.html").exists() and (tmp_path / "triage.md").exists()


def test_race_from_sidecar_alone_with_repro_and_scan(deployed, tmp_path):
    """No Prometheus: counts since the sidecar started, from its /metrics; plus a repro
    result and its sample file, graded offline."""
    _prom, stacks = deployed
    s = stacks["race"]
    rc = main(
        ["repro", s.sim.url, "--concurrency", "1,32", "--requests", "30", "--json", "--quiet",
         "--out", str(tmp_path / "run")]
    )  # fmt: skip
    assert rc == 0
    result = write_report(
        CollectOptions(
            sidecar_url=s.sidecar.url,
            repro_path=tmp_path / "run",
            scan_paths=[tmp_path / "run" / "samples.jsonl"],
        ),
        tmp_path / "report",
    )
    ev = result.evidence
    assert ev.corruption is not None and "since it started" in ev.corruption.source
    assert ev.scan is not None and ev.scan.lines == 60 and ev.scan.unreadable == 0
    # the repro's own samples (`triage --help`'s example): counted once, by the repro result
    assert ev.scan.in_repro == 60 and sum(b.graded for b in ev.scan.buckets) == 0
    repro_graded = sum(lv["requests"] for a in ev.repro["arms"] for lv in a["levels"])
    corruption_graded = ev.corruption.graded if ev.corruption is not None else 0
    assert result.diagnosis.facts.graded == repro_graded + corruption_graded
    assert ev.repro is not None
    assert any("no samples token" in n for n in ev.notes)
    assert result.diagnosis.cause(RACE).rule == "R2"
    assert "Repro result" in result.md_path.read_text()
