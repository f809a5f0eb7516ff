"""A seeded corpus for the differential test: clean outputs in all three dialects, and damage.

Clean outputs are what the models are trained to emit (SGLang 0.5.23's DeepSeek encoders:
``encoding_dsv32.py`` renders ``\\n\\n<block>\\n<invoke>\\n<param>...`` with string/JSON values;
V4.1 spells the same tags after one space): prose or none, optional reasoning, one to three
invokes, string values with unicode, code, quotes, ``<``, several lines or nothing, JSON values
nested or scalar, V4/V4.1's self-closing zero-argument invoke, an optional EOS.

Every damaged item keeps its clean original, so the test can compare what SGLang returns for
both: the damage *harms the client* when the client's view (content, calls) differs. Each item
names its damage ``op`` (class.variant); the classes are the issue's: marker damage, loops,
salad, special-token leaks, truncation at each position, dialect mixes, invalid JSON, schema
violations, wrong closers (plus attribute damage and stray text).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from exporter.dsml import markers as m
from exporter.dsml.catalog import SIGNALS
from exporter.dsml.encode import render_completion

DIALECTS = ("v3.2", "v4", "v4.1")
B = m.BAR

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "parameters": {
                "type": "object",
                "properties": props,
                "required": required,
                "additionalProperties": False,
            },
        },
    }
    for name, props, required in (
        ("read_file", {"path": {"type": "string"}, "limit": {"type": "integer"}}, ["path"]),
        (
            "write_file",
            {"path": {"type": "string"}, "content": {"type": "string"}},
            ["path", "content"],
        ),
        ("search", {"query": {"type": "string"}, "top_k": {"type": "integer"}}, ["query"]),
        (
            "run",
            {
                "cmd": {"type": "string"},
                "env": {"type": "object"},
                "args": {"type": "array", "items": {"type": "string"}},
                "dry": {"type": "boolean"},
            },
            ["cmd"],
        ),
        ("list_tasks", {}, []),
        (
            "set_config",
            {"config": {"type": "object"}, "note": {"type": ["string", "null"]}},
            ["config"],
        ),
    )
]

PROSE = [
    "",
    "Let me look at that file first.",
    "I'll check both places.\nFirst the config, then the logs.",
    "好的，我先查一下配置文件。",
    "Сначала посмотрю конфигурацию.",
    "Sure — running the tests now 🚀",
    "Here is the plan:\n\n1. read the file\n2. fix the bug\n3. run `pytest -q`",
]
REASONING = [
    "The user wants the file. I should read it before answering.",
    "需要先读取文件，然后再回答。Let me think about which tool fits.",
    "Plan: search, then read the top hit.\nThe query should be short.",
]
STRINGS = [
    "src/app.py",
    "数据/报告 2024.md",
    "",
    'print("hello <world>")',
    "def f(x):\n    return x * 2\n\nif __name__ == '__main__':\n    print(f(3))\n",
    "line one\nline two\n  indented line three",
    "SELECT * FROM users WHERE name = 'O''Brien' AND age < 30;",
    "Привет, мир! ¿Qué tal? Ça va.",
    "a & b | c > d",
    "emoji 🎉 and math ∑ x² ≤ 10",
]
JSONS: list[Any] = [
    3,
    0,
    -17,
    2.5,
    True,
    False,
    None,
    ["a", "b"],
    {"k": "v", "n": [1, 2, {"deep": True}]},
    {"PATH": "/usr/bin", "LANG": "zh_CN.UTF-8"},
    [],
    {},
]


@dataclass(frozen=True)
class Item:
    """One output: the raw completion, how it ended, and (for damage) its clean original."""

    key: str
    dialect: str  # the deployment's parser (and the clean original's spelling)
    op: str  # "clean" or the damage class.variant
    text: str
    finish_reason: str
    thinking: bool  # the text starts in reasoning (split at the first </think>)
    calls: tuple[tuple[str, dict[str, Any]], ...] = ()
    clean: Item | None = field(default=None, repr=False)

    @property
    def content(self) -> str:
        """The content channel, as SGLang's reasoning parser hands it to the tool parser."""
        if not self.thinking:
            return self.text
        at = self.text.find(m.THINK_CLOSE)
        return "" if at < 0 else self.text[at + len(m.THINK_CLOSE) :]


