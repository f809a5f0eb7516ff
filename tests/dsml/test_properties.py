"""Property tests: generated well-formed blocks grade well_formed; streaming in any chunking
equals whole-text grading; arbitrary bytes and objects never make the grader raise."""

from __future__ import annotations

import itertools
import json
import math

from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from exporter.dsml import (
    StreamingGrader,
    StreamingResponseGrader,
    grade_openai_response,
    grade_text,
    phenotypes,
    render_completion,
)
from exporter.dsml import markers as m

FAST = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Words per language (a value mixes one language with ASCII code-ish tokens, as real text does).
VOCAB = {
    "en": [
        "the",
        "file",
        "config",
        "value",
        "parse",
        "error",
        "retry",
        "user",
        "path",
        "result",
        "update",
        "check",
    ],
    "zh": ["配置", "文件", "读取", "错误", "用户", "路径", "结果", "更新", "检查", "数据"],
    "ru": ["файл", "значение", "ошибка", "путь", "результат", "обновить", "проверить", "данные"],
    "el": ["αρχείο", "τιμή", "σφάλμα", "διαδρομή", "αποτέλεσμα"],
    "ar": ["ملف", "قيمة", "خطأ", "مسار", "نتيجة", "تحديث"],
    "code": ["x<=y", "{a:1}", "->", "a.b()", "'q'", '"s"', "`t`", "#", "$HOME", "&&", "[0]"],
}
NAME = st.from_regex(r"[A-Za-z_][A-Za-z0-9_.\-]{0,20}", fullmatch=True)


@st.composite
def texts(draw: st.DrawFn, max_words: int = 10) -> str:
    lang = draw(st.sampled_from(["en", "zh", "ru", "el", "ar"]))
    pool = VOCAB[lang] + VOCAB["code"] + VOCAB["en"]
    words = draw(st.lists(st.sampled_from(pool), max_size=max_words))
    seps = draw(st.lists(st.sampled_from([" ", " ", "\n", ", "]), min_size=len(words)))
    text = "".join(w + s for w, s in zip(words, seps, strict=False)).strip()
    # a word written 8 times in a row is value_loop's word run (issue 32), not a clean value
    assume(phenotypes._word_run(text) is None)
    return text


JSON_SCALAR = st.one_of(
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.none(),
)
JSON_VALUE = st.recursive(
    JSON_SCALAR,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(["a", "b", "ключ"]), inner)
    ),
    max_leaves=6,
)


@st.composite
def calls(draw: st.DrawFn) -> list[tuple[str, dict]]:
    out = []
    for _ in range(draw(st.integers(1, 4))):
        keys = draw(st.lists(NAME, max_size=4, unique=True))
        args = {k: draw(st.one_of(texts(), JSON_VALUE)) for k in keys}
        call = (draw(NAME), args)
        if call not in out:  # the same call twice is duplicate_call: not a well-formed sample
            out.append(call)
    return out


@FAST
@given(
    calls(),
    st.sampled_from(["v4", "v3.2"]),
    st.booleans(),
    st.booleans(),
    st.one_of(st.none(), texts(15)),
    texts(15),
)
def test_generated_well_formed_blocks_grade_well_formed(
    cs: list, grammar: str, eos: bool, self_closing: bool, reasoning: str | None, content: str
) -> None:
    text = render_completion(
        content,
        cs,
        reasoning=reasoning,
        grammar=grammar,
        eos=eos,
        self_closing=self_closing and grammar == "v4",
    )
    declared = grammar if self_closing else None
    thinking = reasoning is not None
    result = grade_text(text, grammar=declared, finish_reason="stop", thinking=thinking)
    assert result.verdict == "well_formed", result.findings
    assert [c.name for c in result.calls] == [n for n, _ in cs]
    for got, (_, args) in zip(result.calls, cs, strict=True):
        assert _same(got.arguments, args)


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


# Fragments that make the tokenizer, grammar and heuristics work hard when glued at random.
FRAGMENTS = [
    f"<{m.BAR}DSML{m.BAR}",
    "tool_calls>",
    "function_calls>",
    'invoke name="a">',
    'parameter name="p" string="true">',
    'parameter name="q" string="false">',
    f"</{m.BAR}DSML{m.BAR}",
    "parameter>",
    "invoke>",
    "</think>",
    "<think>",
    m.EOS,
    f"<{m.BAR}User{m.BAR}>",
    "```",
    "`",
    "\n",
    "\n\n",
    " ",
    "DSML",
    m.BAR,
    "|",
    "<",
    ">",
    '"',
    "{}",
    "[1, 2]",
    "é",
    "的",
    "\ufffd",
    "Ġ",
    "\x00",
    "—",
    "the model ",
    "данных ",
]
SOUP = st.lists(st.sampled_from(FRAGMENTS), max_size=60).map("".join)

