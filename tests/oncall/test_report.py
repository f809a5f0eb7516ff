"""Report rendering, sample files, and the small parsers behind triage (no servers)."""

from __future__ import annotations

import json
import math
import sys

import pytest

from exporter.cli import main
from exporter.oncall.samples import SampleWriter, completion_object, grade_line, read_graded
from exporter.oncall.triage import plots
from exporter.oncall.triage.diagnosis import GIB
from exporter.oncall.triage.evidence import (
    BucketCount,
    Corruption,
    Deployment,
    Evidence,
    IndexK,
    RankMemory,
    corruption_from_counts,
)
from exporter.oncall.triage.http import parse_duration
from exporter.oncall.triage.report import render
from exporter.oncall.triage.report_html import NO_PLOTS
from exporter.oncall.triage.report_md import table_md
from exporter.oncall.triage.sections import Table, histogram_quantile, reason_lines
from exporter.sim.generation import DSML, dsml_block
from tests.support import dead_url

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]


def _evidence() -> Evidence:
    ev = Evidence(end=1_700_000_000.0, window_s=1800)
    ev.deployment = Deployment("bf16", "legacy", True, "deepseek-v4-flash", source="test")
    ev.ranks = [RankMemory("0", 4.3 * GIB, 16.8 * GIB, 12 * GIB, 140 * GIB)]
    ev.corruption = Corruption(
        "test", [BucketCount("1", 100, 0), BucketCount("64", 100, 20)], reasons={"a|b": 3}
    )
    ev.index_k = IndexK(
        "test", 4, 4, 0.0, 500.0, 500.0, gap_buckets=[(0.0, 0.0), (1e-4, 300.0), (math.inf, 500.0)]
    )
    return ev


def test_html_without_matplotlib(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if the extra were not installed
    assert not plots.available()
    diag, html, md, keys, note = render(_evidence())
    assert keys == [] and note == NO_PLOTS
    assert "<svg" not in html and "pip install &#x27;dsv4-sidecar[report]&#x27;" in html
    assert diag.supported and "Corruption rate" not in html
    assert "| 64 | 100 | 20 |" not in md  # labels are "<= 64"
    assert "| <= 64 | 100 | 20 | 0 | 20.0% |" in md


def test_html_with_plots_is_self_contained():
    diag, html, _md, keys, note = render(_evidence())
    assert note == "" and {"corruption_vs_concurrency", "overcommit", "gap_histogram"} <= set(keys)
    assert html.count("<svg") == len(keys)
    assert "<?xml" not in html and "<script" not in html and "<link" not in html
    assert html.startswith("<!doctype html>") and diag.headline.split(":")[0] in html


def test_evidence_json_is_strict():
    doc = _evidence().to_json()
    text = json.dumps(doc, allow_nan=False)  # raises on Infinity / NaN
    assert json.loads(text)["index_k"]["gap_buckets"][-1] == ["+Inf", 500.0]


def test_markdown_escapes_table_cells():
    lines = table_md(Table(["a", "b"], [["x|y", "line\nbreak"]]))
    assert lines[2] == "| x\\|y | line break |"


def test_quantile_and_duration_parsers():
    buckets = [(0.0, 0.0), (1e-4, 300.0), (1e-3, 400.0), (math.inf, 500.0)]
    assert histogram_quantile(0.5, buckets) == pytest.approx(1e-4 * 250 / 300)
    assert histogram_quantile(0.99, buckets) == 1e-3  # in the +Inf bucket: the last bound
    assert histogram_quantile(0.5, []) is None
    assert parse_duration("90s") == 90 and parse_duration("1h30m") == 5400
    assert parse_duration("2.5") == 2.5 and parse_duration("500ms") == 0.5
    for bad in ("", "5 minutes", "0s", "-3", "nan", "1x"):
        with pytest.raises(ValueError):
            parse_duration(bad)


def test_corruption_counts_round_and_skip_error_verdicts():
    c = corruption_from_counts(
        "t",
        [
            ({"source": "ingest", "concurrency_le": "64", "verdict": "degenerate"}, 4.4),
            ({"source": "ingest", "concurrency_le": "64", "verdict": "well_formed"}, 10.6),
            ({"source": "canary", "concurrency_le": "1", "verdict": "suspect"}, 2.0),
            ({"source": "canary", "concurrency_le": "1", "verdict": "error"}, 7.0),
        ],
        {"orphan_closer": 4.4},
    )
    assert [(b.le, b.graded, b.degenerate, b.suspect) for b in c.buckets] == [
        ("1", 2, 0, 2),
        ("64", 15, 4, 0),
    ]
    assert c.by_source == {
        "ingest": {"graded": 15, "degenerate": 4},
        "canary": {"graded": 2, "degenerate": 0},
    }
    assert corruption_from_counts("t", [], {}) is None


def test_sample_file_shapes_and_redaction(tmp_path):
    good = "ok</think>" + dsml_block([("get_weather", {"city": "Lisbon"})])
    secret = "mail ops@example.com key sk-abcdefghijklmnopqrstuvwx"
    completion = {
        "id": "x",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Sure. " + secret},
                "finish_reason": "stop",
            }
        ],
    }
    chunks = [
        {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "hi "}}]},
        {
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {"content": secret}, "finish_reason": "stop"}],
        },
    ]
    writer = SampleWriter(tmp_path)
    assert writer.write(completion, tools=TOOLS, grammar="v4", meta={"arm": "a", "concurrency": 3})
    assert writer.write(chunks, tools=TOOLS, grammar="v4", meta={"arm": "b"})
    assert not writer.write("not a response", tools=None, grammar="v4", meta={})
    writer.close()
    text = (tmp_path / "samples.jsonl").read_text()
    assert "ops@example.com" not in text and "sk-abc" not in text and "[REDACTED]" in text
    first, second = (json.loads(x) for x in text.splitlines())
    assert first["arm"] == "a" and first["concurrency"] == 3 and first["tools"] == TOOLS
    assert second["response"]["choices"][0]["message"]["content"].startswith("hi ")
    assert completion_object(chunks)["choices"][0]["finish_reason"] == "stop"
    # every shape scan reads, plus junk
    damaged = good.replace("tool_calls>", "toolcalls>", 1)
    with (tmp_path / "mixed.jsonl").open("w") as fh:
        fh.write(json.dumps({"text": good, "grammar": "v4", "tools": TOOLS}) + "\n")
        fh.write(json.dumps({"text": damaged, "concurrency": 64}) + "\n")
        fh.write(json.dumps(completion) + "\n")
        fh.write("{not json\n\n")
        fh.write(json.dumps({"neither": 1}) + "\n")
    graded = list(read_graded(tmp_path / "mixed.jsonl"))
    assert [g.verdict if g else None for g in graded] == [
        "well_formed",
        "degenerate",
        "no_tool_call",
        None,
        None,
    ]
    assert graded[1].concurrency == 64 and f"<{DSML}toolcalls>" in damaged
    assert grade_line(["a list"]) is None


