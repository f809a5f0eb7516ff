"""vLLM's own DeepSeek DSML tool parser and reasoning parser, as a released wheel ships them.

What a vLLM client receives is decided by three pure-Python pieces of the release:
``vllm/tool_parsers/deepseekv4_tool_parser.py`` (and the V3.2 parser it subclasses),
``vllm/reasoning/deepseek_v3_reasoning_parser.py`` (registered as ``deepseek_v4``: R1-style
``<think>`` splitting when the request asks for thinking, identity otherwise) and
``vllm/parser/abstract_parser.py``'s ``DelegatingParser`` (``ParserManager.get_parser``
composes the two by their ``--tool-call-parser`` / ``--reasoning-parser`` names, ``parse`` for a
whole output, ``parse_delta`` per streamed delta). Those run as shipped, looked up by name in
the release's own registries.

Importing them through ``vllm/__init__.py`` would start the engine, so the package modules on
the path are created empty and only the parser packages load for real. Every other ``vllm.*``
module they import (logger, envs, sampling params, tokenizers, MCP tool server, ...) and every
missing third-party module (transformers) is a permissive stand-in
(:mod:`tests.conformance.native_stubs`); ``regex`` (a C extension) is the stdlib ``re``, which
reads the parser's patterns the same. Three protocol modules are replaced by the pydantic
models below: the released field names and types of the classes the parsers construct or
read (``engine/protocol.py``, ``chat_completion/protocol.py``, 0.24.0), nothing else.

The tokenizer is a stand-in too: the parsers need ``<think>`` / ``</think>`` in the vocabulary
and, streaming, token ids per delta (one id per character, the two think markers one id each,
as DeepSeek's tokenizer has them as single tokens, so a delta never splits them). vLLM v1's
detokenizer leaves the stop token out of the text, so a trailing end-of-sentence token is
removed before the parsers see the output.

Call :func:`load` once per process (it mutates ``sys.modules``; one release per process).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import re
import sys
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field

from exporter.dsml import markers as m
from tests.conformance.native_stubs import StubModule
from tests.dsml.sglang_oracle import View
from tests.dsml.sglang_oracle import _canonical_args as canonical_args
from tests.sglang_release import release_dir

# The releases whose DeepSeek-V4 parsers are the text-level pure-Python parsers. 0.25 moved
# ``deepseek_v4`` onto vllm/parser/engine (a token-id scanner over the model's own tokenizer),
# 0.26 onto a compiled Rust engine (vllm/_rust_tool_parser.abi3.so): not oracles here yet.
RELEASES = ("0.23.0", "0.24.0")
# vLLM --tool-call-parser name -> the dialect it reads (vllm/tool_parsers/__init__.py).
PARSERS = {"v3.2": "deepseek_v32", "v4": "deepseek_v4"}
REASONING_PARSER = "deepseek_v4"
_BARE = ("vllm", "vllm.parser", "vllm.utils", "vllm.entrypoints", "vllm.entrypoints.openai")
_REAL = (
    "vllm.tool_parsers",
    "vllm.reasoning",
    "vllm.parser.",
    "vllm.utils.collection_utils",
    "vllm.utils.mistral",
    "vllm.utils.import_utils",
)


# --- the protocol models the parsers build (released field names, 0.24.0) ----------------------
class FunctionDefinition(BaseModel):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None
    defer_loading: bool | None = None


class ChatCompletionToolsParam(BaseModel):
    type: Literal["function"] = "function"
    function: FunctionDefinition
    defer_loading: bool | None = None


class ChatCompletionNamedToolChoiceParam(BaseModel):
    function: dict[str, Any]
    type: Literal["function"] = "function"


class ChatCompletionRequest(BaseModel):
    """The request fields the parsers read (tools, tool_choice, the thinking kwargs)."""

    tools: list[ChatCompletionToolsParam] | None = None
    tool_choice: Any = "auto"
    chat_template_kwargs: dict[str, Any] | None = None
    skip_special_tokens: bool = True
    include_reasoning: bool = True
    structured_outputs: Any = None
    response_format: Any = None


class ResponsesRequest(BaseModel):
    tools: list[Any] | None = None
    tool_choice: Any = "auto"


class FunctionCall(BaseModel):
    id: str | None = Field(default=None, exclude=True)
    name: str
    arguments: str


class ToolCall(BaseModel):
    id: str = "call_0"
    type: Literal["function"] = "function"
    function: FunctionCall


class DeltaFunctionCall(BaseModel):
    name: str | None = None
    arguments: str | None = None


class DeltaToolCall(BaseModel):
    id: str | None = None
    type: Literal["function"] | None = None
    index: int
    function: DeltaFunctionCall | None = None


class ExtractedToolCallInformation(BaseModel):
    tools_called: bool
    tool_calls: list[ToolCall]
    content: str | None = None


class DeltaMessage(BaseModel):
    role: str | None = None
    content: str | None = None
    reasoning: str | None = None
    tool_calls: list[DeltaToolCall] = Field(default_factory=list)


_PROTOCOL = {
    "vllm.entrypoints.openai.engine.protocol": (
        FunctionDefinition,
        FunctionCall,
        ToolCall,
        DeltaFunctionCall,
        DeltaToolCall,
        ExtractedToolCallInformation,
        DeltaMessage,
    ),
    "vllm.entrypoints.openai.chat_completion.protocol": (
        ChatCompletionRequest,
        ChatCompletionToolsParam,
        ChatCompletionNamedToolChoiceParam,
    ),
    "vllm.entrypoints.openai.responses.protocol": (ResponsesRequest,),
}


class _Loader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        mod = StubModule(spec.name)
        mod.__path__ = []
        return mod

    def exec_module(self, module: types.ModuleType) -> None:
        pass


class _Finder(importlib.abc.MetaPathFinder):
    """Stand-ins for every ``vllm`` module outside the parser packages, first; for a missing
    third-party module, last (``last=True``)."""

    def __init__(self, last: bool) -> None:
        self._last = last

    def find_spec(
        self, name: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        is_vllm = name == "vllm" or name.startswith("vllm.")
        if self._last == is_vllm or (is_vllm and name.startswith(_REAL)):
            return None
        return importlib.machinery.ModuleSpec(name, _Loader(), is_package=True)


class Tokenizer:
    """DeepSeek's think markers as single tokens; any other character one token."""

    SPECIAL: ClassVar[dict[str, int]] = {m.THINK_OPEN: 1, m.THINK_CLOSE: 2}

    def get_vocab(self) -> dict[str, int]:
        return dict(self.SPECIAL)

    def tokens(self, text: str) -> list[tuple[str, int]]:
        split = re.split(f"({re.escape(m.THINK_OPEN)}|{re.escape(m.THINK_CLOSE)})", text)
        out: list[tuple[str, int]] = []
        for part in split:
            if part in self.SPECIAL:
                out.append((part, self.SPECIAL[part]))
            else:
                out.extend((ch, 16 + ord(ch)) for ch in part)
        return out