def _args(rng: random.Random, name: str) -> dict[str, Any]:
    s = lambda: rng.choice(STRINGS)  # noqa: E731
    if name == "read_file":
        out: dict[str, Any] = {"path": s() or "a.txt"}
        if rng.random() < 0.5:
            out["limit"] = rng.choice([10, 200, 0])
        return out
    if name == "write_file":
        return {"path": s() or "b.txt", "content": s()}
    if name == "search":
        out = {"query": s() or "tokenizer bug"}
        if rng.random() < 0.5:
            out["top_k"] = rng.choice([1, 5])
        return out
    if name == "run":
        out = {"cmd": s() or "make test"}
        if rng.random() < 0.5:
            out["env"] = rng.choice([{"A": "1"}, {"PATH": "/bin", "N": {"x": [1]}}, {}])
        if rng.random() < 0.5:
            out["args"] = rng.choice([["-q"], [], ["--x", "数据"]])
        if rng.random() < 0.3:
            out["dry"] = rng.choice([True, False])
        return out
    if name == "set_config":
        return {
            "config": rng.choice([j for j in JSONS if isinstance(j, dict)]),
            "note": s() or None,
        }
    return {}


def clean_item(rng: random.Random, dialect: str, key: str) -> Item:
    n_calls = rng.choice([0, 1, 1, 1, 2, 2, 3])
    names = [t["function"]["name"] for t in TOOLS]
    drawn = tuple((n, _args(rng, n)) for n in (rng.choice(names) for _ in range(n_calls)))
    # the same call twice in one turn is clean (agents poll, retry, fan out; both reach the
    # client): the repeated_call signal, never a verdict (issue 32)
    calls = drawn
    thinking = rng.random() < 0.4
    prose = rng.choice(PROSE) if calls else rng.choice([p for p in PROSE if p])
    self_closing = dialect != "v3.2" and rng.random() < 0.5
    text = render_completion(
        prose,
        list(calls),
        reasoning=rng.choice(REASONING) if thinking else None,
        grammar=dialect,
        eos=rng.random() < 0.3,
        self_closing=self_closing,
    )
    finish = "tool_calls" if calls else "stop"
    return Item(key, dialect, "clean", text, finish, thinking, calls)


# --- damage ---------------------------------------------------------------------------------------
Damage = Callable[[random.Random, Item], Item | None]


_TAG = re.compile(f"</?{B}DSML{B}[^>]*>")


def _tags(item: Item) -> list[tuple[int, int]]:
    """(start, end) of every DSML tag of the content part (offsets in ``item.text``)."""
    base = len(item.text) - len(item.content)
    return [(base + t.start(), base + t.end()) for t in _TAG.finditer(item.content)]


def _edit(item: Item, op: str, text: str, finish: str | None = None) -> Item:
    return replace(item, op=op, text=text, finish_reason=finish or item.finish_reason, clean=item)


def _sub(rng: random.Random, item: Item, op: str, old: str, new: str) -> Item | None:
    """Replace one occurrence (chosen at random) of ``old`` in the content part."""
    base = len(item.text) - len(item.content)
    spots = []
    i = item.content.find(old)
    while i >= 0:
        spots.append(base + i)
        i = item.content.find(old, i + 1)
    if not spots:
        return None
    at = rng.choice(spots)
    return _edit(item, op, item.text[:at] + new + item.text[at + len(old) :])