def test_triage_usage_errors(capsys, tmp_path):
    cases = [
        ([], "give at least one of --sidecar"),
        (["--sidecar", "localhost:9400"], "--sidecar must be an http"),
        (["--prometheus", "http://p:9090", "--window", "soon"], "not a duration"),
        (["--scan", str(tmp_path / "missing.jsonl")], "does not exist"),
        (["--prometheus", "http://p:9090", "--end", "yesterday"], "--end must be unix"),
        (["--prometheus", "http://p:9090", "--window", "30d", "--step", "1s"], "--step too small"),
    ]
    for argv, message in cases:
        assert main(["triage", *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("dsv4-sidecar triage: error:") and message in err, err


def test_triage_with_nothing_answering(capsys, tmp_path):
    dead = dead_url()
    rc = main(
        ["triage", "--sidecar", dead, "--prometheus", dead, "--timeout", "2", "--out",
         str(tmp_path), "--no-plots"]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 1
    assert "deployment unknown: no known cause supported" in out
    assert "note: GET " in out
    md = (tmp_path / "triage.md").read_text()
    assert "## Collection notes" in md and "from nothing (see notes)" in md


def test_triage_readings_come_from_the_catalog():
    """A renamed metric must not silently turn triage evidence into "no data": every number
    triage reads is a row of one table naming a catalog spec, rendered for both paths."""
    from exporter.metrics.catalog import CATALOG, spec_for_series
    from exporter.oncall.triage.collect import READINGS

    assert len(READINGS) >= 20
    for r in READINGS:
        assert CATALOG[r.spec.name] is r.spec
        assert spec_for_series(r.name) is r.spec
        assert r.name in r.promql('job="x"', "5m")


def test_both_paths_read_the_same_table():
    """The scrape path aggregates exactly as the PromQL says (sum/max/min by the same labels,
    the same matchers); windowed readings are totals since start in a scrape."""
    from exporter.oncall.triage.collect import READINGS

    by_key = {r.key: r for r in READINGS}
    scrape = {
        "dsv4_hicache_index_k_reads_total": [
            ({"rank": "0", "gated": "false"}, 3.0),
            ({"rank": "1", "gated": "false"}, 4.0),
            ({"rank": "1", "gated": "true"}, 50.0),
        ],
        "dsv4_gpu_memory_free_bytes": [
            ({"rank": "0", "gpu": "0", "uuid": "a"}, 5.0),
            ({"rank": "0", "gpu": "1", "uuid": "b"}, 2.0),
        ],
    }
    assert by_key["ungated_total"].promql("", "5m") == (
        'sum(dsv4_hicache_index_k_reads_total{gated="false"})'
    )
    assert by_key["ungated_total"].from_scrape(scrape) == [({}, 7.0)]
    assert sorted(by_key["index_k_reads"].from_scrape(scrape), key=str) == [
        ({"gated": "false"}, 7.0),
        ({"gated": "true"}, 50.0),
    ]
    assert by_key["index_k_reads"].promql('job="j"', "5m") == (
        'sum by (gated) (increase(dsv4_hicache_index_k_reads_total{job="j"}[5m]))'
    )
    assert by_key["gpu_free"].from_scrape(scrape) == [({"rank": "0"}, 2.0)]
    assert by_key["gpu_free_min"].from_scrape(scrape) == []  # needs history: Prometheus only


def test_rules_doc_block_is_generated_and_current():
    from pathlib import Path

    from exporter.oncall.triage import rules_doc

    doc = Path("docs/oncall.md").read_text()
    assert rules_doc.render(doc) == doc  # `make docs` was run
    assert "| R2 | Index-K transfer race (HiCache) | supported |" in doc
    with pytest.raises(ValueError):
        rules_doc.render("no markers here")


def test_report_shows_corruption_by_length_finish_reasons_and_length_drift():
    """Issue 26: from a sidecar's /metrics, the corruption section splits by output length,
    lists finish reasons by verdict and the p50 output tokens."""
    from exporter.oncall.triage.collect import _from_exposition
    from exporter.oncall.triage.diagnosis import diagnose
    from exporter.oncall.triage.report_md import render_markdown
    from exporter.samplers.decode import GradingRequest, ResponseOutput
    from exporter.samplers.grading import GradingPipeline
    from tests.sampling.test_pipeline import _text

    p = GradingPipeline()
    for i in range(6):
        body = {
            "choices": [
                {"index": 0, "message": {"content": f"Answer {i}."}, "finish_reason": "stop"}
            ],
            "usage": {"completion_tokens": 100 + i},
        }
        p.grade_now(GradingRequest("tap", ResponseOutput(body), concurrency=4))
    loop = "The same paragraph again, word for word, until the budget runs out. " * 40
    long = {
        "choices": [{"index": 0, "message": {"content": loop}, "finish_reason": "length"}],
        "usage": {"completion_tokens": 9000},
    }
    p.grade_now(GradingRequest("tap", ResponseOutput(long), concurrency=64))
    ev = Evidence()
    _from_exposition(ev, _text(p), now=0.0)
    assert ev.corruption is not None
    by_len = {b.le: (b.graded, b.degenerate) for b in ev.corruption.by_length}
    assert by_len == {"256": (6, 0), "16384": (1, 1)}
    assert ev.corruption.finish_reasons == {
        "stop": {"no_tool_call": 6},
        "length": {"degenerate": 1},
    }
    assert ev.corruption.output_tokens_p50 is not None and ev.corruption.output_tokens_p50 <= 256
    md = render_markdown(ev, diagnose(ev))
    assert "| output tokens |" in md and "<= 16384" in md
    assert "finish reason" in md and "p50 output tokens" in md


def test_triage_takes_the_sites_alert_thresholds(capsys, tmp_path):
    """--alert-config (the alerts' own YAML overrides) moves triage's thresholds with the
    alerts': 5 clean outputs are too few at the default corruption_min_samples, enough at 5."""
    scan = tmp_path / "clean.jsonl"
    scan.write_text(
        "".join(json.dumps({"text": f"Plain answer number {i}."}) + "\n" for i in range(5))
    )
    site = tmp_path / "site.yaml"
    site.write_text("corruption_min_samples: 5\n")
    base = ["triage", "--scan", str(scan), "--no-plots", "--json"]
    assert main([*base, "--out", str(tmp_path / "a")]) == 0
    default = json.loads(capsys.readouterr().out)["diagnosis"]["causes"]
    assert main([*base, "--out", str(tmp_path / "b"), "--alert-config", str(site)]) == 0
    moved = json.loads(capsys.readouterr().out)["diagnosis"]["causes"]
    rule = {c["cause"]: c["rule"] for c in default}, {c["cause"]: c["rule"] for c in moved}
    assert rule[0]["unrelated_degeneration"] == "U8"
    assert rule[1]["unrelated_degeneration"] == "U2"
    assert any("at least 5 outputs graded" in c["rule_text"] for c in moved)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("corruption_min_sample: 5\n", "unknown alert config keys: corruption_min_sample"),
        ("corruption_min_samples: many\n", "corruption_min_samples: expected int"),
        ("- a list\n", "expected a mapping"),
        ("a: [\n", "not valid YAML"),
    ],
)
def test_triage_refuses_a_bad_alert_config(capsys, tmp_path, text, message):
    site = tmp_path / "site.yaml"
    site.write_text(text)
    assert main(["triage", "--scan", str(site), "--alert-config", str(site)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dsv4-sidecar triage: error: --alert-config") and message in err, err


def test_signals_are_shown_apart_from_the_reasons():
    """Issue 32: a counted signal (cut_under_stop, repeated_call) never moves a verdict, so
    triage lists it on its own line, not among the reasons of bad outputs."""
    lines = reason_lines(
        {"cut_under_stop": 40, "ngram_loop": 3, "repeated_call": 2, "oversized": 0}
    )
    assert lines[0] == "Top reasons: ngram_loop 3."
    assert lines[1].startswith("Signals (counted, never a verdict")
    assert "cut_under_stop 40, repeated_call 2" in lines[1]
    assert reason_lines({}) == []
