"""Which DSML dialect a deployment's tool parser reads, and where that fact came from.

The grader grades a block as the deployment's parser would read it: a V4 block under SGLang's
``deepseekv41`` parser (or a V4.1 block under ``deepseekv4``) reaches the client as content.
So the dialect is a deployment fact, taken in this order:

1. the ``dsml_dialect`` setting (configured);
2. ``tool_call_parser`` from SGLang's ``/server_info`` (all server args are reported there);
3. the served model's ``config.json``: SGLang 0.5.23 picks the V4.1 encoding and parser for
   ``model_type == "deepseek_v41"`` or a ``DeepseekV41`` architecture (checked first, since
   V4.1 configs may reuse the V4 architecture name), V4 for a ``DeepseekV4`` architecture
   (``entrypoints/openai/chat_encoding.py``, ``parser/template_detection.py``);
4. otherwise unknown: the first block's own spelling decides (``auto``).

Pure: the caller reads the files and the endpoint.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# SGLang 0.5.23 function_call_parser.py: parser name -> detector class (and its dialect)
PARSER_DIALECTS: dict[str, str] = {
    "deepseekv32": "v3.2",
    "deepseekv4": "v4",
    "deepseekv41": "v4.1",
}
SETTING_VALUES: tuple[str, ...] = ("auto", "v3.2", "v4", "v4.1")


def dialect_of_parser(parser: object) -> str | None:
    """The dialect of an SGLang ``tool_call_parser`` name (None: not a DSML parser)."""
    return PARSER_DIALECTS.get(parser.strip().lower()) if isinstance(parser, str) else None


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
    setting: str | None, parser: object = None, model_config: Mapping[str, Any] | None = None
) -> tuple[str | None, str]:
    """(dialect or None for auto, source): ``configured``, ``server_info``, ``model_config``
    or ``unknown``."""
    if setting and setting != "auto":
        return setting, "configured"
    found = dialect_of_parser(parser)
    if found is not None:
        return found, "server_info"
    found = dialect_of_model_config(model_config)
    if found is not None:
        return found, "model_config"
    return None, "unknown"
