"""The deployment's DSML dialect: setting > /server_info tool_call_parser > config.json."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.dsml import grade_text, render_completion
from exporter.dsml.dialect import dialect_of_model_config, dialect_of_parser, resolve_dialect

V4_CALL = render_completion("Checking.", [("ls", {"path": "."})], grammar="v4")
V41_CALL = render_completion("Checking.", [("ls", {"path": "."})], grammar="v4.1")


@pytest.mark.parametrize(
    ("parser", "dialect"),
    [("deepseekv32", "v3.2"), ("deepseekv4", "v4"), ("DeepSeekV41 ", "v4.1"), ("qwen25", None)],
)
def test_parser_names(parser: str, dialect: str | None) -> None:
    assert dialect_of_parser(parser) == dialect


@pytest.mark.parametrize(
    ("config", "dialect"),
    [
        ({"architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v41"}, "v4.1"),
        ({"architectures": ["DeepseekV41ForCausalLM"]}, "v4.1"),
        ({"architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4"}, "v4"),
        ({"architectures": ["DeepseekV32ForCausalLM"]}, "v3.2"),
        ({"architectures": ["Qwen3MoeForCausalLM"]}, None),
        ({"architectures": "DeepseekV4"}, None),
        (None, None),
    ],
)
def test_model_config(config: dict[str, object] | None, dialect: str | None) -> None:
    assert dialect_of_model_config(config) == dialect


def test_precedence_and_source() -> None:
    v41_cfg = {"model_type": "deepseek_v41"}
    assert resolve_dialect("v4", "deepseekv41", v41_cfg) == ("v4", "configured")
    assert resolve_dialect("auto", "deepseekv41", None) == ("v4.1", "server_info")
    assert resolve_dialect("auto", None, v41_cfg) == ("v4.1", "model_config")
    assert resolve_dialect("auto", "qwen25", {"model_type": "x"}) == (None, "unknown")


def test_a_block_of_the_other_dialect_is_graded_as_the_client_gets_it() -> None:
    dialect, _ = resolve_dialect("auto", "deepseekv41", None)
    wrong = grade_text(V4_CALL, grammar=dialect)
    assert wrong.verdict == "degenerate" and "dialect_mismatch" in wrong.reasons
    assert wrong.calls == ()  # the deepseekv41 parser returns no call for it
    right = grade_text(V41_CALL, grammar=dialect)
    assert right.verdict == "well_formed" and [c.name for c in right.calls] == ["ls"]


def test_parser_table_matches_the_released_registry() -> None:
    """PARSER_DIALECTS restates SGLang 0.5.23's parser registry (function_call_parser.py):
    every DeepSeek DSML parser name maps to the detector of the dialect we grade it as."""
    import re

    from exporter.dsml.dialect import PARSER_DIALECTS
    from tests.sglang_release import source_file

    src = source_file("0.5.23", "sglang/srt/function_call/function_call_parser.py").read_text()
    registry = dict(re.findall(r'"(deepseekv\d+)":\s*(DeepSeekV\d+Detector)', src))
    detector = {"v3.2": "DeepSeekV32Detector", "v4": "DeepSeekV4Detector"}
    detector["v4.1"] = "DeepSeekV41Detector"
    for name, dialect in PARSER_DIALECTS.items():
        assert registry.get(name) == detector[dialect], name
    dsml = {n for n, cls in registry.items() if cls in detector.values()}
    assert dsml == set(PARSER_DIALECTS), "a DSML parser SGLang registers is unknown here"


def test_vllm_parser_names_and_engine_qualified_dialects() -> None:
    assert dialect_of_parser("deepseek_v4", "vllm") == "v4"
    assert dialect_of_parser("deepseekv4", "vllm") is None  # SGLang's spelling is not vLLM's
    assert resolve_dialect("auto", "deepseek_v4", None, "vllm") == ("v4@vllm", "tool_call_parser")
    assert resolve_dialect("v3.2", None, None, "vllm") == ("v3.2@vllm", "configured")
    cfg = {"architectures": ["DeepseekV4ForCausalLM"]}
    assert resolve_dialect("auto", None, cfg, "vllm") == ("v4@vllm", "model_config")


def test_vllm_dialect_flags_the_self_closing_invoke_vllm_drops() -> None:
    """vLLM's deepseek_v4 parser has no self-closing invoke: the call never reaches the client
    (tests/dsml/test_vllm_differential.py proves it on the released parser)."""
    text = render_completion("", [("list_tasks", {})], grammar="v4", self_closing=True)
    assert grade_text(text, grammar="v4").verdict == "well_formed"
    under_vllm = grade_text(text, grammar="v4@vllm")
    assert under_vllm.verdict != "well_formed" and "dialect_mismatch" in under_vllm.reasons
    assert grade_text(V4_CALL, grammar="v4@vllm").verdict == "well_formed"


def test_vllm_dialect_leaves_a_quoted_self_closing_invoke_outside_a_block_alone() -> None:
    """The near miss: prose quoting a self-closing invoke (a code fence, no block) is content to
    vLLM 0.23-0.29 as to SGLang, so the engine rule must not make a clean answer degenerate.
    0.30+ open a call there (its name swallows the rest of the answer): quoted_block."""
    text = 'With no arguments, write:\n```\n<｜DSML｜invoke name="now"/>\n```\nThat is all.'
    assert grade_text(text, grammar="v4", finish_reason="stop").verdict == "no_tool_call"
    for grammar in ("v4@vllm-0.24.0", "v4@vllm-0.29.0"):
        under_vllm = grade_text(text, grammar=grammar, finish_reason="stop")
        assert under_vllm.verdict == "no_tool_call", grammar
    assert "quoted_block" in grade_text(text, grammar="v4@vllm-0.30.0").reasons


def test_vllm_parser_table_matches_the_released_registry() -> None:
    """VLLM_PARSER_DIALECTS restates vLLM's tool-parser registry for each supported release."""
    import re

    from exporter.dsml.dialect import VLLM_LATER_PARSERS, VLLM_PARSER_DIALECTS
    from exporter.dsml.vllm_releases import rules_for
    from tests.dsml.vllm_oracle import RELEASES
    from tests.sglang_release import release_dir

    for version in RELEASES:
        rules, how = rules_for(version)
        root = release_dir(version, "vllm")
        src = (root / "vllm/tool_parsers/__init__.py").read_text()
        registry = dict(re.findall(r'"(deepseek_v\d+)":\s*\(\s*"(\w+)"', src))
        # 0.25+: the engine tool parsers over vllm/parser/deepseek_v4.py (rules.parser_file)
        kind = "_engine" if rules.parser_file.startswith("vllm/parser/") else ""
        assert how == "release" and (root / rules.parser_file).is_file(), version
        assert registry.get("deepseek_v4") == f"deepseekv4{kind}_tool_parser", version
        assert registry.get("deepseek_v32") == f"deepseekv32{kind}_tool_parser", version
        deepseek = {n for n in registry if n.startswith(("deepseek_v32", "deepseek_v4"))}
        later = set() if rules.has_v41 else VLLM_LATER_PARSERS
        assert deepseek == set(VLLM_PARSER_DIALECTS) - later, (version, registry)


