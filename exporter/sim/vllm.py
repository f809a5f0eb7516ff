"""The simulator posing as vLLM: one vLLM release's tool-parser reading of a raw answer, and
its metrics.

With ``engine: vllm`` the simulator serves vLLM's endpoints (``/version``, ``/v1/models``,
``/v1/chat/completions``, ``/metrics`` with ``vllm:`` names and ``vllm:cache_config_info``;
no ``/server_info``) as the release ``vllm_version`` (default the newest in
:mod:`exporter.dsml.vllm_releases`, the table the grader reads too) and hands the client what
that release's ``deepseek_v4`` tool and reasoning parsers make of the model's raw text
(:func:`message`; tests/dsml/test_vllm_differential.py holds it to each released parser, on
the differential's corpus and on the simulated model's own answers). Every difference between
releases is read from the release's :class:`~exporter.dsml.vllm_releases.VllmRules`, never
restated here:

- 0.23-0.24 (``state_machine`` false): ``DeepSeekV32ToolParser.extract_tool_calls``'s regexes
  (:func:`parse_tool_calls`): calls only from complete blocks and complete invokes, the
  content the text before the first block, the text after it dropped, a self-closing invoke
  lost, the whole text as content when no call parses;
- 0.25+ (``state_machine``): the parser engine's terminals and transitions
  (``vllm/parser/deepseek_v4.py`` over ``vllm/parser/engine/``, :func:`engine_parse`), read
  terminal by terminal: a call opens at every invoke opener inside a block (and, where
  ``invoke_outside_block``, in prose), its name runs to the next ``">``, an unfinished call
  is closed at the end, block openers of ``opener_variants`` open a block, text between and
  after calls is dropped; by the release's rules a block with no call leaves the whole text
  as content (``unparsed_block_kept``), think tags inside a call are reasoning markers
  (``think_tags_anywhere``), a value ends at the next parameter opener
  (``param_ends_at_next_param``), ``string=`` may be missing or other than true/false
  (``missing_string_flag_kept``).

The reasoning goes to ``reasoning``. A streamed answer is that message in pieces: vLLM's
streaming-only differences (its 0.23-0.24 parse stopping at a self-closing invoke, text after a
block sent as content before 0.30) are not simulated, and the simulated model never spells a
self-closing invoke.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from functools import cache
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from exporter.dsml import markers as mk
from exporter.dsml.vllm_releases import NEWEST, VllmRules, rules_for

# The release the simulator reports on /version and parses as by default: the newest the
# release table knows.
VERSION = ".".join(map(str, NEWEST.first))
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


# The engine's parameter regex (``_PARAM_RE`` of vllm/parser/deepseek_v4.py), by two rules of
# the release: 0.25-0.30 require string="true|false", 0.31+ take any string= or none
# (``missing_string_flag_kept``); 0.30+ also end a value at the next parameter opener
# (``param_ends_at_next_param``).
@cache
def _engine_param(rules: VllmRules) -> re.Pattern[str]:
    flag = '\\s+string="(true|false)"'
    if rules.missing_string_flag_kept:
        flag = '(?:\\s+string="([^"]*)")?\\s*'
    end = f"</{_D}parameter>"
    if rules.param_ends_at_next_param:
        end = f"(?:{end}|(?=<{_D}parameter\\s+name=))"
    return re.compile(f'<{_D}parameter\\s+name="([^"]+)"{flag}>(.*?){end}', re.DOTALL)


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
    """(content, [(name, arguments JSON)]) as 0.23-0.24's ``deepseek_v4`` tool parser returns
    them for the text after the reasoning."""
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


# the engine's states (vllm/parser/engine/parser_engine_config.py ParserState)
_REASONING, _CONTENT, _PREAMBLE = "reasoning", "content", "preamble"
_NAME, _ARGS, _BETWEEN = "name", "args", "between"
# where the think markers are read in every release (elsewhere where ``think_tags_anywhere``)
_PLAIN = (_REASONING, _CONTENT)


@cache
def _terminals(rules: VllmRules) -> dict[str, str]:
    """Terminal text -> kind, for the V4 parser of ``rules``' releases (deepseek_v4.py)."""
    v4_openers = [f"<{mk.MARKER}{name}>" for g, name in rules.opener_variants if g == "v4"]
    return {
        mk.THINK_OPEN: "think_start",
        mk.THINK_CLOSE: "think_end",
        f"<{mk.MARKER}tool_calls>": "tool_start",
        **{opener: "tool_start" for opener in v4_openers},
        f"</{mk.MARKER}tool_calls>": "tool_end",
        f'<{mk.MARKER}{mk.INVOKE} name="': "invoke_prefix",
        '">': "invoke_name_end",
        f"</{mk.MARKER}{mk.INVOKE}>": "invoke_end",
    }


