"""`repro` against the simulator: what it measures is exactly what the simulator did."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from exporter.cli import main
from exporter.oncall.repro import ReproRunner
from exporter.oncall.repro_report import Arm, LevelResult, ReproReport, level_trend
from exporter.oncall.samples import SampleWriter, grade_line, read_graded
from exporter.sim.server import create_sim_app
from exporter.sim.settings import SimSettings
from exporter.stats import fisher_exact
from tests.support import ServerThread, dead_url

pytestmark = pytest.mark.e2e


def _sim(dtype: str, hicache: str, seed: int, ttft_ms: float = 10) -> ServerThread:
    settings = SimSettings(
        index_k_dtype=dtype, hicache=hicache, ttft_ms=ttft_ms, itl_ms=0, seed=seed
    )
    return ServerThread(create_sim_app(settings))


def _truth(url: str) -> tuple[int, int]:
    truth = httpx.get(url + "/_sim/stats", timeout=5).json()["truth"]
    return (
        sum(v["requests"] for v in truth.values()),
        sum(v["degenerate"] for v in truth.values()),
    )


def test_ab_corrupting_vs_clean_matches_ground_truth(tmp_path, capsys):
    with _sim("fp8", "on", 1) as clean, _sim("bf16", "on", 2) as racy:
        snapshots: list[list[tuple[int, int]]] = []
        runner = ReproRunner(
            [Arm("fp8 index-K", clean.url), Arm("bf16 index-K", racy.url)],
            (1, 32, 64),
            requests=100,
            timeout=30,
            writer=SampleWriter(tmp_path),
            on_level_end=lambda _i, _c: snapshots.append([_truth(clean.url), _truth(racy.url)]),
        )
        report = asyncio.run(runner.run())
    assert not report.interrupted
    # per level and arm: graded answers and degenerate ones equal the simulator's own counts
    previous = [(0, 0), (0, 0)]
    for li, snap in enumerate(snapshots):
        for ai, arm in enumerate(report.arms):
            lv = arm.levels[li]
            assert lv.errors == 0
            assert (lv.requests, lv.degenerate) == (
                snap[ai][0] - previous[ai][0],
                snap[ai][1] - previous[ai][1],
            )
        previous = snap
    fp8, bf16 = report.arms
    assert fp8.degenerate == 0 and fp8.requests == 300
    assert bf16.levels[0].degenerate == 0  # the model gives 0 at one session
    assert bf16.degenerate > 0
    cmp = report.comparison
    assert cmp is not None and cmp.significant
    truth_bad = snapshots[-1][1][1]
    assert cmp.p_value == pytest.approx(fisher_exact(0, 300, truth_bad, 300))
    doc = report.to_json()
    assert doc["comparison"]["significant"] is True
    assert doc["comparison"]["summary"].startswith(
        f"fp8 index-K 0/300 vs bf16 index-K {truth_bad}/300"
    )
    lv = doc["arms"][1]["levels"][2]
    assert lv["ci_low"] <= lv["rate"] <= lv["ci_high"] and lv["concurrency"] == 64
    # every graded answer kept, re-gradable offline with the same verdict
    lines = [json.loads(x) for x in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert len(lines) == 600
    assert sum(1 for x in lines if x["verdict"] == "degenerate") == truth_bad
    for line in lines[::7]:
        assert grade_line(line).verdict == line["verdict"]
        assert {"arm", "concurrency", "level", "tools", "grammar", "response"} <= set(line)
    regraded = [g for g in read_graded(tmp_path / "samples.jsonl") if g is not None]
    assert sum(g.verdict == "degenerate" for g in regraded) == truth_bad
    # `dsv4-sidecar scan` reads the file as it is and agrees with every verdict
    capsys.readouterr()
    assert main(["scan", str(tmp_path / "samples.jsonl"), "--json", "--grammar", "v4"]) == 0
    scanned = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [x["verdict"] for x in scanned] == [x["verdict"] for x in lines]


def test_ab_two_clean_arms_not_significant(tmp_path, capsys):
    arms = tmp_path / "arms.yaml"
    with _sim("fp8", "on", 3, ttft_ms=5) as a, _sim("bf16", "off", 4, ttft_ms=5) as b:
        arms.write_text(f"arms:\n  fp8: {a.url}\n  no-hicache:\n    url: {b.url}\n")
        rc = main(
            ["repro", "--ab", "fp8", "no-hicache", "--arms-file", str(arms), "--concurrency",
             "1,16", "--requests", "30", "--json", "--quiet"]
        )  # fmt: skip
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    assert [a["label"] for a in doc["arms"]] == ["fp8", "no-hicache"]
    for arm in doc["arms"]:
        assert [lv["concurrency"] for lv in arm["levels"]] == [1, 16]
        for lv in arm["levels"]:
            assert set(lv) >= {"concurrency", "requests", "degenerate", "rate", "ci_low", "ci_high"}
            assert lv["requests"] == 30 and lv["degenerate"] == 0 and lv["rate"] == 0.0
            assert isinstance(lv["ci_high"], float) and 0 < lv["ci_high"] < 0.15
    assert doc["comparison"]["p_value"] == 1.0 and doc["comparison"]["significant"] is False


def test_single_arm_stream_duration_and_out(tmp_path, capsys):
    with _sim("bf16", "on", 5, ttft_ms=2) as sim:
        rc = main(
            ["repro", sim.url, "--concurrency", "4", "--duration", "0.6", "--stream",
             "--out", str(tmp_path / "run"), "--quiet"]
        )  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0
    assert "repro: degenerate DSML tool calls per level" in out and "samples.jsonl" in out
    doc = json.loads((tmp_path / "run" / "report.json").read_text())
    assert "comparison" not in doc and len(doc["arms"]) == 1
    level = doc["arms"][0]["levels"][0]
    assert level["requests"] > 4 and level["seconds"] < 5
    lines = (tmp_path / "run" / "samples.jsonl").read_text().splitlines()
    assert len(lines) == level["requests"]
    first = json.loads(lines[0])
    assert first["response"]["object"] == "chat.completion"  # SSE chunks were reassembled
    assert grade_line(first).verdict == first["verdict"]


def test_unreachable_endpoint_counts_errors(capsys):
    rc = main(
        ["repro", dead_url(), "--concurrency", "2", "--requests", "4",
         "--timeout", "2", "--json", "--quiet"]
    )  # fmt: skip
    captured = capsys.readouterr()
    assert rc == 1 and "no answer could be graded" in captured.err
    arm = json.loads(captured.out)["arms"][0]
    level = arm["levels"][0]
    assert level["errors"] == 4 and level["requests"] == 0
    # why, not just how many: the port is closed, so every request was refused
    assert level["error_causes"] == {"connection refused": 4}
    assert arm["total"]["error_causes"] == {"connection refused": 4}
    rc = main(
        ["repro", dead_url(), "--concurrency", "2", "--requests", "3",
         "--timeout", "2"]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 1
    assert "3 (connection refused: 3)" in out  # the table's errors cell
    assert "3 errors (connection refused: 3)" in out  # the summary line


def test_http_errors_are_counted_by_status(capsys):
    async def unavailable(scope, receive, send):
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 503, "headers": []})
        await send({"type": "http.response.body", "body": b"overloaded, see http://x/?k=v"})

    with ServerThread(unavailable, lifespan="off") as srv:
        rc = main(
            ["repro", srv.url, "--model", "m", "--concurrency", "1", "--requests", "3",
             "--timeout", "5", "--json", "--quiet"]
        )  # fmt: skip
    assert rc == 1
    level = json.loads(capsys.readouterr().out)["arms"][0]["levels"][0]
    assert level["error_causes"] == {"HTTP 503": 3}  # the status, never the body


def test_error_causes_are_bounded_words():
    from collections import Counter

    from exporter.causes import CAUSES
    from exporter.oncall.repro_report import (
        NO_ANSWER,
        OTHER_CAUSE,
        ArmResult,
        error_cause,
        errors_cell,
    )

    assert all(error_cause(c) == c for c in CAUSES)
    assert error_cause("HTTP 503") == "HTTP 503" and error_cause(None) == NO_ANSWER
    # a URL with a query string, a body, a status that is not one: never carried as they are
    for text in ("http://h:1/v1?token=s3cret", '{"error": "boom"}', "HTTP 9999", "HTTP 5031"):
        assert error_cause(text) == OTHER_CAUSE
    assert errors_cell(0, Counter()) == "0"
    assert errors_cell(5, Counter({"connection refused": 3, "HTTP 503": 2})) == (
        "5 (connection refused: 3, HTTP 503: 2)"
    )
    # a saved report is input too: its causes are re-bounded when triage reads it
    level = LevelResult.from_json(
        {"concurrency": 1, "requests": 0, "degenerate": 0, "errors": 3,
         "error_causes": {"timeout": 1, "GET http://x/?k=v failed": 2, "HTTP 502": "x"}}
    )  # fmt: skip
    assert level.error_causes == Counter({"timeout": 1, OTHER_CAUSE: 2})
    doc = ArmResult(Arm("a", "http://a"), [level]).to_json()
    assert doc["total"]["error_causes"] == {OTHER_CAUSE: 2, "timeout": 1}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "give one endpoint URL, or --ab A B"),
        (["http://x:1", "--ab", "a=http://a:1", "b=http://b:1"], "give one endpoint URL"),
        (["ftp://x"], "must be an http:// or https:// URL"),
        (["http://x:1", "--concurrency", "0,8"], "between 1 and 1024"),
        (["http://x:1", "--concurrency", "a,b"], "comma-separated integers"),
        (["http://x:1", "--requests", "0"], "--requests must be between"),
        (["http://x:1", "--duration", "-1"], "--duration must be positive"),
        (["--ab", "fp8", "bf16"], "neither LABEL=URL nor a URL"),
        (["--ab", "a=http://h:1", "a=http://h:2"], "both arms are labelled 'a'"),
        (["http://x:1", "--alpha", "2"], "--alpha must be between 0 and 1"),
    ],
)
def test_bad_flags_exit_2_with_one_line(argv, message, capsys):
    assert main(["repro", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("dsv4-sidecar repro: error:") and message in err
    assert "\n" not in err


def test_report_json_roundtrip_and_trend():
    levels = [
        LevelResult(1, requests=200, degenerate=0),
        LevelResult(64, requests=200, degenerate=30),
    ]
    trend = level_trend(levels)
    assert trend is not None and trend.rises and trend.low == 1 and trend.high == 64
    assert level_trend([LevelResult(8, 10, 1)]) is None
    from exporter.oncall.repro_report import ArmResult

    report = ReproReport([ArmResult(Arm("a", "http://a"), levels)], interrupted=True)
    again = ReproReport.from_json(json.loads(json.dumps(report.to_json())))
    assert again.interrupted and again.arms[0].degenerate == 30 and again.comparison is None
    assert again.arms[0].levels[1].ci == levels[1].ci


def test_long_holds_generation_length_and_sees_length_dependent_corruption(tmp_path, capsys):
    """--long --max-tokens: every request asks for a long answer with the same max_tokens; the
    simulator's length model corrupts long answers far more than short ones at one level."""
    with _sim("bf16", "on", 11, ttft_ms=1) as sim:
        rc = main(
            ["repro", sim.url, "--concurrency", "16", "--requests", "24", "--long",
             "--max-tokens", "2048", "--out", str(tmp_path / "run"), "--json", "--quiet"]
        )  # fmt: skip
    assert rc == 0
    lines = [json.loads(x) for x in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    assert len(lines) == 24
    reasons = {r for x in lines for r in grade_line(x).reasons}
    assert "prose_loop" in reasons  # loops until max_tokens: the long-generation phenotype
    assert {x["response"]["choices"][0]["finish_reason"] for x in lines} <= {"tool_calls", "length"}


def test_long_and_prompts_are_exclusive(tmp_path, capsys):
    assert main(["repro", "http://x:1", "--long", "--prompts", str(tmp_path / "p.json")]) == 2
    assert "--long and --prompts are exclusive" in capsys.readouterr().err


def test_ab_between_a_simulated_vllm_and_a_simulated_sglang(tmp_path):
    """Each arm's engine is discovered and its answers graded as that engine's parser
    delivers them: the racy vLLM arm corrupts with concurrency, the clean SGLang arm never."""
    # vLLM 0.24 hands every damaged block on (as content, or as a call that is still flagged);
    # 0.30+ deliver a block opened `<｜DSML｜toolcalls>` as the intended call, no harm to grade
    racy_vllm = SimSettings(
        engine="vllm",
        vllm_version="0.24.0",
        index_k_dtype="bf16",
        hicache="on",
        ttft_ms=10,
        itl_ms=0,
        seed=3,
    )
    with ServerThread(create_sim_app(racy_vllm)) as vllm, _sim("fp8", "on", 4) as sglang:
        runner = ReproRunner(
            [Arm("vllm bf16", vllm.url), Arm("sglang fp8", sglang.url)],
            (1, 64),
            requests=300,
            timeout=30,
            writer=SampleWriter(tmp_path),
        )
        report = asyncio.run(runner.run())
        truth_requests, truth_bad = _truth(vllm.url)
    a, b = report.arms
    assert (a.arm.engine, b.arm.engine) == ("vllm", "sglang")
    assert a.requests == b.requests == 600 and a.errors == b.errors == 0
    assert truth_requests == 600
    assert b.degenerate == 0 and a.levels[0].degenerate == 0
    # every answer the simulated model damaged is flagged, none of the others: degenerate, or
    # suspect where vLLM's parser still turned the damaged block into a call
    flagged = sum(lv.verdicts["degenerate"] + lv.verdicts["suspect"] for lv in a.levels)
    assert a.degenerate > 0 and flagged == truth_bad
    assert report.comparison is not None and report.comparison.significant
    doc = report.to_json()
    assert [arm["engine"] for arm in doc["arms"]] == ["vllm", "sglang"]
    lines = [json.loads(x) for x in (tmp_path / "samples.jsonl").read_text().splitlines()]
    grammars = {x["arm"]: x["grammar"] for x in lines}
    assert grammars == {"vllm bf16": "v4@vllm", "sglang fp8": "v4"}
