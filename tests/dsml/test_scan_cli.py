"""`dsv4-sidecar scan`: JSON Lines in, per-line verdicts and a summary out."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from exporter.cli import main
from exporter.cli import scan as scan_cli
from exporter.dsml import VERDICTS, render_completion
from tests.dsml.builders import openai_message

GOOD = render_completion("Reading.", [("read_file", {"path": "a.py"})])
BAD = GOOD.replace("tool_calls>", "toolcalls>", 1)
LINES = [
    json.dumps({"text": GOOD, "grammar": "v4", "finish_reason": "stop", "tools": ["read_file"]}),
    json.dumps({"text": BAD}),
    "",
    "{not json",
    json.dumps(openai_message("Hi there.")),
    json.dumps({"text": ["not", "a", "string"]}),
    json.dumps({"text": GOOD, "grammar": "v9"}),
    json.dumps({"text": "x\u001b]0;pwned\u0007 " + BAD}),
    '{"text": "lone \\ud800 surrogate \\u0000 here"}',
]


@pytest.fixture
def jsonl(tmp_path: Path) -> Path:
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    return path


def test_json_mode_one_object_per_line_in_order(jsonl: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["scan", str(jsonl), "--json"]) == 0
    out, err = capsys.readouterr()
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["line"] for r in rows] == [1, 2, 4, 5, 6, 7, 8, 9]
    assert [r["verdict"] for r in rows] == [
        "well_formed",
        "degenerate",
        "error",
        "no_tool_call",
        "error",
        "error",
        "degenerate",
        "degenerate",
    ]
    assert rows[0]["calls"] == [{"name": "read_file", "arguments": {"path": "a.py"}}]
    assert "tag_unknown" in rows[1]["reasons"]
    assert all(
        r["reasons"] == ["bad_input"] and r["error"] for r in rows if r["verdict"] == "error"
    )
    for row in rows[1:2]:
        finding = row["findings"][0]
        assert {"reason", "start", "end", "channel"} <= set(finding)
    assert "outputs graded" in err  # the summary went to stderr


def test_summary_json_file(jsonl: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    target = tmp_path / "summary.json"
    assert main(["scan", str(jsonl), "--json", "--summary-json", str(target)]) == 0
    _out, err = capsys.readouterr()
    assert err == ""
    summary = json.loads(target.read_text())
    assert summary["lines"] == 8
    assert set(summary["verdicts"]) == set(VERDICTS)
    assert summary["verdicts"]["error"]["count"] == 3
    lo, hi = summary["verdicts"]["degenerate"]["ci95"]
    assert 0 < lo < 2 / 7 < hi < 1
    assert summary["reasons"]["tag_unknown"]["family"] == "marker"


def test_human_output_highlights_and_neutralises_control_chars(
    jsonl: Path, capsys: pytest.CaptureFixture
) -> None:
    assert main(["scan", str(jsonl), "--examples", "3"]) == 0
    out, _ = capsys.readouterr()
    assert "95% CI (Wilson)" in out
    assert "line 2: degenerate" in out
    assert "tag_unknown" in out
    assert "\x1b]0;" not in out and "\\x1b" in out


def test_stdin_and_unreadable_file(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO((LINES[0] + "\n").encode())))
    assert main(["scan", "-", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["verdict"] == "well_formed"
    assert main(["scan", "/nonexistent/file.jsonl"]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_defaults_for_lines_that_do_not_say(tmp_path: Path, capsys) -> None:
    v32 = GOOD.replace("tool_calls>", "function_calls>")
    path = tmp_path / "a.jsonl"
    path.write_text(json.dumps({"text": v32}) + "\n")
    main(["scan", str(path), "--json", "--grammar", "v4"])
    assert json.loads(capsys.readouterr().out)["reasons"] == ["version_mismatch"]


def test_v41_deployment(tmp_path: Path, capsys) -> None:
    v41 = render_completion("Reading.", [("read_file", {"path": "a.py"})], grammar="v4.1")
    path = tmp_path / "a.jsonl"
    path.write_text(json.dumps({"text": GOOD}) + "\n" + json.dumps({"text": v41}) + "\n")
    main(["scan", str(path), "--json", "--grammar", "v4.1"])
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.startswith("{")]
    assert lines[0]["reasons"] == ["dialect_mismatch"] and lines[0]["verdict"] == "degenerate"
    assert lines[1]["verdict"] == "well_formed" and lines[1]["grammar"] == "v4.1"


def test_unreadable_lines_are_named_and_bounded(
    jsonl: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    target = tmp_path / "summary.json"
    assert main(["scan", str(jsonl), "--summary-json", str(target)]) == 0
    out, _ = capsys.readouterr()
    assert "3 unreadable lines: 4, 6, 7" in out  # physical line numbers (blank line 3 skipped)
    assert json.loads(target.read_text())["unreadable"] == {"count": 3, "first_lines": [4, 6, 7]}
    many = tmp_path / "many.jsonl"
    bad_count = scan_cli.MAX_UNREADABLE_LINES + 7
    many.write_text("".join(f"{{broken {i}\n" for i in range(bad_count)) + LINES[0] + "\n")
    assert main(["scan", str(many), "--summary-json", str(target)]) == 0
    out, _ = capsys.readouterr()
    first = list(range(1, scan_cli.MAX_UNREADABLE_LINES + 1))
    assert f"{bad_count} unreadable lines: {', '.join(map(str, first))} and 7 more" in out
    doc = json.loads(target.read_text())["unreadable"]
    assert doc == {"count": bad_count, "first_lines": first}


class _Tty(io.StringIO):
    """A stderr that says it is a terminal (rich then draws its live progress on it)."""

    def isatty(self) -> bool:
        return True


def test_progress_on_stderr_only_when_it_is_a_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    path = tmp_path / "long.jsonl"
    path.write_text((LINES[0] + "\n") * (2 * scan_cli.PROGRESS_EVERY), encoding="utf-8")
    # not a terminal (pytest's capture): nothing but the JSON lines and the summary
    assert main(["scan", str(path), "--json", "--summary-json", str(tmp_path / "s.json")]) == 0
    out, err = capsys.readouterr()
    assert err == "" and len(out.splitlines()) == 2 * scan_cli.PROGRESS_EVERY
    tty = _Tty()
    monkeypatch.setattr("sys.stderr", tty)
    assert main(["scan", str(path), "--json", "--summary-json", str(tmp_path / "s.json")]) == 0
    out, _ = capsys.readouterr()
    drawn = tty.getvalue()
    assert "lines" in drawn and "scan" in drawn  # the progress line was drawn on stderr
    # stdout is still exactly the JSON lines: the bar never captured them
    assert [json.loads(line)["verdict"] for line in out.splitlines()] == ["well_formed"] * (
        2 * scan_cli.PROGRESS_EVERY
    )
