"""`triage` counts every answer once: `--repro DIR --scan DIR/samples.jsonl` (the example in
`triage --help`) gave the repro's answers twice, once from its report and once re-graded
from its sample file, and the same --scan file twice was read twice."""

from __future__ import annotations

import json
from pathlib import Path

from exporter.dsml import render_completion
from exporter.oncall.repro_report import Arm, ArmResult, LevelResult, ReproReport
from exporter.oncall.triage.collect import CollectOptions, collect
from exporter.oncall.triage.diagnosis import derive_facts

GOOD = render_completion("Reading.", [("read_file", {"path": "a.py"})])
BAD = GOOD.replace("tool_calls>", "toolcalls>", 1)
START = 1_760_000_000.0


def _line(text: str, arm: str, url: str, concurrency: int, when: float) -> str:
    return json.dumps(
        {"text": text, "grammar": "v4", "tools": ["read_file"], "arm": arm, "url": url,
         "concurrency": concurrency, "time": when}
    )  # fmt: skip


def _run(tmp_path: Path) -> Path:
    """A `repro --out` directory: report.json over 180 answers and the same 180 in
    samples.jsonl (2 levels of 90; 0 and 30 degenerate)."""
    run = tmp_path / "run"
    run.mkdir()
    levels = [LevelResult(1, 90, 0), LevelResult(32, 90, 30)]
    report = ReproReport([ArmResult(Arm("bf16", "http://b:1"), levels)], started_at=START)
    report.seconds = 60.0
    (run / "report.json").write_text(json.dumps(report.to_json()))
    lines = [_line(GOOD, "bf16", "http://b:1", 1, START + 1 + i * 0.1) for i in range(90)]
    lines += [
        _line(BAD if i < 30 else GOOD, "bf16", "http://b:1", 32, START + 20 + i * 0.1)
        for i in range(90)
    ]
    (run / "samples.jsonl").write_text("\n".join(lines) + "\n")
    return run


def test_repro_samples_next_to_their_report_are_counted_once(tmp_path: Path) -> None:
    run = _run(tmp_path)
    ev = collect(CollectOptions(repro_path=run, scan_paths=[run / "samples.jsonl"]))
    assert ev.scan is not None and ev.scan.lines == 180 and ev.scan.in_repro == 180
    facts = derive_facts(ev)
    assert (facts.graded, facts.degenerate) == (180, 30)  # not 360 and 60
    assert len(facts.trends) == 1  # the repro's trend, not a second one from the same answers
    # their per-sample reasons are still read (the artefact share needs them)
    assert len(ev.samples) == 30 and facts.artefact_exact
    assert any("already counts" in n for n in ev.notes)


def test_lines_of_another_run_in_the_same_file_still_count(tmp_path: Path) -> None:
    run = _run(tmp_path)
    extra = [
        _line(BAD, "bf16", "http://b:1", 32, START + 3600),  # a later run appended to the file
        _line(BAD, "other-arm", "http://b:1", 32, START + 30),  # an arm the report lacks
    ]
    with (run / "samples.jsonl").open("a") as fh:
        fh.write("\n".join(extra) + "\n")
    facts = derive_facts(
        collect(CollectOptions(repro_path=run, scan_paths=[run / "samples.jsonl"]))
    )
    assert (facts.graded, facts.degenerate) == (182, 32)


def test_without_the_repro_result_the_file_counts(tmp_path: Path) -> None:
    run = _run(tmp_path)
    facts = derive_facts(collect(CollectOptions(scan_paths=[run / "samples.jsonl"])))
    assert (facts.graded, facts.degenerate) == (180, 30)


def test_the_same_file_twice_is_read_once(tmp_path: Path) -> None:
    run = _run(tmp_path)
    path = run / "samples.jsonl"
    link = tmp_path / "link.jsonl"
    link.symlink_to(path)
    ev = collect(CollectOptions(scan_paths=[path, Path(str(run) + "/./samples.jsonl"), link]))
    assert ev.scan is not None and ev.scan.files == [str(path)] and ev.scan.lines == 180
    assert (derive_facts(ev).graded, len(ev.samples)) == (180, 30)
    assert sum("given more than once" in n for n in ev.notes) == 2