def test_deepseek_v41_resolves_to_v41_from_the_release_that_registers_it() -> None:
    """vLLM 0.30+ ``--tool-call-parser deepseek_v41`` is V4.1, graded by that release's rules;
    0.29 has no such parser (unknown), a release not yet known keeps it (newest rules)."""
    found = resolve_dialect("auto", "deepseek_v41", None, "vllm", "0.34.0")
    assert found == ("v4.1@vllm-0.34.0", "tool_call_parser")
    assert resolve_dialect("auto", "deepseek_v41", None, "vllm", "0.29.0") == (None, "unknown")
    assert resolve_dialect("auto", "deepseek_v41", None, "vllm", "0.40.0")[0] == "v4.1@vllm-0.40.0"
    assert resolve_dialect("auto", "deepseek_v41", None, "vllm")[0] == "v4.1@vllm"
    # vLLM serves no endpoint with its --tool-call-parser: the operator may name it as launched
    from exporter.config import SidecarSettings

    setting = SidecarSettings(dsml_dialect="deepseek_v41").dsml_dialect
    found = resolve_dialect(setting, None, None, "vllm", "0.30.0")
    assert found == ("v4.1@vllm-0.30.0", "configured")


def test_a_quoted_bare_invoke_is_run_by_vllm_030_only() -> None:
    """vLLM 0.30+ start a call at an invoke opener with no block before it: one quoted in a
    fence reaches the client as a call (quoted_block); 0.24 and SGLang leave it as content."""
    text = 'For example:\n```\n<｜DSML｜invoke name="read_file">\n</｜DSML｜invoke>\n```\nDone.'
    for grammar in ("v4", "v4@vllm-0.24.0", "v4@vllm-0.29.0"):
        assert grade_text(text, grammar=grammar, finish_reason="stop").reasons == (), grammar
    for grammar in ("v4@vllm-0.30.0", "v4@vllm-0.34.0", "v4@vllm"):
        res = grade_text(text, grammar=grammar, finish_reason="stop")
        assert "quoted_block" in res.reasons, (grammar, res.reasons)


