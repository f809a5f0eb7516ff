"""Held to clean traffic in many scripts (issue 32): at most 1 in 1,000 clean outputs graded
anything but well_formed/no_tool_call, in every dialect and engine.

The corpus (:mod:`tests.dsml.catalog_corpus`) is built at test time from the machine's
translated message catalogs, translated manuals, certificates, Debian's web addresses and logs:
14 scripts (Chinese simplified and traditional, Japanese, Korean, Cyrillic, Arabic, Devanagari,
Greek, Thai, Hebrew, Georgian, Bengali, Tamil, Latin), answers shaped as chat answers end (a
sentence, a list, a heading, a URL, a log excerpt, a table, paragraphs) and long ones (at least
4,000 estimated tokens). Each is graded, with tools offered, as a clean answer under ``stop``,
as reasoning before a call, as the value of a ``write_file`` call, as prose before a ``search``
call, and through the OpenAI view (content; parsed arguments), in every dialect the grader
supports (V3.2, V4, V4.1; SGLang and vLLM). Signals (``cut_under_stop``, ``repeated_call``) are
counted, not graded: they may appear, the verdict may not move.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from exporter.dsml import (
    NO_TOOL_CALL,
    WELL_FORMED,
    Result,
    grade_openai_response,
    grade_text,
    render_completion,
)
from exporter.dsml.engines import QUALIFIED
from exporter.dsml.markers import GRAMMARS
from exporter.dsml.vllm_releases import RULES as VLLM_RULES
from exporter.samplers.length import estimate_tokens
from tests.dsml import catalog_corpus as cc
from tests.dsml.builders import openai_message, tool

OK = (WELL_FORMED, NO_TOOL_CALL)
MAX_RATE = 1 / 1000
# v3.2 v4 v4.1 (SGLang), v4 v3.2 v4.1 @vllm (the newest vLLM rules), and V4 under each older
# vLLM rule set (exporter/dsml/vllm_releases.py: what each release's parser delivers differs)
DIALECTS = (
    *GRAMMARS,
    *QUALIFIED,
    *(f"v4@vllm-{'.'.join(map(str, r.first))}" for r in VLLM_RULES[:-1]),
)
TOOLS = [
    tool("write_file", ("path", "content"), path="string", content="string"),
    tool("search", ("query",), query="string"),
]


@pytest.fixture(scope="module")
def corpus() -> list[cc.Sample]:
    return [*cc.short(), *cc.long(per_script=4), *cc.manuals(), *cc.certificates()]


def test_the_corpus_spans_scripts_shapes_and_lengths(corpus: list[cc.Sample]) -> None:
    scripts = set(cc.scripts_present())
    assert len(scripts) >= 8, scripts
    assert {"han_simplified", "japanese", "hangul"} <= scripts
    shapes = Counter(s.shape for s in corpus)
    assert set(cc.SHAPES) | {"long", "manual", "certificate"} <= set(shapes), shapes
    long = [s for s in corpus if s.shape == "long"]
    assert {s.script for s in long} == scripts
    assert min(estimate_tokens(s.text) for s in long) >= cc.MIN_TOKENS
    assert len(corpus) >= 2500


def _views(s: cc.Sample, dialect: str) -> Iterator[tuple[str, Result]]:
    """The sample as the grader meets it in traffic, in one dialect (raw text)."""
    base = dialect.partition("@")[0]
    yield "answer", grade_text(s.text, grammar=dialect, finish_reason="stop", tools=TOOLS)
    write = ("write_file", {"path": "notes.md", "content": s.text})
    for view, text in (
        ("value", render_completion("Writing it.", [write], grammar=base)),
        ("prose", render_completion(s.text, [("search", {"query": s.text[:200]})], grammar=base)),
        ("reasoning", render_completion("Done.", [write], reasoning=s.text[:2000], grammar=base)),
        ("repeated", render_completion("", [write, write], grammar=base)),
    ):
        kw: dict[str, Any] = {"thinking": True} if view == "reasoning" else {}
        yield view, grade_text(text, grammar=dialect, finish_reason="tool_calls", tools=TOOLS, **kw)


def _openai(s: cc.Sample) -> Iterator[tuple[str, Result]]:
    yield "openai_answer", grade_openai_response(openai_message(s.text), tools=TOOLS)
    calls = [("write_file", {"path": "notes.md", "content": s.text})]
    message = openai_message("Writing it.", tool_calls=calls, finish_reason="tool_calls")
    yield "openai_call", grade_openai_response(message, tools=TOOLS)


def test_clean_outputs_in_every_script_are_not_flagged(corpus: list[cc.Sample]) -> None:
    graded: Counter[tuple[str, str]] = Counter()  # (dialect, script)
    flagged: Counter[tuple[str, str]] = Counter()
    examples: list[tuple[str, str, str, str, tuple[str, ...]]] = []
    for s in corpus:
        for dialect in (*DIALECTS, "openai"):
            views = _openai(s) if dialect == "openai" else _views(s, dialect)
            for view, result in views:
                graded[dialect, s.script] += 1
                if result.verdict not in OK:
                    flagged[dialect, s.script] += 1
                    examples.append((dialect, s.script, s.shape, view, result.reasons))
    per_dialect = {d: sum(n for (dd, _), n in flagged.items() if dd == d) for d, _ in graded}
    per_script = {sc: sum(n for (_, ss), n in flagged.items() if ss == sc) for _, sc in graded}
    for dialect in (*DIALECTS, "openai"):
        total = sum(n for (d, _), n in graded.items() if d == dialect)
        assert per_dialect[dialect] <= total * MAX_RATE, (per_dialect, per_script, examples[:8])
    assert sum(flagged.values()) <= sum(graded.values()) * MAX_RATE, examples[:8]


ISSUE_EXAMPLES = (
    "需要检查以下几项：\n1. 配置文件\n2. 日志目录",
    "確認する項目：\n- 設定ファイル\n- ログ",
    "설정 파일을 확인했습니다. 포트는 8080입니다",
    "文档在这里：https://example.com/docs",
    "I'll do two things:\n\n1. look at the config\n2. run the tests",
)


@pytest.mark.parametrize("text", ISSUE_EXAMPLES)
@pytest.mark.parametrize("dialect", DIALECTS)
def test_answers_ending_without_a_full_stop_are_counted_not_graded(text: str, dialect: str) -> None:
    result = grade_text(text, grammar=dialect, finish_reason="stop", tools=TOOLS)
    assert result.verdict == NO_TOOL_CALL
    assert result.reasons == ("cut_under_stop",)  # the signal, counted


def test_the_same_call_twice_reaches_the_client_and_is_counted_not_graded() -> None:
    ls = ("list_dir", {"path": "src"})
    tools = [*TOOLS, tool("list_dir", ("path",), path="string")]
    for dialect in DIALECTS:
        text = render_completion("", [ls, ls], grammar=dialect.partition("@")[0])
        result = grade_text(text, grammar=dialect, finish_reason="tool_calls", tools=tools)
        assert result.verdict == WELL_FORMED and result.reasons == ("repeated_call",), dialect
        assert len(result.calls) == 2