def marker(rng: random.Random, item: Item) -> Item | None:
    tags = _tags(item)
    if not tags:
        return None
    a, b = rng.choice(tags)
    tag = item.text[a:b]
    mk = "｜DSML｜"
    variant = rng.choice(
        ["ascii", "doubled", "no_angle", "missing_bar", "spacing", "unknown_name", "ascii_all"]
    )
    if variant == "ascii_all":
        return _edit(item, "marker.ascii_all", item.text.replace(B + "DSML" + B, "|DSML|"))
    if variant == "ascii":
        new = tag.replace(mk, "|DSML|")
    elif variant == "doubled":
        new = tag.replace(mk, f"{B}{B}DSML{B}{B}")
    elif variant == "no_angle":
        new = tag[1:]
    elif variant == "missing_bar":
        new = tag.replace(mk, "DSML" + B)
    elif variant == "spacing":
        new = tag.replace(mk + " ", mk) if mk + " " in tag else tag.replace(mk, mk + " ")
    else:
        name = rng.choice(["toolcalls", "toolcall", "SugarPanel", "invok", "params"])
        head = tag.index(mk) + len(mk)
        rest = tag[head:].lstrip(" ")
        word = len(rest) - len(rest.lstrip("abcdefghijklmnopqrstuvwxyz_"))
        new = tag[:head] + (tag[head:].replace(rest[:word], name, 1))
    return _edit(item, f"marker.{variant}", item.text[:a] + new + item.text[b:])


def loop(rng: random.Random, item: Item) -> Item | None:
    unit = rng.choice(["the the ", "I will check the file again. ", "}\n", "ok, ", "数据"])
    # a runaway loop runs on for hundreds of tokens (to max_tokens under load)
    reps = 80 if len(unit) <= 4 else 24
    if unit == "}\n":
        unit = f"</{B}DSML{B}parameter>\n"
        reps = 10
    where = rng.choice(["value", "content"])
    if where == "value" and item.calls:
        return _value_edit(rng, item, "loop.value", lambda v: v + unit * reps)
    return _prose_edit(item, "loop.content", unit * reps)


def _value_edit(rng: random.Random, item: Item, op: str, fn: Callable[[str], str]) -> Item | None:
    """Rewrite one string="true" parameter value."""
    opener = 'string="true">'
    base = len(item.text) - len(item.content)
    spots = []
    i = item.content.find(opener)
    while i >= 0:
        spots.append(i + len(opener))
        i = item.content.find(opener, i + 1)
    if not spots:
        return None
    s = rng.choice(spots)
    e = item.content.find(m.parameter_close(item.dialect), s)
    value = item.content[s:e]
    s, e = s + base, e + base
    return _edit(item, op, item.text[:s] + fn(value) + item.text[e:])


def _prose_edit(item: Item, op: str, insert: str) -> Item:
    base = len(item.text) - len(item.content)
    return _edit(item, op, item.text[:base] + insert + item.text[base:])


def salad(rng: random.Random, item: Item) -> Item | None:
    kind = rng.choice(["symbol", "script", "soup"])
    if kind == "symbol":
        junk = "".join(rng.choice(",.;:!?—…、。") for _ in range(40))
    elif kind == "script":
        words = ["data", "данные", "数据", "بيانات", "데이터", "δεδομένα", "ข้อมูล"]
        junk = " ".join(words[i % len(words)] for i in range(rng.randint(12, 20)))
    else:
        pieces = ["ation", "ment", "ness", "ity", "ous", "ly", "ing", "tion", "ive", "ize"]
        junk = " ".join(rng.choice(pieces) for _ in range(rng.randint(7, 14)))
    if item.calls and rng.random() < 0.7:
        r = _value_edit(rng, item, f"salad.{kind}_value", lambda v: v + " " + junk)
        if r is not None:
            return r
    if kind == "soup":
        return None  # soup is graded inside values only
    return _prose_edit(item, f"salad.{kind}_content", junk + " ")


