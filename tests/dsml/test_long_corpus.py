"""Held to independent text (issue 26): 2,000+ clean long texts graded with at most 2 flagged,
and the reasons of issue 26 measured on damage generated into the same texts.

The corpus (:mod:`tests.dsml.long_corpus`) is built at test time from files on this machine
that nobody on this project wrote; each text is at least 4,000 tokens. Each is graded as the
prose answer of a completion and as the value of a ``write_file`` call (the value checks), so
the false-alarm count covers both views.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest

from exporter.dsml import NO_TOOL_CALL, REASON_SPECS, WELL_FORMED, Result, grade_text
from exporter.samplers.length import estimate_tokens
from tests.dsml.builders import block, invoke, par, tool
from tests.dsml.long_corpus import MIN_TOKENS, LongText, build

MAX_FLAGGED = 2
TOOLS = [tool("write_file", ("path", "content"), path="string", content="string")]


@pytest.fixture(scope="module")
def corpus() -> list[LongText]:
    return build()


def as_value(text: str, copies: int = 1) -> str:
    one = invoke("write_file", par("path", "out.txt"), par("content", text))
    return "Writing it." + block(*([one] * copies))


def test_the_corpus_is_long_varied_and_large(corpus: list[LongText]) -> None:
    assert len(corpus) >= 2000
    kinds = Counter(t.kind for t in corpus)
    assert len(kinds) >= 6, kinds
    assert max(kinds.values()) <= 0.35 * len(corpus), kinds
    assert min(estimate_tokens(t.text) for t in corpus) >= MIN_TOKENS


def test_clean_long_texts_are_not_flagged(corpus: list[LongText]) -> None:
    prose = [
        t.source
        for t in corpus
        if grade_text(t.text, finish_reason="stop").verdict not in (WELL_FORMED, NO_TOOL_CALL)
    ]
    value = [
        t.source
        for t in corpus
        if grade_text(as_value(t.text), finish_reason="tool_calls", tools=TOOLS).verdict
        != WELL_FORMED
    ]
    assert len(prose) <= MAX_FLAGGED, prose
    assert len(value) <= MAX_FLAGGED, value


def _passage(text: str) -> str:
    words = text.split()
    return " ".join(words[200:300]) + " "


def _cut_mid_word(text: str) -> str:
    head = text[: len(text) // 2]
    for i in range(len(head) - 1, 0, -1):
        if head[i].isalpha() and head[i - 1].isalpha():
            return head[:i]
    return head + "abc"


# reason -> (the damaged completion, grading kwargs)
DAMAGE: dict[str, Callable[[str], tuple[str, dict[str, object]]]] = {
    "prose_loop": lambda x: (x + "\n" + _passage(x) * 3, {"finish_reason": "length"}),
    "template_token_leak": lambda x: (x + "\n\nDone.<|im_end|>", {"finish_reason": "stop"}),
    "script_glued": lambda x: (x + "\nIt will returnданных now.\n", {"finish_reason": "stop"}),
    "value_loop": lambda x: (as_value(x[:4000] + "Paris" + "-" * 150), {"tools": TOOLS}),
    "think_in_value": lambda x: (as_value(x[:4000] + " done</think>"), {"tools": TOOLS}),
    "duplicate_call": lambda x: (as_value(x[:4000], copies=3), {"tools": TOOLS}),
    "repeated_call": lambda x: (as_value(x[:4000], copies=2), {"tools": TOOLS}),
    "cut_under_stop": lambda x: (_cut_mid_word(x), {"finish_reason": "stop", "tools": TOOLS}),
    "length_tools_no_call": lambda x: (x, {"finish_reason": "length", "tools": TOOLS}),
}
MIN_DETECTED = 0.97  # measured 0.993 (prose_loop, the lowest) on every other text


@pytest.mark.parametrize("reason", sorted(DAMAGE))
def test_reason_on_generated_damage(corpus: list[LongText], reason: str) -> None:
    sample = corpus[::10]
    missed: list[str] = []
    for t in sample:
        text, kwargs = DAMAGE[reason](t.text)
        result: Result = grade_text(text, **kwargs)  # type: ignore[arg-type]
        # a signal is counted, never a verdict: found is all it can be
        graded = REASON_SPECS[reason].severity == "signal" or result.verdict not in (
            WELL_FORMED,
            NO_TOOL_CALL,
        )
        if reason not in result.reasons or not graded:
            missed.append(t.source)
    assert len(sample) >= 200
    assert 1 - len(missed) / len(sample) >= MIN_DETECTED, missed[:5]
