"""Small helpers to write DSML test inputs readably (canonical pieces and damaged ones)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from exporter.dsml import grade_openai_response, grade_text, render_completion
from exporter.dsml import markers as m
from exporter.dsml.result import Result

B = m.BAR
EOS = m.EOS
OPEN = m.block_open("v4")
CLOSE = m.block_close("v4")
OPEN32 = m.block_open("v3.2")
CLOSE32 = m.block_close("v3.2")
INVOKE_CLOSE = m.INVOKE_CLOSE
PARAM_CLOSE = m.PARAMETER_CLOSE


def inv(name: str) -> str:
    return m.invoke_open(name)


def par(name: str, value: str, string: bool = True) -> str:
    return f"{m.parameter_open(name, string)}{value}{PARAM_CLOSE}"


def block(*invokes: str, grammar: str = "v4", sep: str = "\n") -> str:
    """A block around already rendered invokes (``sep`` between every tag line)."""
    return f"\n\n{m.block_open(grammar)}{sep}{sep.join(invokes)}{sep}{m.block_close(grammar)}"


def invoke(name: str, *params: str, sep: str = "\n") -> str:
    return sep.join([inv(name), *params, INVOKE_CLOSE])


def par41(name: str, value: str, string: bool = True) -> str:
    """A V4.1 parameter (a space after every marker)."""
    return f"{m.parameter_open(name, string, 'v4.1')}{value}{m.parameter_close('v4.1')}"


def invoke41(name: str, *params: str) -> str:
    return "\n".join([m.invoke_open(name, "v4.1"), *params, m.invoke_close("v4.1")])


def block41(*invokes: str) -> str:
    return f"\n\n{m.block_open('v4.1')}\n{chr(10).join(invokes)}\n{m.block_close('v4.1')}"


def call(name: str, **args: Any) -> tuple[str, dict[str, Any]]:
    return name, args


def completion(content: str = "", *calls: tuple[str, dict[str, Any]], **kw: Any) -> str:
    return render_completion(content, list(calls), **kw)


def openai_message(
    content: str | None = None,
    reasoning: str | None = None,
    tool_calls: list[tuple[str, Any]] = (),
    finish_reason: str = "stop",
) -> dict[str, Any]:
    """A chat.completion object; tool call arguments given as str are passed through raw."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    if tool_calls:
        message["tool_calls"] = [
            {
                "id": f"call_{i}",
                "type": "function",
                "function": {
                    "name": name,
                    "arguments": args if isinstance(args, str) else json.dumps(args),
                },
            }
            for i, (name, args) in enumerate(tool_calls)
        ]
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
    }


def tool(name: str, required: tuple[str, ...] = (), **props: str) -> dict[str, Any]:
    """An OpenAI tool object with ``props`` as {name: json type}."""
    return {
        "type": "function",
        "function": {
            "name": name,
            "parameters": {
                "type": "object",
                "properties": {k: {"type": v} for k, v in props.items()},
                "required": list(required),
            },
        },
    }


@dataclass
class Case:
    """One grading input: raw ``text`` (grade_text) or an OpenAI ``response``."""

    label: str
    text: str | None = None
    response: Any = None
    kwargs: dict[str, Any] = field(default_factory=dict)
    verdict: str | None = None

    def grade(self) -> Result:
        if self.text is not None:
            return grade_text(self.text, **self.kwargs)
        return grade_openai_response(self.response, **self.kwargs)

    def __repr__(self) -> str:
        return self.label


def apply_edits(text: str, edits: list[tuple[float, int, str]]) -> str:
    """``text`` damaged by hypothesis-drawn edits: (where as a fraction of the length, 0 insert
    / 1 delete / 2 replace, the piece inserted or put in place of one character)."""
    chars = list(text)
    for where, op, piece in edits:
        i = int(where * len(chars))
        if op == 0:
            chars.insert(i, piece)
        elif op == 1 and i < len(chars):
            del chars[i]
        elif i < len(chars):
            chars[i] = piece
    return "".join(chars)