# A V4.1 (spaced) parameter opener before a kept ``</think>``: the stream once tracked V4's
# opener only and split reasoning there, where the whole text keeps it a literal in the value.
V41_THINK_IN_VALUE = '<｜DSML｜ parameter name="p" string="true"></think>'


@FAST
@given(
    SOUP,
    st.lists(st.integers(0, 400), max_size=12),
    st.sampled_from([None, "stop", "length"]),
    st.sampled_from([None, True, False]),
    st.sampled_from([None, 16, 64, 200]),
)
@example(V41_THINK_IN_VALUE, [], None, None, 40)
@example(V41_THINK_IN_VALUE, [10, 30], "stop", None, None)
def test_streaming_equals_whole_text(
    text: str, cuts: list[int], finish: str | None, thinking: bool | None, cap: int | None
) -> None:
    kwargs = {"max_chars": cap} if cap is not None else {}
    whole = grade_text(text, finish_reason=finish, thinking=thinking, **kwargs)
    if whole.verdict == "truncated":
        assert {"length_in_block", "length_no_call"} & set(whole.reasons)
    points = sorted({min(c, len(text)) for c in cuts} | {0, len(text)})
    grader = StreamingGrader(thinking=thinking, **kwargs)
    for a, b in itertools.pairwise(points):
        grader.feed(text[a:b])
    assert grader.finish(finish) == whole


@FAST
@given(SOUP, st.lists(st.integers(0, 1200), max_size=12), st.sampled_from([None, 40]))
@example(V41_THINK_IN_VALUE, [], 40)
@example(V41_THINK_IN_VALUE, [3, 17, 45], None)
def test_streaming_bytes_split_inside_characters(
    text: str, cuts: list[int], cap: int | None
) -> None:
    data = text.encode("utf-8")
    kwargs = {"max_chars": cap} if cap is not None else {}
    points = sorted({min(c, len(data)) for c in cuts} | {0, len(data)})
    grader = StreamingGrader(**kwargs)
    for a, b in itertools.pairwise(points):
        grader.feed(data[a:b])
    assert grader.finish("stop") == grade_text(text, finish_reason="stop", **kwargs)


@FAST
@given(st.binary(max_size=3000), st.lists(st.integers(0, 3000), max_size=8))
def test_byte_soup_never_raises(data: bytes, cuts: list[int]) -> None:
    whole = grade_text(data)
    assert whole.verdict in ("well_formed", "no_tool_call", "suspect", "truncated", "degenerate")
    grade_openai_response(data)
    stream = StreamingGrader(max_chars=256)
    sse = StreamingResponseGrader(max_chars=256)
    points = sorted({min(c, len(data)) for c in cuts} | {0, len(data)})
    for a, b in itertools.pairwise(points):
        stream.feed(data[a:b])
        sse.feed(data[a:b])
    stream.finish("length")
    sse.finish()


@FAST
@given(st.text(alphabet=st.characters(blacklist_categories=()), max_size=500))
def test_any_string_never_raises(text: str) -> None:
    for thinking in (None, True):
        result = grade_text(text, thinking=thinking, finish_reason="stop", tools=["a"])
        assert result.verdict != "error"


JSON_ANY = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=20)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(
            st.sampled_from(
                [
                    "choices",
                    "delta",
                    "message",
                    "content",
                    "tool_calls",
                    "function",
                    "arguments",
                    "name",
                    "index",
                    "finish_reason",
                    "reasoning_content",
                    "text",
                ]
            ),
            inner,
            max_size=5,
        ),
    ),
    max_leaves=20,
)


@FAST
@given(JSON_ANY)
def test_arbitrary_json_objects_never_raise(obj: object) -> None:
    result = grade_openai_response(obj, tools=[{"type": "function"}, "x", 3])
    assert result.verdict in (
        "well_formed",
        "no_tool_call",
        "suspect",
        "truncated",
        "degenerate",
        "error",
    )
    grade_openai_response(json.dumps(obj).encode())
