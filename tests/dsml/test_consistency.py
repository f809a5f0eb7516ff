"""The fast path and the state machine agree wherever the fast path accepts an input."""

from __future__ import annotations

import pytest

from exporter.dsml.fastpath import parse_canonical
from exporter.dsml.grader import body_end_of, reasoning_end
from exporter.dsml.schema import ToolSet
from exporter.dsml.structure import Machine
from exporter.dsml.tokens import scan
from tests.dsml.fp_corpus import corpus
from tests.dsml.reason_cases import NEAR_MISSES, TRIGGERS


def _contents() -> list[tuple[str, str, dict]]:
    out = []
    cases = list(corpus()) + [c for cs in (*TRIGGERS.values(), *NEAR_MISSES.values()) for c in cs]
    for case in cases:
        if case.text is None:
            continue
        at = reasoning_end(case.text, case.kwargs.get("thinking"))
        content = case.text[at + len("</think>") :] if at >= 0 else case.text
        out.append((case.label, content, case.kwargs))
    return out


@pytest.mark.parametrize(("label", "content", "kwargs"), _contents(), ids=lambda x: str(x)[:40])
def test_fast_path_matches_machine(label: str, content: str, kwargs: dict) -> None:
    tools = ToolSet.from_any(kwargs.get("tools"))
    grammar = kwargs.get("grammar")
    end, _ = body_end_of(content)
    fast = parse_canonical(content, end, grammar, tools)
    if fast is None:
        return
    reports: list[tuple] = []
    slow = Machine(
        content,
        lambda *a: reports.append(a),
        grammar=grammar,
        tools=tools,
        finish_reason=kwargs.get("finish_reason"),
    ).run(scan(content), end)
    assert not reports, reports
    assert fast.calls == slow.calls
    assert fast.blocks == slow.blocks
    assert fast.values == slow.values
    assert fast.grammar == slow.grammar


def test_fast_path_is_taken_for_canonical_calls() -> None:
    taken = sum(
        parse_canonical(c, body_end_of(c)[0], k.get("grammar"), ToolSet.from_any(k.get("tools")))
        is not None
        for label, c, k in _contents()
        if label.startswith("call-")
    )
    assert taken >= 150