_state: dict[str, Any] = {}


def load(version: str) -> Any:
    """The release's ``ParserManager`` (imported once per process)."""
    if "manager" in _state:
        return _state["manager"]
    root = Path(release_dir(version, "vllm"))
    sys.path.insert(0, str(root))
    sys.modules["regex"] = re
    for name in _BARE:
        pkg = types.ModuleType(name)
        pkg.__path__ = [str(root.joinpath(*name.split(".")))]
        sys.modules[name] = pkg
    for name, classes in _PROTOCOL.items():
        mod = types.ModuleType(name)
        for cls in classes:
            setattr(mod, cls.__name__, cls)
        sys.modules[name] = mod
    sys.meta_path.insert(0, _Finder(last=False))
    sys.meta_path.append(_Finder(last=True))
    from vllm.parser.parser_manager import ParserManager  # type: ignore[import-not-found]

    _state["manager"] = ParserManager
    _state["version"] = version
    return ParserManager


def tools_of(openai_tools: list[dict[str, Any]]) -> list[ChatCompletionToolsParam]:
    return [ChatCompletionToolsParam.model_validate(t) for t in openai_tools]


def _parser(dialect: str, tools: list[ChatCompletionToolsParam], thinking: bool) -> Any:
    cls = load(_state.get("version", RELEASES[-1])).get_parser(
        tool_parser_name=PARSERS[dialect],
        reasoning_parser_name=REASONING_PARSER,
        enable_auto_tools=True,
    )
    return cls(Tokenizer(), tools, chat_template_kwargs={"thinking": thinking})


def _request(tools: list[ChatCompletionToolsParam], thinking: bool) -> ChatCompletionRequest:
    return ChatCompletionRequest(
        tools=tools, tool_choice="auto", chat_template_kwargs={"thinking": thinking}
    )


def generated_text(text: str) -> str:
    """The output text vLLM's detokenizer hands the parsers: the stop token left out."""
    return text.removesuffix(m.EOS)


def non_streaming(
    dialect: str, text: str, tools: list[ChatCompletionToolsParam], thinking: bool
) -> View:
    """``DelegatingParser.parse`` on the whole output (the chat completion's message)."""
    parser = _parser(dialect, tools, thinking)
    request = parser.adjust_request(_request(tools, thinking))
    _reasoning, content, calls = parser.parse(generated_text(text), request, enable_auto_tools=True)
    return View(
        (content or "").strip(),
        tuple((c.name, canonical_args(c.arguments)) for c in calls or ()),
    )


def streaming(
    dialect: str,
    text: str,
    tools: list[ChatCompletionToolsParam],
    thinking: bool,
    sizes: list[int],
) -> View:
    """``DelegatingParser.parse_delta`` per delta of the given token counts (cycled): content is
    every delta's content in order, each call's arguments the concatenation of its fragments."""
    parser = _parser(dialect, tools, thinking)
    request = parser.adjust_request(_request(tools, thinking))
    toks = Tokenizer().tokens(generated_text(text))
    pieces: list[str] = []
    names: dict[int, str] = {}
    args: dict[int, str] = {}
    pos, k = 0, 0
    while pos < len(toks):
        chunk = toks[pos : pos + sizes[k % len(sizes)]]
        pos += len(chunk)
        k += 1
        delta = parser.parse_delta(
            "".join(t for t, _ in chunk),
            [i for _, i in chunk],
            request,
            prompt_token_ids=[1] if thinking else [],
            finished=pos >= len(toks),
        )
        if delta is None:
            continue
        pieces.append(delta.content or "")
        for tc in delta.tool_calls:
            if tc.function is not None and tc.function.name:
                names[tc.index] = names.get(tc.index, "") + tc.function.name
            if tc.function is not None and tc.function.arguments:
                args[tc.index] = args.get(tc.index, "") + tc.function.arguments
    calls = tuple(
        (names.get(i, ""), canonical_args(args.get(i, ""))) for i in sorted({*names, *args})
    )
    return View("".join(pieces).strip(), calls)


def load_version() -> str:
    """The release :func:`load` imported."""
    return str(_state["version"])
