"""What each vLLM release's DeepSeek DSML tool parser hands the client: one rule set per range
of releases, read from the released wheels' sources and held to them by the differential.

The grader grades a block as the deployment's parser delivers it (:mod:`exporter.dsml.engines`
reads these rules). vLLM's ``--tool-call-parser deepseek_v32`` / ``deepseek_v4`` /
``deepseek_v41`` changed parser twice (and then rules within the engine, per the fields
below; 0.28 alone ran the tool and reasoning parsers as one pass, reverted in 0.29):

- 0.23-0.24: ``vllm/tool_parsers/deepseekv4_tool_parser.py`` over
  ``deepseekv32_tool_parser.py`` (text-level regexes);
- 0.25-0.34: ``vllm/tool_parsers/deepseekv4_engine_tool_parser.py`` (and
  ``deepseekv32_engine_tool_parser.py``, ``deepseekv41_engine_tool_parser.py`` from 0.30) over
  ``vllm/parser/deepseek_v4.py`` (``deepseek_v32.py``, ``deepseek_v41.py``) and the pure-Python
  state machine in ``vllm/parser/engine/`` (``streaming_parser_engine.py``, ``parser_engine.py``),
  each rule below naming the release and the file it comes from.

A version is selected by its release number (``0.30.0``, ``0.30.1``, ``0.31.0rc1`` count as
their release). A release newer than the newest known, or a version string that names none, is
graded with the newest rules and says so (``inferred``), never silently; a release older than
0.23 has no ``deepseek_v4`` parser and is graded with the oldest rules, also ``inferred``.
docs/vllm.md has the table with the sources.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from exporter.versions import release_number

SelfClosing = Literal["dropped", "name_swallows"]


@dataclass(frozen=True)
class VllmRules:
    """How one range of vLLM releases (first..last inclusive) delivers a DSML block."""

    name: str
    first: tuple[int, int, int]
    last: tuple[int, int, int]
    # The file that decides it (for the docs and the table test).
    parser_file: str
    # A self-closing ``<｜DSML｜invoke name="x"/>`` (V4's zero-argument spelling):
    # 0.23-0.24 ``invoke_complete_regex`` misses it: non-streaming the call is dropped,
    # streaming the parse stops there (``dropped``). 0.25+ the engine's INVOKE_PREFIX
    # (``<｜DSML｜invoke name="``) opens the call and the name runs to the next ``">``
    # (INVOKE_NAME_END): the client gets a call named ``x"/>\n</｜DSML｜tool_calls>`` or one
    # that swallows the next invoke's tag (``name_swallows``). Harm either way.
    self_closing: SelfClosing
    # ``deepseek_v41`` (spaced V4.1 DSML) registered in vllm/tool_parsers/__init__.py.
    has_v41: bool = False
    # Block openers accepted besides the trained one, per dialect (deepseek_v4.py /
    # deepseek_v41.py ``DSML_TOOL_START_VARIANTS``): 0.30+ V4 ``toolcalls``/``tool``,
    # 0.34 V4.1 also `` tool_calls`` (V4's name, V4.1's spacing).
    opener_variants: tuple[tuple[str, str], ...] = ()
    # 0.30+: ``(CONTENT, INVOKE_PREFIX)`` starts a call: an invoke with no block opener before
    # it (in prose, in a Markdown fence) reaches the client as a call and ends the content.
    invoke_outside_block: bool = False
    # Text after the closing block: non-streaming every release drops it; streaming,
    # 0.23-0.29 send it as content (0.25-0.29: ``TOOL_END -> CONTENT``), 0.30+ stay in
    # TOOL_BETWEEN ("a tool call ends the turn") and drop it.
    after_block_streamed: bool = True
    # A block that yields no call: 0.23-0.27 and 0.29 hand the client the whole text as
    # content (the regex parser's fallback; the engine's tool adapter run after the reasoning
    # one), 0.28 and 0.30+ only the text before the block opener: the damaged block vanishes
    # from the client's view.
    unparsed_block_kept: bool = True
    # ``<think>`` / ``</think>`` inside a call: 0.25-0.27, 0.29 and 0.30+ read them in any
    # state (``<think>`` opens reasoning until ``</think>``, a bare ``</think>`` is dropped),
    # so a value loses them or is cut; 0.28 (``parser_manager`` runs one engine pass,
    # ``_get_parser_engine_cls``, reverted in 0.29) and 0.23-0.24 keep them as the value's text.
    think_tags_anywhere: bool = False
    # 0.30+: a parameter's value also ends where the next ``<｜DSML｜parameter name=`` starts
    # (``_PARAM_RE``'s lookahead), so a damaged parameter closer costs only that closer; before,
    # the value runs on to the next intact closer and swallows the parameters between.
    param_ends_at_next_param: bool = False
    # 0.31+: a parameter without ``string=`` is kept (JSON, else the literal text);
    # before, ``_PARAM_RE`` requires ``string="true|false"`` and the parameter is lost.
    missing_string_flag_kept: bool = False

    @property
    def state_machine(self) -> bool:
        """0.25+: the parser engine (``vllm/parser/engine/``) reads the output terminal by
        terminal; 0.23-0.24: regexes over complete blocks (the simulator restates both)."""
        return self.parser_file.startswith("vllm/parser/")

    def covers(self, release: tuple[int, int, int]) -> bool:
        return self.first <= release <= self.last


_R23 = VllmRules(
    name="0.23-0.24",
    first=(0, 23, 0),
    last=(0, 24, 99),
    parser_file="vllm/tool_parsers/deepseekv32_tool_parser.py",
    self_closing="dropped",
)
_R25 = replace(
    _R23,
    name="0.25-0.27",
    first=(0, 25, 0),
    last=(0, 27, 99),
    parser_file="vllm/parser/deepseek_v4.py",
    self_closing="name_swallows",
    think_tags_anywhere=True,
)
_R28 = replace(
    _R25,
    name="0.28",
    first=(0, 28, 0),
    last=(0, 28, 99),
    unparsed_block_kept=False,
    think_tags_anywhere=False,
)
_R29 = replace(_R25, name="0.29", first=(0, 29, 0), last=(0, 29, 99))
_R30 = replace(
    _R29,
    name="0.30",
    first=(0, 30, 0),
    last=(0, 30, 99),
    has_v41=True,
    opener_variants=(("v4", "toolcalls"), ("v4", "tool")),
    invoke_outside_block=True,
    after_block_streamed=False,
    unparsed_block_kept=False,
    param_ends_at_next_param=True,
)
_R31 = replace(
    _R30, name="0.31-0.33", first=(0, 31, 0), last=(0, 33, 99), missing_string_flag_kept=True
)
_R34 = replace(
    _R31,
    name="0.34",
    first=(0, 34, 0),
    last=(0, 34, 99),
    opener_variants=(*_R31.opener_variants, ("v4.1", "tool_calls")),
)
RULES: tuple[VllmRules, ...] = (_R23, _R25, _R28, _R29, _R30, _R31, _R34)
NEWEST = RULES[-1]
# Fact sources of the rule set chosen: the release is in the table, or it is not (newer,
# older or unparseable: the nearest rules, flagged) or unknown (no /version yet: the newest).
Source = Literal["release", "inferred", "unknown"]


def parse_release(version: str) -> tuple[int, int, int] | None:
    """(major, minor, patch) of ``0.30.1``, ``v0.34.0rc1``, ``0.25.0+cu130``; None otherwise
    (the release-number rule SGLang's versions are read by, one implementation)."""
    return release_number(version)


def rules_for(version: str | None) -> tuple[VllmRules, Source]:
    """The rules of the release vLLM reports on ``/version`` and where that choice came from."""
    if not version:
        return NEWEST, "unknown"
    release = parse_release(version)
    if release is None:
        return NEWEST, "inferred"
    for rules in RULES:
        if rules.covers(release):
            return rules, "release"
    return (RULES[0] if release < RULES[0].first else NEWEST), "inferred"
