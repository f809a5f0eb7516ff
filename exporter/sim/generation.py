"""What the simulated DeepSeek-V4 says: DSML tool calls, prose, and the corruption model.

Well-formed output follows the V4 grammar (docs/dsml-grading.md). The corruption model
reproduces the
reported observations: no corruption with fp8 index-K or with HiCache off (no host-to-device
index-K transfer to race), and with bf16 index-K + HiCache a probability that is ~0 at one
session and rises with concurrency to ~17% at 60 (the field report); fp4 index-K moves a
quarter of bf16's bytes per token and is modelled at half bf16's rate (an assumption, stated
in docs). Corrupted outputs take one of the reported phenotypes, and because the server-side
parser fails on them, the raw DSML comes back in ``content`` with HTTP 200, as it does in the
field.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, field
from typing import Any

BAR = "\uff5c"  # FULLWIDTH VERTICAL LINE
DSML = f"{BAR}DSML{BAR}"
EOS = f"<{BAR}end\u2581of\u2581sentence{BAR}>"

PEAK_RATE = {"bf16": 0.198, "fp4": 0.099, "fp8": 0.0}
RATE_SCALE_SESSIONS = 30.0

PHENOTYPES = (
    "damaged_wrapper",
    "doubled_bars",
    "ascii_pipes",
    "ngram_loop",
    "mojibake_value",
    "orphan_closer",
    "invalid_json_arg",
    "v32_block_name",
)


def corruption_probability(index_k_dtype: str, hicache: bool, concurrency: int) -> float:
    """P(degenerate output) for a request that starts with ``concurrency`` in flight."""
    if not hicache or concurrency <= 1:
        return 0.0
    peak = PEAK_RATE.get(index_k_dtype, 0.0)
    return peak * (1.0 - math.exp(-(concurrency - 1) / RATE_SCALE_SESSIONS))


def dsml_block(calls: list[tuple[str, dict[str, Any]]], block: str = "tool_calls") -> str:
    """A canonical V4 (or V3.2 with block='function_calls') tool-call block."""
    invokes = []
    for name, args in calls:
        params = []
        for key, value in args.items():
            if isinstance(value, str):
                params.append(
                    f'<{DSML}parameter name="{key}" string="true">{value}</{DSML}parameter>'
                )
            else:
                encoded = json.dumps(value)
                params.append(
                    f'<{DSML}parameter name="{key}" string="false">{encoded}</{DSML}parameter>'
                )
        body = "\n".join(params)
        invokes.append(f'<{DSML}invoke name="{name}">\n{body}\n</{DSML}invoke>')
    return f"\n\n<{DSML}{block}>\n" + "\n".join(invokes) + f"\n</{DSML}{block}>"


@dataclass
class Completion:
    """One simulated answer: what a parser-enabled SGLang would return."""

    reasoning: str
    content: str
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    finish_reason: str = "stop"
    degenerate: bool = False
    phenotype: str | None = None
    raw: str = ""  # the model's raw text (what /generate returns)


_ARG_TEMPLATES: dict[str, list[dict[str, Any]]] = {
    "get_weather": [
        {"city": "Lisbon", "unit": "celsius"},
        {"city": "東京", "unit": "celsius"},
        {"city": "São Paulo", "unit": "fahrenheit"},
    ],
    "search_web": [
        {"query": "SGLang HiCache DeepSeek-V4 index-K", "max_results": 5},
        {"query": "Prometheus predict_linear alert", "max_results": 3},
    ],
    "run_shell": [
        {"command": "kubectl -n inference get pods -l app=sglang -o wide | grep -v Completed"},
        {"command": 'grep -R "DSV4 memory calculation" /var/log/sglang/*.log | tail -n 5'},
    ],
    "read_file": [{"path": "/etc/sglang/server_args.yaml"}, {"path": "src/main.rs", "limit": 200}],
}


def _pick_call(rng: random.Random, tools: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    names = [t.get("function", {}).get("name", "") for t in tools if isinstance(t, dict)]
    names = [n for n in names if n] or ["get_weather"]
    name = rng.choice(names)
    templates = _ARG_TEMPLATES.get(name)
    if templates:
        return name, dict(rng.choice(templates))
    # An unknown tool: fill its required string params from its schema.
    schema: Any = next(
        (
            t["function"].get("parameters", {})
            for t in tools
            if t.get("function", {}).get("name") == name
        ),
        {},
    )
    props = schema.get("properties", {}) if isinstance(schema, dict) else {}
    args: dict[str, Any] = {}
    for key, spec in list(props.items())[:4]:
        kind = str(spec.get("type")) if isinstance(spec, dict) else "string"
        args[key] = {"integer": 3, "number": 1.5, "boolean": True}.get(kind, f"value of {key}")
    return name, args


def _corrupt(
    rng: random.Random, block: str, calls: list[tuple[str, dict[str, Any]]]
) -> tuple[str, str]:
    phenotype = rng.choice(PHENOTYPES)
    if phenotype == "damaged_wrapper":
        text = block.replace(f"<{DSML}tool_calls>", f"<{DSML}toolcalls>", 1)
    elif phenotype == "doubled_bars":
        text = block.replace(f"<{DSML}tool_calls>", f"<{BAR}{BAR}DSML{BAR}{BAR}tool_calls>", 1)
    elif phenotype == "ascii_pipes":
        text = block.replace(BAR, "|")
    elif phenotype == "ngram_loop":
        name = calls[0][0]
        loop = f'<{DSML}invoke name="{name}">' * 3 + " the the the" * 40
        text = block[: len(block) // 2] + loop
    elif phenotype == "mojibake_value":
        text = block.replace('string="true">', 'string="true">ĠĊâĢĻ\ufffd\ufffd', 1)
    elif phenotype == "orphan_closer":
        text = f"</{DSML}invoke>\n</{DSML}parameter>" + block
    elif phenotype == "invalid_json_arg":
        if 'string="false">' in block:
            text = block.replace('string="false">', 'string="false">{"unterminated": [1, 2', 1)
        else:
            text = block.replace('string="true">', 'string="maybe">', 1)
    else:  # v32_block_name from a V4 model
        text = block.replace("tool_calls>", "function_calls>")
    return phenotype, text


def complete(
    rng: random.Random,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    p_corrupt: float,
    thinking: bool = True,
) -> Completion:
    """One answer to a chat request; degenerate with probability ``p_corrupt``."""
    reasoning = ""
    if thinking:
        reasoning = rng.choice(
            [
                "The user wants live data, so I should call a tool rather than guess.",
                "I need the file contents before answering; calling the tool.",
                "Checking the cluster state first will make the answer precise.",
            ]
        )
    if not tools:
        content = rng.choice(
            [
                "Here is a short answer. Over-commit happens when the pool allocates more than "
                "the configurator planned; the difference comes out of the activation reserve.",
                "Die Antwort ist kurz: der Speicher reicht, solange die Reserve nicht "
                "aufgebraucht wird.",
                "答案很简单：预留内存必须覆盖激活和 CUDA 图。",
            ]
        )
        raw = (reasoning + "</think>" if thinking else "") + content
        return Completion(reasoning, content, raw=raw)
    calls = [_pick_call(rng, tools)]
    if rng.random() < 0.2:
        second = _pick_call(rng, tools)
        if second != calls[0]:  # a healthy model does not repeat a call (duplicate_call)
            calls.append(second)
    block = dsml_block(calls)
    lead = rng.choice(["", "Let me check that.", "I'll look it up."])
    raw = (reasoning + "</think>" if thinking else "") + lead + block
    if rng.random() < p_corrupt:
        phenotype, damaged = _corrupt(rng, block, calls)
        raw = (reasoning + "</think>" if thinking else "") + lead + damaged
        # The server-side parser fails on damaged DSML: it comes back as content, HTTP 200.
        return Completion(reasoning, lead + damaged, [], "stop", True, phenotype, raw)
    tool_calls = [
        {
            "id": f"call_{rng.getrandbits(48):012x}",
            "type": "function",
            "function": {"name": n, "arguments": json.dumps(a, ensure_ascii=False)},
        }
        for n, a in calls
    ]
    return Completion(reasoning, lead, tool_calls, "tool_calls", False, None, raw)
