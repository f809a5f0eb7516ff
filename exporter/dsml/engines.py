"""The serving engine's reading of a DSML block, carried by the dialect.

SGLang's and vLLM's DeepSeek-V4 tool parsers agree on most of the grammar, not all of it. The
grader grades a block as the deployment's parser delivers it to the client, so the dialect the
grader is given names the engine too: ``v4@vllm`` is the ``v4`` grammar as vLLM's
``deepseek_v4`` parser reads it (a plain ``v4`` is SGLang's ``deepseekv4``). Everything else in
the grader (samplers, metrics labels, the grammar itself) sees only the base dialect:
:class:`EngineDialect` *is* that string (``"v4"``), with the engine as an attribute, so
comparisons with ``"v4"`` hold everywhere and the engine rules below are the one place that
reads it.

Where vLLM reads a block differently, per release (:mod:`exporter.dsml.vllm_releases`, the
table of what each release range delivers, with the source file of each rule):

- a self-closing zero-argument invoke V4 models are trained to emit
  (``<｜DSML｜invoke name="x"/>``, V4.1 ``<｜DSML｜ invoke name="x"/>``) is never delivered as
  the call: 0.23-0.24 drop it (streaming: every later call of the block too), 0.25+ open a call
  at ``<｜DSML｜invoke name="`` whose name runs to the next ``">``, swallowing the closer or
  the next invoke's tag. Graded ``dialect_mismatch``: a spelling the deployment's parser cannot
  read;
- 0.30+ also look for an invoke opener without a block and for other block openers
  (``toolcalls``, ``tool``; 0.34 V4.1 `` tool_calls``): quoted in prose, those are run as a
  call too (:func:`openers`, read by ``quoted_block``).

The grammar string names the release: ``v4@vllm-0.24.0`` (``v4@vllm``: the newest known rules).
The differential test (``tests/dsml/test_vllm_differential.py``) holds these rules to the
released parsers.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from exporter.dsml import markers as m
from exporter.dsml.result import FindingSink
from exporter.dsml.vllm_releases import Source, VllmRules, rules_for

ENGINES: tuple[str, ...] = ("sglang", "vllm")
SEPARATOR = "@"


RELEASE_SEPARATOR = "-"


class EngineDialect(str):
    """A base dialect (``v4``, ``v3.2``) that remembers which engine's parser reads it, and
    for vLLM which release (None: not known, the newest rules)."""

    engine: str
    release: str | None

    def __new__(cls, dialect: str, engine: str, release: str | None = None) -> EngineDialect:
        obj = super().__new__(cls, dialect)
        obj.engine = engine
        obj.release = release
        return obj

    def __reduce__(self) -> tuple[type[EngineDialect], tuple[str, str, str | None]]:
        """Pickled with its engine and release: a verdict crosses from the grading process to
        the sidecar's (str's own pickling would call ``__new__`` without them)."""
        return (EngineDialect, (str(self), self.engine, self.release))

    def vllm_rules(self) -> tuple[VllmRules, Source]:
        """The vLLM release's rules and where they came from (see :func:`rules_for`)."""
        return rules_for(self.release)


def split_release(grammar: str) -> tuple[str, str | None, str | None]:
    """(base dialect, engine or None, release or None) of ``v4@vllm-0.30.0`` / ``v4@vllm`` /
    ``v4``; ValueError for an unknown engine."""
    base, sep, qualifier = grammar.partition(SEPARATOR)
    if not sep:
        return base, None, None
    engine, _, release = qualifier.strip().partition(RELEASE_SEPARATOR)
    engine = engine.lower()
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r} in dialect {grammar!r}: use {ENGINES}")
    return base.strip(), engine, release.strip() or None


def split(grammar: str) -> tuple[str, str | None]:
    """(base dialect, engine or None) of ``v4@vllm`` / ``v4``; ValueError for an unknown engine."""
    base, engine, _ = split_release(grammar)
    return base, engine


def qualify(dialect: str | None, engine: str | None, release: str | None = None) -> str | None:
    """``v4`` + ``vllm`` (+ ``0.30.0``) -> ``v4@vllm`` (``v4@vllm-0.30.0``); SGLang (the
    grammar's own reading) stays ``v4``."""
    if dialect is None or engine in (None, "sglang") or SEPARATOR in dialect:
        return dialect  # SGLang's reading, or already qualified
    suffix = f"{RELEASE_SEPARATOR}{release}" if engine == "vllm" and release else ""
    return f"{dialect}{SEPARATOR}{engine}{suffix}"


# The engine-qualified dialects there are rules for: vLLM's DeepSeek parsers (deepseek_v32,
# deepseek_v4; deepseek_v41 from vLLM 0.30).
QUALIFIED: tuple[str, ...] = ("v4@vllm", "v3.2@vllm", "v4.1@vllm")


def engine_of(grammar: str | None) -> str | None:
    return getattr(grammar, "engine", None)


def _self_closing_invoke(grammar: str) -> re.Pattern[str]:
    return re.compile(f'<{re.escape(m.tag_prefix(grammar))}{m.INVOKE}\\s+name="[^"]*"\\s*/>')


_SELF_CLOSING = {g: _self_closing_invoke(g) for g in m.GRAMMARS}
_WHY_SELF_CLOSING = {
    "dropped": "self-closing invoke: vLLM {rel}'s parser drops the call",
    "name_swallows": "self-closing invoke: vLLM {rel} names a call after the next tag too",
}


def openers(grammar: str | None) -> tuple[str, ...]:
    """Openers the deployment's vLLM release runs besides the grammar's block opener: the
    block openers it also accepts and, 0.30+, the invoke opener (a call without a block)."""
    if not isinstance(grammar, EngineDialect) or grammar.engine != "vllm":
        return ()
    rules, _ = grammar.vllm_rules()
    prefix = m.tag_prefix(grammar)
    found = [f"<{prefix}{name}>" for g, name in rules.opener_variants if g == grammar]
    if rules.invoke_outside_block:
        found.append(f'<{prefix}{m.INVOKE} name="')
    return tuple(found)


def check_content(
    sink: FindingSink,
    text: str,
    base: int,
    grammar: str | None,
    blocks: Sequence[tuple[int, int]],
) -> None:
    """Report what the grammar accepts but the deployment's engine does not deliver.

    Only inside ``blocks`` (the tool-call blocks the grammar found, an unfinished one
    included): outside a block, a self-closing invoke (prose quoting one, a code fence) is
    content to vLLM as to SGLang, and flagging it would call a clean answer degenerate."""
    if not isinstance(grammar, EngineDialect) or grammar.engine != "vllm":
        return
    pattern = _SELF_CLOSING.get(str(grammar))
    if pattern is None:
        return
    rules, _ = grammar.vllm_rules()
    why = _WHY_SELF_CLOSING[rules.self_closing].format(rel=rules.name)
    for a, b in blocks:
        for hit in pattern.finditer(text, a, b):
            sink.add("dialect_mismatch", hit.start() + base, hit.end() + base, "tool_calls", why)
