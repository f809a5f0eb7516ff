"""Render canonical DSML from structured calls: the grammar written forwards.

The grader's tests, the false-positive corpus and the benchmark build their inputs with this,
and a canary can use it to know exactly what a well-formed answer looks like.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from exporter.dsml import markers as m

Call = tuple[str, Mapping[str, Any]]


def render_value(value: Any) -> tuple[str, bool]:
    """(text, is_string): strings go raw with string="true", anything else as JSON."""
    if isinstance(value, str):
        return value, True
    return json.dumps(value, ensure_ascii=False), False


def render_invoke(
    name: str, arguments: Mapping[str, Any], *, self_closing: bool = False, grammar: str = "v4"
) -> str:
    """One invoke; ``self_closing`` uses V4's ``<...invoke name="x"/>`` for zero arguments."""
    if not arguments and self_closing:
        return m.invoke_self_closing(name, grammar)
    lines = [m.invoke_open(name, grammar)]
    close = m.parameter_close(grammar)
    for key, value in arguments.items():
        text, is_string = render_value(value)
        lines.append(f"{m.parameter_open(key, is_string, grammar)}{text}{close}")
    lines.append(m.invoke_close(grammar))
    return "\n".join(lines)


def render_block(calls: Iterable[Call], grammar: str = "v4", *, self_closing: bool = False) -> str:
    """The block with its canonical leading blank line: ``\\n\\n<block>\\n...\\n</block>``."""
    invokes = [render_invoke(n, a, self_closing=self_closing, grammar=grammar) for n, a in calls]
    body = "\n".join(invokes)
    return f"\n\n{m.block_open(grammar)}\n{body}\n{m.block_close(grammar)}"


def render_completion(
    content: str = "",
    calls: Iterable[Call] = (),
    *,
    reasoning: str | None = None,
    grammar: str = "v4",
    eos: bool = False,
    self_closing: bool = False,
) -> str:
    """A whole raw completion: ``{reasoning}</think>{content}{block}[EOS]``."""
    out = "" if reasoning is None else reasoning + m.THINK_CLOSE
    out += content
    calls = list(calls)
    if calls:
        out += render_block(calls, grammar, self_closing=self_closing)
    if eos:
        out += m.EOS
    return out
