"""Corruption phenotypes injected into the clean corpus are caught in every context."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from exporter.dsml import grade_text
from exporter.dsml import markers as m
from tests.dsml.fp_corpus import corpus

B = m.BAR
CALLS = [c for c in corpus() if c.label.startswith("call-")][:40]


def _first_value_start(text: str) -> int:
    return text.index('string="', text.index(f"<{B}DSML{B}parameter")) + len('string="true">')


def _dup_first_param(text: str) -> str:
    start = text.index(f"<{B}DSML{B}parameter")
    end = text.index(m.PARAMETER_CLOSE, start) + len(m.PARAMETER_CLOSE)
    return text[:end] + "\n" + text[start:end] + text[end:]


def _opener(text: str) -> str:
    return f"<{B}DSML{B}tool_calls>" if "tool_calls" in text else f"<{B}DSML{B}function_calls>"


MUTATIONS: dict[str, tuple[Callable[[str], str], str, str]] = {
    # name: (mutate, finish_reason, expected verdict)
    "damaged opener": (
        lambda s: s.replace(_opener(s), f"<{B}DSML{B}toolcalls>"),
        "stop",
        "degenerate",
    ),
    "doubled bars": (
        lambda s: s.replace(f"<{B}DSML{B}invoke", f"<{B}{B}DSML{B}{B}invoke", 1),
        "stop",
        "degenerate",
    ),
    "never closed": (lambda s: s[: s.rindex("</")], "stop", "degenerate"),
    "cut by length": (lambda s: s[: s.rindex("</") - 3], "length", "truncated"),
    "role marker in value": (
        lambda s: s[: _first_value_start(s)] + f"<{B}User{B}>" + s[_first_value_start(s) :],
        "stop",
        "degenerate",
    ),
    "loop before block": (
        lambda s: s.replace("\n\n<", "I will now call the tool. " * 20 + "\n\n<", 1),
        "stop",
        "degenerate",
    ),
    "nfkc": (lambda s: s.replace(B, "|"), "stop", "suspect"),
    "duplicate parameter": (_dup_first_param, "stop", "degenerate"),
    "nul in value": (
        lambda s: s[: _first_value_start(s)] + "\x00" + s[_first_value_start(s) :],
        "stop",
        "degenerate",
    ),
    "mojibake in value": (
        lambda s: s[: _first_value_start(s)] + "ĠtheĠfileĠis" + s[_first_value_start(s) :],
        "stop",
        "degenerate",
    ),
}


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_mutation_is_caught_in_every_sample(name: str) -> None:
    mutate, finish, expected = MUTATIONS[name]
    misses = []
    for case in CALLS:
        kwargs = {k: v for k, v in case.kwargs.items() if k != "finish_reason"}
        result = grade_text(mutate(case.text or ""), finish_reason=finish, **kwargs)
        if result.verdict != expected:
            misses.append((case.label, result.verdict, result.reasons))
    assert not misses, misses[:3]
