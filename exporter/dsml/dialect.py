"""Which DSML dialect a deployment's tool parser reads, and where that fact came from.

The grader grades a block as the deployment's parser would read it: a V4 block under SGLang's
``deepseekv41`` parser (or a V4.1 block under ``deepseekv4``) reaches the client as content.
So the dialect is a deployment fact, taken in this order:

1. the ``dsml_dialect`` setting (configured): a dialect, or vLLM's ``--tool-call-parser``
   name (``deepseek_v41`` -> V4.1);
2. the engine's tool-call parser name: ``tool_call_parser`` from SGLang's ``/server_info``
   (all server args are reported there); vLLM's ``--tool-call-parser`` where the caller can
   read it (vLLM serves no endpoint with its args; ``deepseek_v32`` / ``deepseek_v4``);
3. the served model's ``config.json``: SGLang 0.5.23 picks the V4.1 encoding and parser for
   ``model_type == "deepseek_v41"`` or a ``DeepseekV41`` architecture (checked first, since
   V4.1 configs may reuse the V4 architecture name), V4 for a ``DeepseekV4`` architecture
   (``entrypoints/openai/chat_encoding.py``, ``parser/template_detection.py``);
4. otherwise unknown: the first block's own spelling decides (``auto``).

Under vLLM the dialect is qualified with the engine (``v4@vllm``): the grader then grades a
block as vLLM's parser delivers it (:mod:`exporter.dsml.engines`).

Pure: the caller reads the files and the endpoint.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from exporter.dsml.engines import qualify
from exporter.dsml.vllm_releases import rules_for

# SGLang 0.5.23 function_call_parser.py: parser name -> detector class (and its dialect)
PARSER_DIALECTS: dict[str, str] = {
    "deepseekv32": "v3.2",
    "deepseekv4": "v4",
    "deepseekv41": "v4.1",
}
# vLLM vllm/tool_parsers/__init__.py: --tool-call-parser name -> dialect (deepseek_v32 and
# deepseek_v4 from 0.23.0; deepseek_v41 from 0.30.0, issue 32: without it a V4.1 deployment on
# vLLM resolved to "unknown" unless its config.json was mounted)
VLLM_PARSER_DIALECTS: dict[str, str] = {
    "deepseek_v32": "v3.2",
    "deepseek_v4": "v4",
    "deepseek_v41": "v4.1",
}
# parser names registered only from a later release (exporter/dsml/vllm_releases.py has_v41)
VLLM_LATER_PARSERS: frozenset[str] = frozenset({"deepseek_v41"})
ENGINE_PARSERS: dict[str, dict[str, str]] = {
    "sglang": PARSER_DIALECTS,
    "vllm": VLLM_PARSER_DIALECTS,
}
SETTING_VALUES: tuple[str, ...] = ("auto", "v3.2", "v4", "v4.1")


def dialect_of_parser(
    parser: object, engine: str = "sglang", release: str | None = None
) -> str | None:
    """The dialect of an engine's tool-call parser name (None: not a DSML parser, or for vLLM
    not one the known ``release`` registers: ``deepseek_v41`` arrived in 0.30)."""
    table = ENGINE_PARSERS.get(engine, {})
    name = parser.strip().lower() if isinstance(parser, str) else None
    if name is None:
        return None
    if engine == "vllm" and name in VLLM_LATER_PARSERS:
        rules, how = rules_for(release)
        if how == "release" and not rules.has_v41:
            return None
    return table.get(name)


def dialect_of_model_config(config: Mapping[str, Any] | None) -> str | None:
    """The dialect a DeepSeek model's ``config.json`` implies (None: not a DSML model)."""
    if not isinstance(config, Mapping):
        return None
    archs = config.get("architectures")
    arch = " ".join(a for a in archs if isinstance(a, str)) if isinstance(archs, list) else ""
    if config.get("model_type") == "deepseek_v41" or "DeepseekV41" in arch:
        return "v4.1"
    if "DeepseekV4" in arch or config.get("model_type") == "deepseek_v4":
        return "v4"
    if "DeepseekV32" in arch or config.get("model_type") == "deepseek_v32":
        return "v3.2"
    return None


def resolve_dialect(
    setting: str | None,
    parser: object = None,
    model_config: Mapping[str, Any] | None = None,
    engine: str = "sglang",
    release: str | None = None,
) -> tuple[str | None, str]:
    """(dialect or None for auto, source): ``configured``, ``server_info`` (SGLang) /
    ``tool_call_parser`` (vLLM), ``model_config`` or ``unknown``. Under vLLM the dialect is
    engine-qualified with the release from its ``/version`` when known (``v4@vllm-0.30.0``:
    graded as that release's parser delivers it, :mod:`exporter.dsml.vllm_releases`)."""
    if setting and setting != "auto":
        # a grammar, or vLLM's --tool-call-parser name as the operator launched it
        named = VLLM_PARSER_DIALECTS.get(setting, setting)
        return qualify(named, engine, release), "configured"
    found = dialect_of_parser(parser, engine, release)
    if found is not None:
        how = "server_info" if engine == "sglang" else "tool_call_parser"
        return qualify(found, engine, release), how
    found = dialect_of_model_config(model_config)
    if found is not None:
        return qualify(found, engine, release), "model_config"
    return None, "unknown"