@pytest.mark.parametrize("bad", ["v4@tgi", "v5@vllm"])
def test_unknown_engine_or_dialect_is_a_clear_error(bad: str) -> None:
    with pytest.raises(ValueError, match="unknown"):
        grade_text(V4_CALL, grammar=bad)


def test_scan_grades_saved_vllm_outputs_as_vllm_delivers_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from exporter.cli import main

    zero_arg = render_completion("", [("list_tasks", {})], grammar="v4", self_closing=True)
    path = tmp_path / "vllm.jsonl"
    path.write_text(json.dumps({"text": zero_arg}) + "\n" + json.dumps({"text": V4_CALL}) + "\n")
    assert main(["scan", str(path), "--json", "--grammar", "v4@vllm"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["verdict"] for r in rows][1] == "well_formed"
    assert rows[0]["verdict"] != "well_formed" and "dialect_mismatch" in rows[0]["reasons"]
    assert main(["scan", str(path), "--json", "--grammar", "v4"]) == 0
    plain = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["verdict"] for r in plain] == ["well_formed", "well_formed"]


def test_vllm_deepseek_v41_is_graded_as_v41() -> None:
    """Issue 32: vLLM 0.30+'s deepseek_v41 parser resolves to V4.1 (it was ``unknown``), and a
    self-closing invoke followed by another, which that parser merges into one call, is
    dialect_mismatch there. So is one last in the block: the call's name swallows the block's
    closer (``list_tasks"/>\n</｜DSML｜ calls>``; 0.30 and 0.34's wheels, the differential's
    clean V4.1 items). SGLang's deepseekv41 reads both: well formed."""
    from exporter.dsml.dialect import resolve_dialect

    dialect, how = resolve_dialect("auto", "deepseek_v41", None, "vllm")
    assert (dialect, how) == ("v4.1@vllm", "tool_call_parser")
    calls = [("list_tasks", {}), ("read_file", {"path": "a"})]
    merged = render_completion("", calls, grammar="v4.1", self_closing=True)
    assert "dialect_mismatch" in grade_text(merged, grammar=dialect).reasons
    assert grade_text(merged, grammar="v4.1").verdict == "well_formed"
    last = render_completion("", calls[::-1], grammar="v4.1", self_closing=True)
    assert "dialect_mismatch" in grade_text(last, grammar=dialect).reasons
    assert grade_text(last, grammar="v4.1").verdict == "well_formed"
