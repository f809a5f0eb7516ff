"""The simulator posing as vLLM: vLLM's tool-parser reading of a raw answer, and its metrics.

With ``engine: vllm`` the simulator serves vLLM's endpoints (``/version``, ``/v1/models``,
``/v1/chat/completions``, ``/metrics`` with ``vllm:`` names and ``vllm:cache_config_info``;
no ``/server_info``) and hands the client what vLLM 0.23.0-0.24.0's ``deepseek_v4`` tool parser
and ``deepseek_v4`` reasoning parser make of the model's raw text (:func:`parse_tool_calls`, a
restatement of ``DeepSeekV32ToolParser.extract_tool_calls``; tests/dsml holds it to the
released parser): calls only from complete blocks and complete invokes, the content the text
before the first block, the text after it dropped, a self-closing invoke lost, the whole text
as content when no call parses; the reasoning as ``reasoning``. A streamed answer is that
message in pieces: vLLM's streaming-only differences (its parse stopping at a self-closing
invoke) are not simulated, and the simulated model never spells one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from exporter.dsml import markers as mk

VERSION = "0.24.0"
BLOCK_SIZE = 256  # vLLM's block size for DeepSeek-V4's MLA cache
CACHE_DTYPE = "fp8"

_D = re.escape(mk.MARKER)
_TYPES_JSON = ("object", "array")


def _patterns(block: str) -> tuple[re.Pattern[str], re.Pattern[str], re.Pattern[str]]:
    return (
        re.compile(f"<{_D}{block}>(.*?)</{_D}{block}>", re.DOTALL),
        re.compile(f'<{_D}invoke\\s+name="([^"]+)"\\s*>(.*?)</{_D}invoke>', re.DOTALL),
        re.compile(
            f'<{_D}parameter\\s+name="([^"]+)"\\s+string="(true|false)"\\s*>(.*?)</{_D}parameter>',
            re.DOTALL,
        ),
    )


_V4 = _patterns("tool_calls")


def _coerce(value: str, schema: Any) -> Any:
    """vLLM's ``coerce_to_schema_type`` for the types the simulator's tools use."""
    kinds = schema.get("type") if isinstance(schema, dict) else None
    kinds = [kinds] if isinstance(kinds, str) else kinds if isinstance(kinds, list) else []
    kinds = kinds or ["string"]  # extract_types_from_schema: no type information is a string
    for kind in ("null", "integer", "number", "boolean", *_TYPES_JSON, "string"):
        if kind not in kinds:
            continue
        try:
            if kind == "null" and value.lower() == "null":
                return None
            if kind == "string":
                return value
            if kind == "integer":
                return int(value)
            if kind == "number":
                number = float(value)
                return int(number) if number.is_integer() else number
            if kind == "boolean" and value.lower().strip() in ("true", "false", "1", "0"):
                return value.lower().strip() in ("true", "1")
            if kind in _TYPES_JSON:
                return _finite_json(value)
        except ValueError:
            continue
    try:
        return _finite_json(value)
    except ValueError:
        return value


def _finite_json(value: str) -> Any:
    """json.loads, refusing NaN and infinities as vLLM does (``_is_json_finite``)."""
    parsed = json.loads(value)
    json.dumps(parsed, allow_nan=False)  # ValueError on a non-finite number anywhere
    return parsed


def _properties(tools: list[dict[str, Any]] | None, name: str) -> dict[str, Any]:
    for tool in tools or []:
        fn = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(fn, dict) and fn.get("name") == name:
            params = fn.get("parameters")
            props = params.get("properties") if isinstance(params, dict) else None
            return props if isinstance(props, dict) else {}
    return {}


def parse_tool_calls(
    content: str, tools: list[dict[str, Any]] | None
) -> tuple[str | None, list[tuple[str, str]]]:
    """(content, [(name, arguments JSON)]) as vLLM's ``deepseek_v4`` parser returns them."""
    blocks, invokes, params = _V4
    if f"<{mk.MARKER}tool_calls>" not in content:
        return content, []
    calls: list[tuple[str, str]] = []
    for body in blocks.findall(content):
        for name, inner in invokes.findall(body):
            props = _properties(tools, name)
            args: dict[str, Any] = {}
            for key, is_string, value in params.findall(inner):
                args[key] = value if is_string == "true" else _coerce(value, props.get(key))
            calls.append((name, json.dumps(args, ensure_ascii=False)))
    if not calls:
        return content, []
    first = content.find(f"<{mk.MARKER}tool_calls>")
    return (content[:first] if first > 0 else None), calls


def message(
    raw: str, thinking: bool, tools: list[dict[str, Any]] | None, call_id: str
) -> tuple[dict[str, Any], bool]:
    """(the chat.completion message vLLM sends for ``raw``, whether it carries calls)."""
    reasoning: str | None = None
    content = raw.removesuffix(mk.EOS)
    if thinking:  # DeepSeekR1ReasoningParser.extract_reasoning: drop up to a <think> first
        before, opened, after = content.partition(mk.THINK_OPEN)
        reasoning, sep, rest = (after if opened else before).partition(mk.THINK_CLOSE)
        content = rest if sep else ""
    text, calls = parse_tool_calls(content, tools) if tools else (content, [])
    if calls and text is not None and not text.strip():
        text = None
    msg: dict[str, Any] = {"role": "assistant", "content": text or None}
    if reasoning:
        msg["reasoning"] = reasoning
    if calls:
        msg["tool_calls"] = [
            {"id": f"{call_id}_{i}", "type": "function", "function": {"name": n, "arguments": a}}
            for i, (n, a) in enumerate(calls)
        ]
    return msg, bool(calls)


class VllmMetrics:
    """Renders the ``vllm:`` families a real vLLM (v1 engine, one engine core) exposes."""

    def __init__(self, model: str, capacity_tokens: int, state: Any) -> None:
        self.model, self.capacity, self.state = model, capacity_tokens, state

    def collect(self) -> Iterator[Any]:
        st = self.state
        labels, values = ["model_name", "engine"], [self.model, "0"]
        used = min(self.capacity, st.reported_running * 12_000)
        for name, value in (
            ("vllm:num_requests_running", st.reported_running),
            ("vllm:num_requests_waiting", st.queued),
            ("vllm:kv_cache_usage_perc", used / self.capacity if self.capacity else 0.0),
        ):
            g = GaugeMetricFamily(name, f"{name} (simulator)", labels=labels)
            g.add_metric(values, float(value))
            yield g
        for name, value in (
            ("vllm:num_preemptions", st.preemptions),
            ("vllm:prompt_tokens", st.prompt_tokens),
            ("vllm:generation_tokens", st.generation_tokens),
        ):
            c = CounterMetricFamily(name, f"{name} (simulator)", labels=labels)
            c.add_metric(values, float(value))
            yield c
        blocks = self.capacity // BLOCK_SIZE
        info = {
            "block_size": str(BLOCK_SIZE),
            "cache_dtype": CACHE_DTYPE,
            "num_gpu_blocks": str(blocks),
            "num_cpu_blocks": "None",
            "kv_cache_size_tokens": str(blocks * BLOCK_SIZE),
            "gpu_memory_utilization": "0.92",
            "enable_prefix_caching": "True",
            "engine": "0",
        }
        g = GaugeMetricFamily(
            "vllm:cache_config_info",
            "Information of the LLMEngine CacheConfig",
            labels=[*info, "model_name"],
        )
        g.add_metric([*info.values(), self.model], 1.0)
        yield g