@cache
def _transitions(rules: VllmRules, tools: bool) -> dict[tuple[str, str], str]:
    """(state, terminal kind) -> next state (deepseek_v4_config's transitions; the think
    markers are :func:`engine_parse`'s); a terminal with no transition is its state's text.
    Without tools there are none."""
    if not tools:
        return {}
    moves = {
        (_REASONING, "tool_start"): _PREAMBLE,
        (_CONTENT, "tool_start"): _PREAMBLE,
        (_PREAMBLE, "invoke_prefix"): _NAME,
        (_NAME, "invoke_name_end"): _ARGS,
        (_ARGS, "invoke_end"): _BETWEEN,
        (_BETWEEN, "invoke_prefix"): _NAME,
    }
    # 0.25-0.29 go back to CONTENT at the block closer, 0.30+ stay (a call ends the turn);
    # non-streaming, the text after a block is dropped either way
    after = _CONTENT if rules.after_block_streamed else _BETWEEN
    moves[(_ARGS, "tool_end")] = moves[(_BETWEEN, "tool_end")] = after
    if rules.invoke_outside_block:
        moves[(_CONTENT, "invoke_prefix")] = _NAME
    if not rules.after_block_streamed:
        moves[(_BETWEEN, "tool_start")] = _PREAMBLE
    return moves


@cache
def _lexer(rules: VllmRules) -> re.Pattern[str]:
    """The earliest terminal, the longest where two start at the same place."""
    terms = sorted(_terminals(rules), key=len, reverse=True)
    return re.compile("|".join(re.escape(t) for t in terms))


def engine_parse(
    text: str, thinking: bool, tools: list[dict[str, Any]] | None, rules: VllmRules
) -> tuple[str, str | None, list[tuple[str, str]]]:
    """(reasoning, content, calls) as the 0.25+ parser engine reads the whole output
    (``ParserEngine._single_pass_parse``): the text split at the earliest terminal (the
    longest where two start together), each piece going to its state: reasoning, content
    (before the first call), a call's name or its raw arguments; calls still open at the end
    are closed."""
    terms = _terminals(rules)
    moves = _transitions(rules, bool(tools))
    finder = _lexer(rules)
    state, pos = (_REASONING if thinking else _CONTENT), 0
    back = _CONTENT  # where </think> returns to: <think> opens reasoning from any state
    parts: dict[str, list[str]] = {_REASONING: [], _CONTENT: []}
    slots: list[list[str]] = []  # [name, raw arguments] per call
    for mt in finder.finditer(text):
        _emit(state, text[pos : mt.start()], parts, slots)
        kind = terms[mt.group()]
        nxt = moves.get((state, kind))
        if kind.startswith("think") and (rules.think_tags_anywhere or state in _PLAIN):
            if kind == "think_start":  # a second <think> while reasoning is absorbed
                back, state = (back, state) if state == _REASONING else (state, _REASONING)
            else:  # a bare </think> is absorbed
                state = back if state == _REASONING else state
        elif nxt is None:
            _emit(state, mt.group(), parts, slots)
        else:
            if nxt == _NAME:
                slots.append(["", ""])
            state = nxt
        pos = mt.end()
    _emit(state, text[pos:], parts, slots)
    calls = [
        (name.strip(), _engine_args(raw, tools, name.strip(), rules))
        for name, raw in slots
        if name.strip()
    ]
    if not calls and tools and rules.unparsed_block_kept:
        return engine_parse(text, thinking, None, rules)  # no call: all but reasoning is content
    content = "".join(parts[_CONTENT])
    return "".join(parts[_REASONING]), (None if calls and not content.strip() else content), calls


def _emit(state: str, piece: str, parts: dict[str, list[str]], slots: list[list[str]]) -> None:
    """A piece of text in ``state``: reasoning, content before any call, a name, arguments;
    anything else (between calls, after them) is dropped."""
    if not piece:
        return
    if state == _REASONING or (state == _CONTENT and not slots):
        parts[state].append(piece)
    elif state == _NAME:
        slots[-1][0] += piece
    elif state == _ARGS:
        slots[-1][1] += piece


def _engine_args(raw: str, tools: list[dict[str, Any]] | None, name: str, rules: VllmRules) -> str:
    """``_dsml_arg_converter`` then ``_fix_arg_types``: string="true" values as written, others
    JSON or else the literal text, string values coerced to the tool's schema."""
    props = _properties(tools, name)
    args: dict[str, Any] = {}
    for key, is_string, value in _engine_param(rules).findall(raw):
        if is_string == "true":
            args[key] = value
        else:
            try:
                args[key] = json.loads(value)
            except ValueError:
                args[key] = value
        if isinstance(props.get(key), dict):
            args[key] = _fix_type(args[key], props[key])
    return json.dumps(args, ensure_ascii=False)


def _fix_type(value: Any, schema: dict[str, Any]) -> Any:
    """``ParserEngine._coerce_value`` at the top level: a string coerced to the schema's type,
    a number, boolean or null re-read from its JSON (``42`` for a string is ``"42"``, a NaN for
    an object the string ``"NaN"``); objects and arrays kept (the simulator's tools have no
    nested schemas)."""
    if isinstance(value, str):
        return _coerce(value, schema)
    if isinstance(value, dict | list):
        return value
    coerced = _coerce(json.dumps(value, ensure_ascii=False), schema)
    return coerced if type(coerced) is not type(value) or coerced != value else value


def message(
    raw: str,
    thinking: bool,
    tools: list[dict[str, Any]] | None,
    call_id: str,
    release: str = VERSION,
) -> tuple[dict[str, Any], bool]:
    """(the chat.completion message vLLM ``release`` sends for ``raw``, whether it carries
    calls)."""
    content = raw.removesuffix(mk.EOS)
    rules, _ = rules_for(release)
    if rules.state_machine:
        reasoning, text, calls = engine_parse(content, thinking, tools, rules)
    else:
        reasoning = ""
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
