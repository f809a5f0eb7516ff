"""SGLang's own DeepSeek DSML detectors, as a released wheel ships them, and what a client gets.

The detectors (``sglang/srt/function_call/deepseekv32_detector.py`` and its V4 / V4.1
subclasses) are pure Python. Importing them through ``sglang/__init__.py`` would pull the whole
runtime, so the package modules on the import path are created empty (``__path__`` pointing at
the release's directories) and only what the detectors import is loaded: the released
``environ.py``, ``core_types.py``, ``utils.py`` and ``base_format_detector.py`` run as
shipped. One module is replaced: ``entrypoints/openai/protocol.py`` needs the OpenAI SDK's
response types and ``sglang.utils`` (pybase64, ...); the detectors only read
``tool.function.name``, so :class:`Tool` / :class:`Function` / :class:`ToolChoice` here keep
the released field names and types (protocol.py, 0.5.23) and nothing else.

Call :func:`load` once per process: it mutates ``sys.modules`` (one release per process).

The client's view follows SGLang's serving code for 0.5.23:

- non-streaming: ``FunctionCallParser.parse_non_stream`` (function_call_parser.py): with tools
  given, ``has_tool_call`` or any parsed call means content = the detector's ``normal_text``
  and the calls; otherwise the whole text is content.
- streaming: ``parse_stream_chunk`` per delta (``parse_streaming_increment``), then
  ``parse_stream_end`` (``finish``); content is every released ``normal_text`` in order, calls
  are every emitted ``ToolCallItem`` (streamed calls are not checked against the tools).

Reasoning is split off before the tool parser sees the text (the reasoning parser runs
first), so callers pass the content part only.
"""

from __future__ import annotations

import json
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from tests.sglang_release import release_dir

VERSION = "0.5.23"
PARSERS = {"v3.2": "deepseekv32", "v4": "deepseekv4", "v4.1": "deepseekv41"}
_PACKAGES = (
    "sglang",
    "sglang.srt",
    "sglang.srt.entrypoints",
    "sglang.srt.entrypoints.openai",
    "sglang.srt.function_call",
)


class Function(BaseModel):
    description: str | None = None
    name: str
    parameters: object | None = None
    strict: bool | None = None


class Tool(BaseModel):
    type: str = Field(default="function")
    function: Function


class ToolChoiceFuncName(BaseModel):
    name: str | None = None


class ToolChoice(BaseModel):
    function: ToolChoiceFuncName
    type: str = "function"


_classes: dict[str, Any] = {}


def load(version: str = VERSION) -> dict[str, Any]:
    """{dialect: detector class} from the released wheel (imported once per process)."""
    if _classes:
        return _classes
    root = Path(release_dir(version))
    sys.path.insert(0, str(root))
    for name in _PACKAGES:
        mod = types.ModuleType(name)
        mod.__path__ = [str(root.joinpath(*name.split(".")))]
        sys.modules[name] = mod
    protocol = types.ModuleType("sglang.srt.entrypoints.openai.protocol")
    protocol.Tool = Tool  # type: ignore[attr-defined]
    protocol.ToolChoice = ToolChoice  # type: ignore[attr-defined]
    protocol.Function = Function  # type: ignore[attr-defined]
    sys.modules[protocol.__name__] = protocol
    import logging

    logging.getLogger("sglang").setLevel(logging.CRITICAL)  # dropped-invoke warnings
    from sglang.srt.function_call.deepseekv4_detector import (  # type: ignore[import-not-found]
        DeepSeekV4Detector,
    )
    from sglang.srt.function_call.deepseekv32_detector import (  # type: ignore[import-not-found]
        DeepSeekV32Detector,
    )
    from sglang.srt.function_call.deepseekv41_detector import (  # type: ignore[import-not-found]
        DeepSeekV41Detector,
    )

    _classes.update({"v3.2": DeepSeekV32Detector, "v4": DeepSeekV4Detector})
    _classes["v4.1"] = DeepSeekV41Detector
    return _classes


def tools_of(openai_tools: list[dict[str, Any]]) -> list[Tool]:
    return [Tool.model_validate(t) for t in openai_tools]


Call = tuple[str, str]  # (name, arguments as canonical JSON, or the raw text if not JSON)


@dataclass(frozen=True)
class View:
    """What the client receives: the content (stripped) and the calls."""

    content: str
    calls: tuple[Call, ...]


def _canonical_args(parameters: str) -> str:
    try:
        return json.dumps(json.loads(parameters), sort_keys=True, ensure_ascii=False)
    except (ValueError, TypeError):
        return parameters


def non_streaming(dialect: str, content: str, tools: list[Tool]) -> View:
    det = load()[dialect]()
    has = det.has_tool_call(content)
    res = det.detect_and_parse(content, tools)
    if res.calls or has:
        text, calls = res.normal_text, res.calls
    else:
        text, calls = content, []
    return View(text.strip(), tuple((c.name, _canonical_args(c.parameters)) for c in calls))


def streaming(dialect: str, content: str, tools: list[Tool], sizes: list[int]) -> View:
    """Feed ``content`` in deltas of the given sizes (cycled), then end the stream."""
    det = load()[dialect]()
    pieces: list[str] = []
    calls: list[Call] = []
    pos, k = 0, 0
    while pos < len(content):
        n = sizes[k % len(sizes)]
        k += 1
        res = det.parse_streaming_increment(content[pos : pos + n], tools)
        pos += n
        pieces.append(res.normal_text or "")
        calls.extend((c.name or "", _canonical_args(c.parameters)) for c in res.calls)
    end = det.finish(tools)
    pieces.append(end.normal_text or "")
    calls.extend((c.name or "", _canonical_args(c.parameters)) for c in end.calls)
    return View("".join(pieces).strip(), tuple(calls))
