"""vLLM's own DeepSeek DSML tool parser and reasoning parser, as a released wheel ships them.

What a vLLM client receives is decided by pure-Python pieces of the release: the tool parser
(0.23-0.24 ``vllm/tool_parsers/deepseekv4_tool_parser.py`` over the V3.2 parser; 0.25+
``deepseekv4_engine_tool_parser.py`` over ``vllm/parser/deepseek_v4.py`` and the state machine
in ``vllm/parser/engine/``; ``deepseek_v41`` from 0.30), the reasoning parser registered under
the same name (0.23-0.24 ``deepseek_v3_reasoning_parser.py``: R1-style ``<think>`` splitting
when the request asks for thinking, identity otherwise; 0.25+ the same engine) and
``vllm/parser/abstract_parser.py``'s ``DelegatingParser`` (``ParserManager.get_parser``
composes the two by their ``--tool-call-parser`` / ``--reasoning-parser`` names, ``parse`` for a
whole output, ``parse_delta`` per streamed delta). Those run as shipped, looked up by name in
the release's own registries.

Importing them through ``vllm/__init__.py`` would start the engine, so the package modules on
the path are created empty and only the parser packages load for real. Every other ``vllm.*``
module they import (logger, envs, sampling params, tokenizers, MCP tool server, ...) and every
missing third-party module (transformers) is a permissive stand-in
(:mod:`tests.conformance.native_stubs`); ``regex`` (a C extension) is the stdlib ``re``, which
reads the parser's patterns the same. The protocol modules are replaced by the pydantic
models below: the released field names and types of the classes the parsers construct or
read (``engine/protocol.py``, ``chat_completion/protocol.py``, 0.24.0; the message models
moved to ``generate/base/protocol.py`` in 0.30 unchanged), other names in them stand-ins; so is
``chat_utils``' tool-call id (a counter for the release's random id).

The tokenizer is a stand-in too: the parsers need ``<think>`` / ``</think>`` in the vocabulary
and, streaming, token ids per delta (one id per character, the two think markers one id each,
as DeepSeek's tokenizer has them as single tokens, so a delta never splits them). 0.25+'s
engine matches a marker that is one vocabulary token by its id only; the DSML block markers are
text here (the test's assumption: DeepSeek's tokenizer is not read, and the markers are not
special tokens). vLLM v1's
detokenizer leaves the stop token out of the text, so a trailing end-of-sentence token is
removed before the parsers see the output.

Call :func:`load` once per process (it mutates ``sys.modules``; one release per process).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import re
import subprocess
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

# The releases the differential runs: 0.23-0.24 (text-level deepseekv4_tool_parser.py over the
# V3.2 parser), 0.25+ (deepseekv4_engine_tool_parser.py over vllm/parser/deepseek_v4.py and the
# pure-Python vllm/parser/engine; the Rust module in 0.25-0.30 serves another model's parser),
# 0.30 (deepseek_v41 arrives), 0.34 (the newest: 0.33's changes plus its own). Each wheel is
# fetched once (~400 MB download, ~40-60 MB of .py kept); every release 0.23-0.34 loads
# (tests/dsml/test_vllm_releases.py checks the semantics table against each one's sources).
RELEASES = ("0.23.0", "0.24.0", "0.25.0", "0.28.0", "0.30.0", "0.34.0")
# vLLM --tool-call-parser name -> the dialect it reads (vllm/tool_parsers/__init__.py);
# deepseek_v41 from 0.30.0.
PARSERS = {"v3.2": "deepseek_v32", "v4": "deepseek_v4", "v4.1": "deepseek_v41"}
V41_FROM = (0, 30, 0)
# --reasoning-parser per dialect (vllm/reasoning/__init__.py; deepseek_v41 from 0.30.0)
REASONING_PARSERS = {"v3.2": "deepseek_v4", "v4": "deepseek_v4", "v4.1": "deepseek_v41"}


def release_tuple(version: str) -> tuple[int, int, int]:
    major, minor, patch = (int(x) for x in version.split(".")[:3])
    return major, minor, patch


def parsers(version: str) -> dict[str, str]:
    """{dialect: --tool-call-parser name} the release registers."""
    has_v41 = release_tuple(version) >= V41_FROM
    return {d: p for d, p in PARSERS.items() if d != "v4.1" or has_v41}


_BARE = (
    "vllm",
    "vllm.parser",
    "vllm.utils",
    "vllm.entrypoints",
    "vllm.entrypoints.openai",
    "vllm.v1",
)
_REAL = (
    "vllm.tool_parsers",
    "vllm.reasoning",
    "vllm.parser.",
    "vllm.utils.collection_utils",
    "vllm.utils.mistral",
    "vllm.utils.import_utils",
    "vllm.v1.token_buffer",  # 0.34: rfind_tokens (reasoning state of the prompt)
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
    parallel_tool_calls: bool | None = True

    def extract_structured_outputs(self) -> Any:
        """0.33+: the request's output constraint (none here: tool_choice auto, free text)."""
        return None


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


def get_tool_call_id_type(model_config: Any) -> str:
    """``chat_utils.get_tool_call_id_type`` for a DeepSeek model (0.25+ engine parsers)."""
    return "random"


def make_tool_call_id(id_type: str = "random", func_name: Any = None, idx: Any = None) -> str:
    """``chat_utils.make_tool_call_id`` (a random id in the release; a counter here)."""
    return f"chatcmpl-tool-{idx}"


_MESSAGES = (
    FunctionDefinition,
    FunctionCall,
    ToolCall,
    DeltaFunctionCall,
    DeltaToolCall,
    ExtractedToolCallInformation,
    DeltaMessage,
)
_PROTOCOL: dict[str, tuple[Any, ...]] = {
    "vllm.entrypoints.chat_utils": (get_tool_call_id_type, make_tool_call_id),
    "vllm.renderers.chat_utils": (get_tool_call_id_type, make_tool_call_id),  # 0.33+
    "vllm.entrypoints.openai.engine.protocol": _MESSAGES,
    # 0.30+ moved the message models here (same fields)
    "vllm.entrypoints.generate.base.protocol": _MESSAGES,
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

    def decode(self, ids: Sequence[int]) -> str:
        """The text of token ids (0.25+'s token-id scanner decodes each special one)."""
        names = {i: t for t, i in self.SPECIAL.items()}
        return "".join(names.get(i) or chr(i - 16) for i in ids)

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
        mod = StubModule(name)  # later releases import more names from it: stand-ins
        for obj in classes:
            setattr(mod, obj.__name__, obj)
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
        reasoning_parser_name=REASONING_PARSERS[dialect],
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


def run_release(module: str, version: str) -> dict[str, Any]:
    """``python -m <module> <version>``'s JSON answer: one release per process, as :func:`load`
    imports a release once. A failing child fails the test with the end of its stderr."""
    proc = subprocess.run(
        [sys.executable, "-m", module, version],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=900,  # a wheel download on a fresh machine
        check=False,
    )
    assert proc.returncode == 0, f"{module} on vllm {version}:\n{proc.stderr[-3000:]}"
    return dict(json.loads(proc.stdout))


def load_version() -> str:
    """The release :func:`load` imported."""
    return str(_state["version"])
