"""The false-positive guard: realistic clean outputs must all grade clean."""

from __future__ import annotations

from collections import Counter

from tests.dsml.fp_corpus import corpus


def test_corpus_is_large_and_varied() -> None:
    cases = list(corpus())
    assert len(cases) >= 300
    kinds = Counter(c.label.split("-")[0] for c in cases)
    assert set(kinds) == {"answer", "thinking", "call", "openai"}


def test_every_clean_sample_grades_clean() -> None:
    failures = []
    for case in corpus():
        result = case.grade()
        if result.verdict != case.verdict or result.reasons:
            failures.append((case.label, result.verdict, result.findings[:3]))
    assert not failures, failures[:5]
