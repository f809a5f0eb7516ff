"""Which speculative algorithms each release lets a DeepSeek-V4 launch run, read from that
release's own ``apply_deepseek_v4_defaults`` (``sglang/srt/arg_groups/deepseek_v4_hook.py``):
the strings its assertions compare ``speculative_algorithm`` with. The model refuses every
other SGLang algorithm (NGRAM among them) as that assertion does, with `plan`'s "SGLang
refuses" exit code, and runs NEXTN as EAGLE."""

from __future__ import annotations

import ast

import pytest

from exporter.cli import main
from exporter.cli.plan import EXIT_NOT_MODELLED, EXIT_REFUSED
from exporter.footprint.refusals import (
    SGLANG_SPECULATIVE_ALGORITHMS,
    dsv4_speculative_algorithms,
)
from exporter.footprint.releases import PUBLISHED_RELEASES, parse_release
from tests.sglang_release import source_file

HOOK = "sglang/srt/arg_groups/deepseek_v4_hook.py"


def _allowed_by_release(version: str) -> set[str]:
    """String constants compared with ``*.speculative_algorithm`` in the asserts of
    ``apply_deepseek_v4_defaults``."""
    tree = ast.parse(source_file(version, HOOK).read_text())
    func = next(
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.FunctionDef) and n.name == "apply_deepseek_v4_defaults"
    )
    found: set[str] = set()
    for node in ast.walk(func):
        if not isinstance(node, ast.Assert) or not isinstance(node.test, ast.Compare):
            continue
        left = node.test.left
        if isinstance(left, ast.Attribute) and left.attr == "speculative_algorithm":
            for comp in node.test.comparators:
                found |= {
                    c.value
                    for c in ast.walk(comp)
                    if isinstance(c, ast.Constant) and isinstance(c.value, str)
                }
    return found


@pytest.mark.parametrize("version", PUBLISHED_RELEASES)
def test_the_model_allows_what_the_release_allows(version):
    assert set(dsv4_speculative_algorithms(parse_release(version))) == _allowed_by_release(version)


@pytest.mark.parametrize("version", ["0.5.15", "0.5.16"])
@pytest.mark.parametrize("algorithm", SGLANG_SPECULATIVE_ALGORITHMS)
def test_plan_refuses_what_the_release_refuses(version, algorithm, capsys):
    """Through the CLI as a user runs it: refused (NGRAM...) exits 4 naming SGLang's check,
    DSPARK where allowed is not modelled (3), EAGLE and its alias NEXTN get a plan (0)."""
    allowed = _allowed_by_release(version)
    argv = ["plan", "--sglang-version", version, "--", "--speculative-algorithm", algorithm]
    code = main(argv)
    out, err = capsys.readouterr()
    name = "EAGLE" if algorithm == "NEXTN" else algorithm
    if name not in allowed:
        assert code == EXIT_REFUSED, err
        assert "apply_deepseek_v4_defaults" in err
    elif name == "DSPARK":
        assert code == EXIT_NOT_MODELLED and "dspark-draft" in out
    else:
        assert code == 0, err
