"""The serving engine's reading of a DSML block, carried by the dialect.

SGLang's and vLLM's DeepSeek-V4 tool parsers agree on most of the grammar, not all of it. The
grader grades a block as the deployment's parser delivers it to the client, so the dialect the
grader is given names the engine too: ``v4@vllm`` is the ``v4`` grammar as vLLM's
``deepseek_v4`` parser reads it (a plain ``v4`` is SGLang's ``deepseekv4``). Everything else in
the grader (samplers, metrics labels, the grammar itself) sees only the base dialect:
:class:`EngineDialect` *is* that string (``"v4"``), with the engine as an attribute, so
comparisons with ``"v4"`` hold everywhere and the engine rules below are the one place that
reads it.

Where vLLM reads a block differently (vLLM 0.23.0 and 0.24.0, the releases the differential
runs; ``vllm/tool_parsers/deepseekv32_tool_parser.py``, which ``deepseek_v4`` subclasses):

- an invoke must be ``<｜DSML｜invoke name="x">...</｜DSML｜invoke>`` (``invoke_complete_regex``);
  the self-closing zero-argument invoke V4 models are trained to emit
  (``<｜DSML｜invoke name="x"/>``) matches neither that nor the streaming ``invoke_start_regex``.
  Non-streaming the call is dropped (the whole block reaches the client as content when it was
  the only call); streaming, the parser stops at it and every later call of the block is lost.
  Graded ``dialect_mismatch``: a spelling the deployment's parser cannot read.

The differential test (``tests/dsml/test_vllm_differential.py``) holds these rules to the
released parsers.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from exporter.dsml import markers as m
from exporter.dsml.result import FindingSink

ENGINES: tuple[str, ...] = ("sglang", "vllm")
SEPARATOR = "@"


class EngineDialect(str):
    """A base dialect (``v4``, ``v3.2``) that remembers which engine's parser reads it."""

    engine: str

    def __new__(cls, dialect: str, engine: str) -> EngineDialect:
        obj = super().__new__(cls, dialect)
        obj.engine = engine
        return obj

    def __reduce__(self) -> tuple[type[EngineDialect], tuple[str, str]]:
        """Pickled with its engine: a verdict crosses from the grading process to the
        sidecar's (str's own pickling would call ``__new__`` without the engine)."""
        return (EngineDialect, (str(self), self.engine))


def split(grammar: str) -> tuple[str, str | None]:
    """(base dialect, engine or None) of ``v4@vllm`` / ``v4``; ValueError for an unknown engine."""
    base, sep, engine = grammar.partition(SEPARATOR)
    if not sep:
        return base, None
    engine = engine.strip().lower()
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r} in dialect {grammar!r}: use {ENGINES}")
    return base.strip(), engine


def qualify(dialect: str | None, engine: str | None) -> str | None:
    """``v4`` + ``vllm`` -> ``v4@vllm``; SGLang (the grammar's own reading) stays ``v4``."""
    if dialect is None or engine in (None, "sglang") or SEPARATOR in dialect:
        return dialect  # SGLang's reading, or already qualified
    return f"{dialect}{SEPARATOR}{engine}"


# The engine-qualified dialects there are rules for: vLLM's DeepSeek parsers (deepseek_v32,
# deepseek_v4; deepseek_v41 from vLLM 0.30).
QUALIFIED: tuple[str, ...] = ("v4@vllm", "v3.2@vllm", "v4.1@vllm")


def engine_of(grammar: str | None) -> str | None:
    return getattr(grammar, "engine", None)


_SELF_CLOSING_INVOKE = re.compile(f'<{re.escape(m.MARKER)}{m.INVOKE}\\s+name="[^"]*"\\s*/>')
# vLLM 0.30+ deepseek_v41 (issue 32): a self-closing invoke followed by another invoke becomes
# one call whose name swallows the next tag
_SELF_CLOSING_THEN_INVOKE = re.compile(
    f'<{re.escape(m.MARKER)} {m.INVOKE}\\s+name="[^"]*"\\s*/>'
    f"\\s*<{re.escape(m.MARKER)} {m.INVOKE}\\b"
)


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
    if engine_of(grammar) != "vllm":
        return
    if grammar == "v4.1":
        for a, b in blocks:
            for hit in _SELF_CLOSING_THEN_INVOKE.finditer(text, a, b):
                sink.add(
                    "dialect_mismatch",
                    hit.start() + base,
                    hit.end() + base,
                    "tool_calls",
                    "self-closing invoke before another: vLLM's deepseek_v41 merges the two",
                )
        return
    for a, b in blocks:
        for hit in _SELF_CLOSING_INVOKE.finditer(text, a, b):
            sink.add(
                "dialect_mismatch",
                hit.start() + base,
                hit.end() + base,
                "tool_calls",
                "self-closing invoke: vLLM's deepseek_v4 parser drops the call",
            )
