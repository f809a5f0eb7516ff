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


LENGTH_UNIT_TOKENS = 256
"""Corruption is modelled as a hazard per 256 output tokens: an answer of ``n`` tokens is
degenerate with ``1 - (1 - p) ** (n / 256)``, ``p`` the per-answer rate of a short tool call
(at most 256 tokens: unchanged). Long generations are hit far more often, as reported
(sglang#33397: 0 of 19 answers of 400-1,700 tokens against 6 of 11 of 4,000-24,576)."""


def length_probability(p: float, tokens: int) -> float:
    """P(degenerate) of an answer of ``tokens`` output tokens, ``p`` the short-answer rate."""
    return 1.0 - (1.0 - p) ** max(1.0, tokens / LENGTH_UNIT_TOKENS)


_LONG_ASK = ("words", "long", "detailed", "字")
_SENTENCES = (
    "The first phase moves read traffic to the new tier while writes stay on the old one.",
    "Operators compare checksums of both tiers every hour and page on any mismatch.",
    "Each tenant is migrated during its own maintenance window, announced a week ahead.",
    "Rollback means pointing the router back at the old tier, which stays warm for a week.",
    "The dashboards show replication lag, error budget and the tenants still waiting.",
    "Capacity is reserved in advance so that a migration never competes with peak load.",
    "Every step has an owner, a checklist and a written success criterion.",
    "Incidents during the migration are reviewed within two working days.",
)


def asks_for_length(messages: list[dict[str, Any]]) -> bool:
    """The last user message asks for a long answer (the long-generation canary, repro --long)."""
    for msg in reversed(messages):
        if isinstance(msg, dict) and msg.get("role") == "user":
            text = msg.get("content")
            return isinstance(text, str) and any(w in text for w in _LONG_ASK)
    return False


def long_prose(rng: random.Random, tokens: int, chars_per_token: int = 4) -> str:
    """About ``tokens`` tokens of varied report prose (numbered, so no passage repeats)."""
    out: list[str] = []
    size = 0
    i = 0
    while size < tokens * chars_per_token:
        i += 1
        sentence = f"{i}. {rng.choice(_SENTENCES)} (item {rng.randint(1, 10**6)})"
        out.append(sentence)
        size += len(sentence) + 1
        if i % 6 == 0:
            out.append("\n\n")
    return " ".join(out)


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
    max_tokens: int = 1024,
    chars_per_token: int = 4,
) -> Completion:
    """One answer to a chat request; degenerate with probability ``p_corrupt`` for a short
    tool call, more for a long answer (:func:`length_probability`)."""
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
    if asks_for_length(messages):
        return _long_answer(rng, reasoning, thinking, tools, p_corrupt, max_tokens, chars_per_token)
    calls = [_pick_call(rng, tools)]
    if rng.random() < 0.2:
        second = _pick_call(rng, tools)
        if second != calls[0]:  # the simulated model does not repeat a call (repeated_call)
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


def _long_answer(
    rng: random.Random,
    reasoning: str,
    thinking: bool,
    tools: list[dict[str, Any]],
    p_corrupt: float,
    max_tokens: int,
    chars_per_token: int,
) -> Completion:
    """A long free-form answer then a tool call; degenerate, it loops one paragraph verbatim
    until ``max_tokens`` and never calls (finish_reason ``length``: sglang#33397's phenotype)."""
    want = min(max(256, max_tokens - 128), rng.randint(1500, 6000))
    prose = long_prose(rng, want, chars_per_token)
    head = (reasoning + "</think>") if thinking else ""
    if rng.random() < length_probability(p_corrupt, want):
        cut = prose[: len(prose) // 3]
        paragraph = cut[cut.rfind("\n\n") + 2 :][-600:] or prose[:600]
        budget = max_tokens * chars_per_token
        text = cut
        while len(text) < budget:
            text += " " + paragraph
        text = text[:budget]
        return Completion(reasoning, text, [], "length", True, "prose_loop", head + text)
    calls = [_pick_call(rng, tools)]
    block = dsml_block(calls)
    tool_calls = [
        {
            "id": f"call_{rng.getrandbits(48):012x}",
            "type": "function",
            "function": {"name": n, "arguments": json.dumps(a, ensure_ascii=False)},
        }
        for n, a in calls
    ]
    return Completion(reasoning, prose, tool_calls, "tool_calls", False, None, head + prose + block)