def leak(rng: random.Random, item: Item) -> Item | None:
    token = rng.choice([m.EOS, m.USER, m.ASSISTANT, m.BOS, "</think>", "<think>"])
    # think tags inside a value are code more often than leaks: the grader lets them pass there
    # (docs/dsml-grading.md, blind spots), so values get the role and sentence markers only
    if item.calls and rng.random() < 0.6 and "think" not in token:
        return _value_edit(
            rng, item, "leak.value", lambda v: v[: len(v) // 2] + token + v[len(v) // 2 :]
        )
    if token == m.EOS:
        token = m.USER  # an EOS at the very end is allowed
    return _prose_edit(item, "leak.content", "Answer: " + token + " ")


def truncate(rng: random.Random, item: Item) -> Item | None:
    """Cut at a random position: under ``length`` anywhere, under ``stop`` inside the block
    (a cut before the block under stop *is* a clean output without a call)."""
    body = len(item.text.removesuffix(m.EOS))  # EOS is one token: never cut inside it
    if rng.random() < 0.5:
        p = rng.randrange(1, body)
        return _edit(item, "truncate.length", item.text[:p], "length")
    start = item.text.find("<" + B, len(item.text) - len(item.content))
    end = item.text.rfind(">", 0, body) + 1
    if start < 0 or end - start < 4:
        return None
    p = rng.randrange(start + 1, end - 1)
    return _edit(item, "truncate.stop", item.text[:p], rng.choice(["stop", "tool_calls"]))


def dialect_mix(rng: random.Random, item: Item) -> Item | None:
    if not item.calls:
        return None
    other = rng.choice([d for d in DIALECTS if d != item.dialect])
    kind = rng.choice(["block", "one_tag"])
    if kind == "block":
        prose = (
            item.content[: item.content.find("\n\n<" + B)] if "\n\n<" + B in item.content else ""
        )
        reasoning = item.text[: len(item.text) - len(item.content)]
        text = reasoning + render_completion(prose, list(item.calls), grammar=other)
        return _edit(item, f"dialect.{other}_block", text)
    src, dst = m.tag_prefix(item.dialect), m.tag_prefix(other)
    if src == dst:
        return None
    for old in (f"<{src}{m.INVOKE} ", f"<{src}{m.PARAMETER} ", f"</{src}{m.INVOKE}>"):
        r = _sub(rng, item, "dialect.one_tag", old, old.replace(src, dst))
        if r is not None:
            return r
    return None


def bad_json(rng: random.Random, item: Item) -> Item | None:
    marker_ = 'string="false">'
    if marker_ not in item.content:
        return None
    broken = rng.choice(['{"a": 1', "[1, 2", "tru", "NaN", "'x'", '{"k": "v",}', "1 2", ""])
    base = len(item.text) - len(item.content)
    s = item.content.find(marker_) + len(marker_)
    e = item.content.find(m.parameter_close(item.dialect), s)
    return _edit(item, "json.invalid", item.text[: base + s] + broken + item.text[base + e :])


def schema(rng: random.Random, item: Item) -> Item | None:
    if not item.calls:
        return None
    kind = rng.choice(["wrong_type", "missing_required", "extra_param", "unknown_tool"])
    name = item.calls[0][0]
    calls = [dict(a) for _, a in item.calls]
    names = [n for n, _ in item.calls]
    spec = next(t["function"]["parameters"] for t in TOOLS if t["function"]["name"] == name)
    if kind == "wrong_type":
        ints = [k for k, v in spec["properties"].items() if v.get("type") == "integer"]
        strs = [k for k, v in spec["properties"].items() if v.get("type") == "string"]
        if ints:
            calls[0][ints[0]] = "ten"
        elif strs:
            calls[0][strs[0]] = 42
        else:
            return None
    elif kind == "missing_required":
        if not spec["required"]:
            return None
        calls[0].pop(spec["required"][0], None)
    elif kind == "extra_param":
        calls[0]["verbose"] = True
    else:
        names[0] = rng.choice(["read_files", "exec", "search_web"])
    prose = item.content[: item.content.find("\n\n<" + B)] if "\n\n<" + B in item.content else ""
    reasoning = item.text[: len(item.text) - len(item.content)]
    text = reasoning + render_completion(
        prose, list(zip(names, calls, strict=True)), grammar=item.dialect
    )
    return _edit(item, f"schema.{kind}", text)


def closer(rng: random.Random, item: Item) -> Item | None:
    d = item.dialect
    kind = rng.choice(["param_by_invoke", "invoke_by_block", "block_by_other", "no_invoke_close"])
    if kind == "param_by_invoke":
        return _sub(rng, item, f"closer.{kind}", m.parameter_close(d), m.invoke_close(d))
    if kind == "invoke_by_block":
        return _sub(rng, item, f"closer.{kind}", m.invoke_close(d), m.block_close(d))
    if kind == "block_by_other":
        other = rng.choice([g for g in DIALECTS if g != d])
        return _sub(rng, item, f"closer.{kind}", m.block_close(d), m.block_close(other))
    return _sub(rng, item, f"closer.{kind}", m.invoke_close(d) + "\n", "")


def attribute(rng: random.Random, item: Item) -> Item | None:
    kind = rng.choice(["single_quotes", "no_flag", "flag_yes", "dup_param", "empty_name", "order"])
    if kind == "single_quotes":
        return _fix_quote(item, rng)
    if kind == "no_flag":
        return _sub(rng, item, f"attr.{kind}", ' string="true"', "")
    if kind == "flag_yes":
        return _sub(rng, item, f"attr.{kind}", ' string="true"', ' string="yes"')
    if kind == "empty_name":
        if not item.calls:
            return None
        name = item.calls[0][0]
        return _sub(rng, item, f"attr.{kind}", f'name="{name}"', 'name=""')
    if kind == "order":
        for flag in ("true", "false"):
            i = item.content.find(f'" string="{flag}">')
            if i >= 0:
                j = item.content.rfind(' name="', 0, i)
                base = len(item.text) - len(item.content)
                name = item.content[j + 7 : i]
                new = f' string="{flag}" name="{name}">'
                end = i + len(f'" string="{flag}">')
                return _edit(
                    item, "attr.order", item.text[: base + j] + new + item.text[base + end :]
                )
        return None
    # duplicate parameter: repeat the first parameter line
    pre = f"<{m.tag_prefix(item.dialect)}{m.PARAMETER} "
    i = item.content.find(pre)
    if i < 0:
        return None
    e = item.content.find(m.parameter_close(item.dialect), i) + len(m.parameter_close(item.dialect))
    line = item.content[i:e]
    base = len(item.text) - len(item.content)
    return _edit(
        item, "attr.dup_param", item.text[: base + e] + "\n" + line + item.text[base + e :]
    )


def _fix_quote(item: Item, rng: random.Random) -> Item | None:
    i = item.content.find(' name="')
    if i < 0:
        return None
    q = item.content.find('"', i + 7)
    base = len(item.text) - len(item.content)
    name = item.content[i + 7 : q]
    text = item.text[: base + i] + f" name='{name}'" + item.text[base + q + 1 :]
    return _edit(item, "attr.single_quotes", text)


def stray(rng: random.Random, item: Item) -> Item | None:
    kind = rng.choice(["between_invokes", "after_block", "partial_marker"])
    if kind == "partial_marker":
        cut = rng.choice(["<" + B, "<" + B + "DS", "</" + B + "DSM"])
        body = item.text.removesuffix(m.EOS)
        return _edit(item, "stray.partial_marker", body + "\n\n" + cut, "stop")
    if kind == "after_block":
        if not item.calls:
            return None
        body = item.text.removesuffix(m.EOS)
        return _edit(item, "stray.after_block", body + "\nHope that helps!")
    return _sub(
        rng,
        item,
        "stray.between_invokes",
        m.invoke_close(item.dialect) + "\n",
        m.invoke_close(item.dialect) + "\nand then\n",
    )


def lenient(rng: random.Random, item: Item) -> Item | None:
    """Shapes SGLang accepts but the models are not trained to emit (SGLang's DeepSeek encoder
    renders parameter tags only, one per line, ``name="x">`` with no space)."""
    if not item.calls:
        return None
    kind = rng.choice(["json_body", "space_before_gt", "indent"])
    d = item.dialect
    if kind == "json_body":
        name, args = item.calls[0]
        start = item.text.find(m.invoke_open(name, d))
        if start < 0:
            return None
        end = item.text.find(m.invoke_close(d), start) + len(m.invoke_close(d))
        body = json.dumps(args, ensure_ascii=False)
        new = f"{m.invoke_open(name, d)}\n{body}\n{m.invoke_close(d)}"
        return _edit(item, "lenient.json_body", item.text[:start] + new + item.text[end:])
    if kind == "space_before_gt":
        name = item.calls[0][0]
        return _sub(rng, item, "lenient.space_before_gt", f'name="{name}">', f'name="{name}" >')
    pre = f"\n<{m.tag_prefix(d)}{m.PARAMETER} "
    return _sub(rng, item, "lenient.indent", pre, pre.replace("\n", "\n    "))


def repeat(rng: random.Random, item: Item) -> Item | None:
    """An identical invoke written 3-7 times back to back: a loop over the invoke (the client
    runs the call again and again). Twice is what agents do too (``repeated_call``, a signal)."""
    close = m.invoke_close(item.dialect)
    base = len(item.text) - len(item.content)
    opener = f"<{m.tag_prefix(item.dialect)}{m.INVOKE}"
    s = item.content.find(opener)
    if s < 0:
        return None
    e = item.content.find(close, s)
    self_closing = item.content.find("/>", s)
    if e < 0 or (0 <= self_closing < e and item.content.find("\n", s) > self_closing):
        e = self_closing + 2
    else:
        e += len(close)
    one = item.content[s:e]
    copies = 1 + rng.randint(1, 5)
    at = base + e
    return _edit(
        item,
        f"repeat.invoke_x{copies + 1}",
        item.text[:at] + ("\n" + one) * copies + item.text[at:],
    )


def value(rng: random.Random, item: Item) -> Item | None:
    """Damage confined to one value: a short run glued to a word, a think tag, a salad."""
    kind = rng.choice(["glued_unit", "glued_cjk", "glued_dashes", "think", "salad"])
    words = ["data", "данные", "数据", "بيانات", "δεδομένα", "ข้อมูล"]
    tag = rng.choice(["</think>", "<think>"])

    def fn(v: str) -> str:
        if kind == "glued_unit":
            return (v or "startup") + rng.choice(["abc", "xyz", "ing", "数据"]) * rng.randint(8, 30)
        if kind == "glued_cjk":
            return (v or "README.md") + rng.choice("的了是") * rng.randint(16, 60)
        if kind == "glued_dashes":
            run = rng.choice("-—=~*")  # "150 dashes after a city name" (issue 26)
            return (v or "Paris") + run * rng.randint(80 if run.isascii() else 16, 200)
        if kind == "think":
            return rng.choice([(v or "done") + tag, tag + (v or "plan"), f"{v} {tag} {v}"])
        salad = " ".join(words[i % len(words)] for i in range(rng.randint(6, 9)))
        return (v + " " if v else "") + salad

    return _value_edit(rng, item, f"value.{kind}", fn)


PROSE_PARAGRAPH = (
    "The service restarts the worker pool whenever the configuration changes, and each "
    "worker reloads its routing table from the shared store before it accepts new requests. "
    "While the reload runs the old table keeps serving, so no request is dropped, but the "
    "latency of the first few requests rises until the caches are warm again. "
)


def prose(rng: random.Random, item: Item) -> Item | None:
    """Damage to the prose answer: a long verbatim loop, a template token, glued scripts, a
    cut mid-word under stop before the block, or length with no call."""
    kind = rng.choice(["loop_long", "template", "glued", "cut_stop", "length_no_call"])
    if kind == "loop_long":
        return _prose_edit(item, "prose.loop_long", PROSE_PARAGRAPH * rng.randint(3, 6))
    if kind == "template":
        token = rng.choice(["<|im_end|>", "<|im_start|>assistant\n", "<|eot_id|>", "[/INST]"])
        return _prose_edit(item, "prose.template_token", "Answer: " + token + " ")
    if kind == "glued":
        word = rng.choice(["returnданных", "filesфайлы", "данные的", "checkдалее"])
        return _prose_edit(item, "prose.glued_scripts", f"I will {word} now. ")
    base = len(item.text) - len(item.content)
    opener = item.text.find("<" + B, base)
    end = opener if opener >= 0 else len(item.text)
    text = item.text[base:end].rstrip()
    if kind == "length_no_call":  # ran out of tokens in a long answer before any call
        return _edit(item, "prose.length_no_call", item.text[:base] + PROSE_PARAGRAPH * 2, "length")
    words = [i for i in range(1, len(text)) if text[i - 1].isalpha() and text[i].isalpha()]
    if len(text) < 20 or not words:
        text = PROSE_PARAGRAPH
        words = [i for i in range(1, len(text)) if text[i - 1].isalpha() and text[i].isalpha()]
    p = rng.choice(words[len(words) // 2 :])  # inside a word, past the first half
    return _edit(item, "prose.cut_stop", item.text[:base] + text[:p], "stop")


def slipped(rng: random.Random, item: Item) -> Item | None:
    """What issue 32 found reaching clients unflagged: every bar one look-alike, a sentence
    looped before the block, a word loop or a short salad in one value, a fenced example
    block in the prose (SGLang 0.5.23 and vLLM run it as a real call and cut the content)."""
    kind = rng.choice(["confusable", "phrase_loop", "word_loop", "short_salad", "fenced"])
    if kind == "confusable":
        if not item.calls:
            return None
        bar = rng.choice(m.CONFUSABLE_BARS)
        return _edit(
            item, "marker.confusable", item.text.replace(B + "DSML" + B, f"{bar}DSML{bar}")
        )
    if kind == "phrase_loop":
        sentence = rng.choice(
            ["I will call the tool now. ", "Let me check the file.\n", "好的，我来调用工具。"]
        )
        return _prose_edit(item, "prose.phrase_loop", sentence * rng.randint(3, 5))
    if kind == "fenced":
        example = render_completion(
            "", [("read_file", {"path": "example.txt"})], grammar=item.dialect
        )
        return _prose_edit(
            item, "prose.fenced_example", f"For example:\n```\n{example.strip()}\n```\n"
        )
    if kind == "word_loop":
        word = rng.choice(["the ", "error log ", "данные ", "config file path "])
        return _value_edit(
            rng, item, "value.word_loop", lambda v: f"{v} {word * rng.randint(8, 12)}"
        )
    words = ["data", "данные", "数据", "بيانات", "δεδομένα", "ข้อมูล"]
    start = rng.randrange(len(words))
    salad = " ".join(words[(start + i) % len(words)] for i in range(5))
    return _value_edit(rng, item, "value.short_salad", lambda v: f"{v} {salad}" if v else salad)


DAMAGES: tuple[Damage, ...] = (
    lenient,
    marker,
    loop,
    salad,
    leak,
    truncate,
    dialect_mix,
    bad_json,
    schema,
    closer,
    attribute,
    stray,
    repeat,
    value,
    prose,
    slipped,
)


# Damage the grader counts as a signal instead of grading it (issue 32): on clean answers from
# independent text, an answer that ends without a full stop (a list item, a URL, a CJK sentence
# without its 。) is the norm, and a cut mid-word under ``stop`` looks the same. Precision first:
# such an output is "signalled", not flagged, and only these ops may be.
SIGNALLED_OPS: dict[str, str] = {
    "prose.cut_stop": "cut_under_stop: prose cut mid-word under stop, tools offered, no call",
}


def signalled(reasons: list[str]) -> bool:
    """Whether a row that graded well_formed/no_tool_call was caught by a counted signal."""
    return any(r in SIGNALS for r in reasons)


def build(
    seed: int = 20261201, clean_per_dialect: int = 300, damaged_per_clean: int = 3
) -> list[Item]:
    """The corpus: clean items per dialect, then up to ``damaged_per_clean`` damaged variants
    of each (drawn across the damage classes, round robin from a random start)."""
    rng = random.Random(seed)
    items: list[Item] = []
    for dialect in DIALECTS:
        for i in range(clean_per_dialect):
            clean = clean_item(rng, dialect, f"{dialect}/{i}")
            items.append(clean)
            k = rng.randrange(len(DAMAGES))
            made = 0
            for step in range(len(DAMAGES)):
                if made >= damaged_per_clean:
                    break
                damage = DAMAGES[(k + step) % len(DAMAGES)]
                out = damage(rng, clean)
                if out is not None and out.text != clean.text:
                    items.append(replace(out, key=f"{clean.key}/{out.op}"))
                    made += 1
    return items


def tools_json() -> str:
    return json.dumps(TOOLS)
