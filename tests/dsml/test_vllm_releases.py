"""The grader's table of vLLM releases (:mod:`exporter.dsml.vllm_releases`) read back off the
released parsers: each rule is observed by :mod:`tests.dsml.vllm_probe` running that release's
own ``deepseek_v32`` / ``deepseek_v4`` / ``deepseek_v41`` tool parser, and must equal the table.

By default the releases on each side of every rule change (0.24|0.25, 0.27|0.28|0.29|0.30,
0.30|0.31, 0.33|0.34) and the differential's; ``DSV4_VLLM_ALL_RELEASES=1`` probes every
release 0.23-0.34 (each wheel is ~400 MB to fetch once; its .py files are cached).
"""

from __future__ import annotations

import itertools
import os

import pytest

from exporter.dsml.vllm_releases import NEWEST, RULES, parse_release, rules_for
from tests.dsml.vllm_oracle import RELEASES, run_release

# The probe runs vLLM's parsers, not the grader: one kernel is enough.
DSML_KERNELS = ("python",)  # always there (c is skipped where not built)
pytestmark = pytest.mark.timeout(900)  # wheel downloads on a fresh machine

# Every release published 0.23.0-0.34.0 (pip index versions vllm).
ALL = (
    "0.23.0", "0.24.0", "0.25.0", "0.25.1", "0.26.0", "0.27.0", "0.27.1", "0.28.0", "0.29.0",
    "0.30.0", "0.31.0", "0.32.0", "0.33.0", "0.34.0",
)  # fmt: skip
BOUNDARIES = ("0.27.1", "0.29.0", "0.31.0", "0.33.0")
PROBED = (
    ALL
    if os.environ.get("DSV4_VLLM_ALL_RELEASES")
    else tuple(v for v in ALL if v in RELEASES or v in BOUNDARIES)
)


@pytest.mark.parametrize("version", PROBED)
def test_the_table_is_what_the_release_parser_does(version: str) -> None:
    seen = run_release("tests.dsml.vllm_probe", version)
    rules, how = rules_for(version)
    assert how == "release"
    assert seen["has_v41"] == rules.has_v41
    assert set(seen["self_closing"].values()) == {rules.self_closing}, seen["self_closing"]
    assert seen["after_block"] == [False, rules.after_block_streamed]
    assert seen["opener_variants"] == sorted(list(v) for v in rules.opener_variants)
    assert seen["invoke_outside_block"] == rules.invoke_outside_block
    assert seen["missing_string_flag_kept"] == rules.missing_string_flag_kept
    assert seen["unparsed_block_kept"] == rules.unparsed_block_kept
    assert seen["param_ends_at_next_param"] == rules.param_ends_at_next_param
    assert seen["think_tags_anywhere"] == rules.think_tags_anywhere


def test_the_table_covers_every_release_without_gaps() -> None:
    assert RULES[0].first == (0, 23, 0) and parse_release(ALL[-1]) is not None
    for before, after in itertools.pairwise(RULES):
        assert after.first == (before.last[0], before.last[1] + 1, 0)
    for version in ALL:
        assert rules_for(version)[1] == "release"


@pytest.mark.parametrize(
    ("version", "source"),
    [("0.40.0", "inferred"), ("nightly", "inferred"), (None, "unknown"), ("", "unknown")],
)
def test_a_release_not_in_the_table_gets_the_newest_rules_and_says_so(
    version: str | None, source: str
) -> None:
    assert rules_for(version) == (NEWEST, source)


def test_suffixed_versions_count_as_their_release() -> None:
    assert rules_for("0.30.1")[0].name == "0.30"
    assert rules_for("v0.31.0rc1")[0].name == "0.31-0.33"
    assert rules_for("0.25.0+cu130")[0].self_closing == "name_swallows"
    assert rules_for("0.22.1") == (RULES[0], "inferred")
