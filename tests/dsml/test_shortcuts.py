"""Each shortcut the grader takes for speed answers exactly what the longer path answers.

The shortcuts (issue 14, throughput): a translate screen and a lead-character walk in place
of the mojibake regex over the whole text, the glue and repeat screens of the phenotypes, a
type-only schema check, no state machine for a channel without events, no parameter-opener
search in reasoning without ``DSML``. Issue 32 (speed): the template-token needles, the
value-loop and word-run screens (in C where built: tests/dsml/test_screens_native.py holds the
two builds equal), ASCII and tail exits of the letter-run, closing-run and salad regexes,
no argument serialising when no two calls share a tool, and no sentence split of prose with
fewer terminators than a phrase loop has copies; then no salad group regexes without a letter
between Latin and the east, one soup window without a copy, and strict_json without decode()'s
whitespace regexes. Each is checked against the path
it skips, on the corpus and on generated inputs built from the characters that matter to it.
"""

from __future__ import annotations

import json
import re

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from exporter.dsml import markers as m
from exporter.dsml import phenotypes, soup, textcheck, tokens
from exporter.dsml import thresholds as t
from exporter.dsml.engines import EngineDialect
from exporter.dsml.grader import (
    _GRAMMAR_ALIASES,
    PARAM_OPENS,
    analyze_content,
    body_end_of,
    first_block_at,
    normalize_grammar,
    prose_of,
    reasoning_end,
)
from exporter.dsml.loops import MIN_LOOP_CHARS
from exporter.dsml.quoting import Quoting
from exporter.dsml.result import MAX_FINDINGS_PER_REASON, FindingSink, ToolCall
from exporter.dsml.schema import compile_schema, render_path
from exporter.dsml.soup import PIECES, _soup_in, find_soup
from exporter.dsml.structure import Machine, Parsed, strict_json, strict_json_decode
from exporter.dsml.tokens import scan
from tests.dsml import diff_corpus
from tests.dsml.adversarial import SHAPES
from tests.dsml.fp_corpus import corpus
from tests.dsml.reason_cases import NEAR_MISSES, TRIGGERS

MANY = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Characters around the mojibake screen: its lead characters (Â Ã Ð Ñ à-ð, Ġ Ċ ĉ), what may
# follow them (U+0080-U+02FF, U+2000-U+213F), accented letters that share lead bytes, ASCII.
_MOJI_CHARS = st.sampled_from(
    [chr(c) for c in range(0x80, 0x300, 3)]
    + [chr(c) for c in range(0x2000, 0x2140, 5)]
    + list("ÂÃÐÑàáâãäåæçèéêëìíîïðĠĊĉé ab.,?'\n")
)


def _corpus_texts() -> list[str]:
    texts = [c.text for c in corpus() if c.text is not None]
    return texts + [build(4000) for build in SHAPES.values()]


def _moji_walk_equals_finditer(text: str) -> None:
    """The lead-character walk finds what finditer over the whole text finds (first 8), and
    text the translate screen rejects has no match at all."""
    utf8 = text.encode("utf-8", "surrogatepass")
    classes = utf8.translate(textcheck._MOJIBAKE_CLASSES)
    everything = [mt.span() for mt in textcheck._MOJIBAKE.finditer(text)][:8]
    if not any(n in classes for n in textcheck._MOJIBAKE_NEEDLES):
        assert everything == [], text[:80]
        return
    assert textcheck._mojibake_spans(text, utf8, classes) == everything, text[:80]


@given(st.text(_MOJI_CHARS, max_size=60))
@MANY
def test_mojibake_walk_never_misses_a_match(text: str) -> None:
    _moji_walk_equals_finditer(text)


def test_mojibake_walk_on_corpus() -> None:
    for text in _corpus_texts():
        _moji_walk_equals_finditer(text)


def test_mojibake_walk_hands_over_to_finditer_past_its_cap() -> None:
    """Turkish "çı" opens a lead candidate at every word; past the walk's cap finditer goes
    on from where the walk stopped and still finds the real mojibake at the end."""
    turkish = "çıkar " * (textcheck._MOJIBAKE_WALK + 40)
    for text in (turkish + "the caf\u00c3\u00a9 and the na\u00c3\u00afve", "aĠb" + turkish):
        _moji_walk_equals_finditer(text)
        spans = textcheck._mojibake_spans(
            text, text.encode(), text.encode().translate(textcheck._MOJIBAKE_CLASSES)
        )
        assert spans, text[-40:]


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=6,
)
_TYPES = ["string", "integer", "number", "boolean", "null", "array", "object", "bogus"]


@given(st.sampled_from(_TYPES), st.booleans(), _JSON)
@MANY
def test_type_only_schema_check_equals_general_check(typ: str, nullable: bool, value) -> None:
    schema = {"type": typ, "nullable": nullable, "description": "x"}
    # allOf with an empty schema changes nothing but forces the general check
    general = {**schema, "allOf": [{}]}
    assert compile_schema(schema)(value) == compile_schema(general)(value)
    nested = {
        "type": "object",
        "properties": {"a": schema, "b": {"type": "array", "items": schema}},
    }
    nested_general = {
        "type": "object",
        "properties": {"a": general, "b": {"type": "array", "items": general}},
    }
    doc = {"a": value, "b": [value, value]}
    assert compile_schema(nested)(doc) == compile_schema(nested_general)(doc)


def test_error_paths_are_rendered_as_before() -> None:
    assert render_path("$") == "$"
    assert render_path(((("$", "a"), "b"), 2)) == "$.a.b[2]"
    schema = {
        "type": "object",
        "properties": {"q": {"type": "array", "items": {"type": "object", "required": ["k"]}}},
    }
    assert compile_schema(schema)({"q": [{"k": 1}, {}]}) == ["$.q[1]: missing required 'k'"]
    assert compile_schema({"type": "object", "properties": {"n": {"type": "integer"}}})(
        {"n": "1"}
    ) == ["$.n: expected integer, got string"]


def _machine_run(text: str, events: list, end: int, **options) -> tuple[Parsed, list[tuple]]:
    """What the state machine returns and reports when run over ``events`` up to ``end``."""
    reports: list[tuple] = []
    parsed = Machine(text, lambda *a: reports.append(a), tools=None, **options).run(events, end)
    return parsed, reports


@given(
    st.text(max_size=40),
    st.sampled_from(["", m.EOS, m.EOS + "\n", " " + m.EOS]),
    st.sampled_from([None, "v4", "v4.1", "v3.2"]),
    st.sampled_from([None, "stop", "length"]),
)
@MANY
def test_events_only_after_the_body_need_no_machine(text: str, eos: str, grammar, finish) -> None:
    """analyze_content skips the machine when every event starts at or after the body's end."""
    full = text + eos
    end, _ = body_end_of(full)
    events = scan(full)
    if events and events[0].start < end:
        return
    parsed, reports = _machine_run(full, events, end, grammar=grammar, finish_reason=finish)
    assert parsed == Parsed(grammar=grammar) and not reports


@given(
    st.text(max_size=80),
    st.sampled_from([None, "v4", "v4.1", "v3.2"]),
    st.sampled_from([None, 0, 5]),
    st.sampled_from([None, "stop", "length"]),
)
@MANY
def test_no_events_needs_no_machine(text: str, grammar, gap, finish) -> None:
    parsed, reports = _machine_run(
        text, [], len(text), grammar=grammar, finish_reason=finish, gap=gap
    )
    assert parsed == Parsed(grammar=grammar) and not reports


def _reasoning_end_reference(text: str, thinking: bool | None) -> int:
    """reasoning_end as it was before the DSML shortcut."""
    at = text.find(m.THINK_CLOSE)
    if at < 0 or thinking is not None:
        return at
    opened = max(text.rfind(p, 0, at) for p in PARAM_OPENS)
    inside = opened > max(text.rfind(c, 0, at) for c in m.PARAMETER_CLOSES)
    return -1 if inside else at


_THINK_PIECES = st.sampled_from(
    ["</think>", "DSML", "x ", *PARAM_OPENS, *m.PARAMETER_CLOSES, 'name="a">', "<think>"]
)


@given(st.lists(_THINK_PIECES, max_size=8).map("".join))
@MANY
def test_reasoning_end_shortcut(text: str) -> None:
    assert reasoning_end(text, None) == _reasoning_end_reference(text, None)


def test_reasoning_end_shortcut_on_corpus() -> None:
    for text in _corpus_texts():
        assert reasoning_end(text, None) == _reasoning_end_reference(text, None)


_SOUP_WORDS = st.sampled_from([*sorted(PIECES)[:12], "the", "a", "", "x\ny"])


@given(st.lists(_SOUP_WORDS, max_size=12).map(" ".join))
@MANY
def test_soup_space_screen(text: str) -> None:
    assert find_soup(text) == _soup_in(text)  # one window: the screen alone differs


_QUOTE_PIECES = st.sampled_from(["```", "~~~", "`", "``", "\n", "  ", "x", "<｜DSML｜a>"])


@given(
    st.lists(st.sampled_from(["x", " ", "\n", "<", "DSML"]), max_size=6).map("".join),
    st.lists(_QUOTE_PIECES, max_size=10).map("".join),
)
@MANY
def test_no_backtick_or_tilde_before_means_not_quoted(before: str, after: str) -> None:
    """parse_canonical skips Quoting when nothing before the block can open a quote."""
    text = before + "<｜DSML｜tool_calls>" + after
    assert not Quoting(text).covers(len(before))


@given(
    st.text(st.sampled_from("ab c.\n"), min_size=1, max_size=20),
    st.integers(1, 80),
    st.text(st.sampled_from("xyz "), max_size=10),
)
@MANY
def test_no_loop_is_shorter_than_the_skip_bound(unit: str, times: int, tail: str) -> None:
    """find_loops returns nothing below MIN_LOOP_CHARS without looking: no loop is shorter."""
    for loop in find_loops_unbounded(unit * times + tail):
        assert loop.end - loop.start >= MIN_LOOP_CHARS


def test_shortest_loops_meet_the_bound() -> None:
    shortest = find_loops_unbounded("abc" * 16 + ".")
    assert shortest and shortest[0].end - shortest[0].start == MIN_LOOP_CHARS == 48
    assert not find_loops_unbounded("abc" * 15 + ".")


def find_loops_unbounded(text: str) -> list:
    """find_loops with the length bound lifted (the bound is what is under test)."""
    import exporter.dsml.loops as loops

    saved = loops.MIN_LOOP_CHARS
    loops.MIN_LOOP_CHARS = 0
    try:
        return loops.find_loops(text)
    finally:
        loops.MIN_LOOP_CHARS = saved


# --- the phenotype screens (issue 26): scripts glued in a word, passages repeated -------------
# Letters of every class the glue screen tells apart, and their neighbours in each UTF-8 lead
# byte (combining marks, Armenian, Thai, CJK punctuation), digits, "_" and spaces.
_GLUE_CHARS = st.sampled_from(
    list("abcXYZéßŁ_1 -")
    + list("αβγΩ\u0345\u0301аБжЯאבשكلم\u0531\u0e01")
    + list("कखगকখ\u0d05中文かカ한국。")
)


# Runs of one character repeated: letters one at a time almost never make the four-and-four
# of two scripts a glue needs, so the draws are runs (up to 8) of the characters above.
_GLUE_RUNS = st.lists(
    st.tuples(_GLUE_CHARS, st.integers(1, 8)).map(lambda r: r[0] * r[1]), max_size=10
).map("".join)


@given(
    st.one_of(
        st.lists(st.text(_GLUE_CHARS, min_size=1, max_size=12), max_size=6).map("".join), _GLUE_RUNS
    )
)
@example("The function returnданных the list.")
@example("configзначение.yaml 使用Python编写")
@MANY
def test_glue_screen_never_holds_back_a_match(text: str) -> None:
    """Text the screen passes over has no _GLUED match at all."""
    if phenotypes._GLUED.search(text) is not None:
        assert phenotypes._may_glue(text), text


def test_glue_screen_passes_every_corpus_match() -> None:
    """Over the clean corpus and the catalog's script_glued cases (triggers and near misses):
    every text _GLUED matches passes the screen, and some do (the check is exercised)."""
    glued = [c.text for c in (*TRIGGERS["script_glued"], *NEAR_MISSES["script_glued"]) if c.text]
    hits = 0
    for text in [*_corpus_texts(), *glued]:
        if phenotypes._GLUED.search(text) is not None:
            hits += 1
            assert phenotypes._may_glue(text), text[:80]
    assert hits >= len(TRIGGERS["script_glued"])


_WORDS = st.sampled_from(["the", "a", "plan", "moves", "every", "tenant", "x", "42", "phase", "-"])


@given(
    st.lists(_WORDS, min_size=0, max_size=60),
    st.lists(_WORDS, min_size=5, max_size=120),
    st.integers(2, 4),
    st.lists(_WORDS, max_size=30),
    st.sampled_from([" ", "\n", "  "]),
)
@example(["a"], ["the", "plan", "moves", "every", "tenant", "x", "42", "phase"] * 6, 3, [], " ")
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_repeat_screen_never_holds_back_a_loop(
    head: list[str], unit: list[str], copies: int, tail: list[str], sep: str
) -> None:
    """Wherever the full pass finds a prose loop, the probe screen lets the text through (the
    explicit example is one: test_the_repeat_screen_example_is_a_loop)."""
    words = head + unit * copies + tail
    text = sep.join(words)
    if phenotypes._loop_in_words(text, text.split()) is not None:
        assert phenotypes._may_repeat(" ".join(text.split()), t.PROSE_LOOP_MIN_WORDS)
    assert phenotypes.find_prose_loop(text) == (
        phenotypes._loop_in_words(text, text.split())
        if len(text.split()) >= t.PROSE_LOOP_MIN_WORDS + t.PROSE_LOOP_NGRAM
        and len(text) >= 2 * t.PROSE_LOOP_MIN_WORDS
        else None
    )


def test_the_repeat_screen_example_is_a_loop() -> None:
    unit = ["the", "plan", "moves", "every", "tenant", "x", "42", "phase"] * 6
    text = " ".join(["a", *unit * 3])
    assert phenotypes._loop_in_words(text, text.split()) is not None
    assert phenotypes.find_prose_loop(text) is not None


_LOOP_WORDS = st.sampled_from(["the", "error", "log", "ha", "x", "42", "данные", "-", "Ab"])


@given(
    st.lists(_LOOP_WORDS, max_size=6),
    st.lists(_LOOP_WORDS, min_size=1, max_size=3),
    st.integers(0, 12),
    st.lists(_LOOP_WORDS, max_size=6),
    st.sampled_from([" ", "\n", "  "]),
)
@example([], ["the"], 8, [], " ")
@example(["x"], ["error", "log"], 9, ["42"], " ")
@MANY
def test_word_run_screens_never_hold_back_a_run(
    head: list[str], unit: list[str], copies: int, tail: list[str], sep: str
) -> None:
    """value_loop's word-run screens (space count, a unit four times in a row) pass every value
    the exact pass finds a run in (issue 32)."""
    value = sep.join(head + unit * copies + tail)
    assert phenotypes._word_run(value) == phenotypes._word_run_exact(value), value


# --- issue 32: the exits in front of the per-value and per-sample regexes ------------------

_VALUE_CHARS = st.sampled_from(list("abcXY_1 .,;:!?)]-=*#\n\t\\%") + list("的了данαβ中文한ー─—。"))
_VALUES = st.one_of(
    st.text(_VALUE_CHARS, max_size=60),
    # a unit repeated around the value-loop counts, glued to a word or after a space
    st.builds(
        lambda head, unit, k, tail: head + unit * k + tail,
        st.sampled_from(["", "x", " ", "README.md", "Paris", "\n"]),
        st.text(_VALUE_CHARS, min_size=1, max_size=9),
        st.integers(1, t.VALUE_LOOP_ASCII_RUN + 2),
        st.text(_VALUE_CHARS, max_size=6),
    ),
    # words repeated around the word-run counts
    st.builds(
        lambda unit, k, sep: (sep.join(unit) + " ") * k,
        st.lists(st.sampled_from(["the", "Ab", "x2", "данные", "ha"]), min_size=1, max_size=4),
        st.integers(1, t.VALUE_WORD_LOOP_REPEATS + 1),
        st.sampled_from([" ", "  ", "\n"]),
    ),
)


@given(_VALUES)
@example("startup" + "abc" * 9)
@example("README.md" + "的" * 20)
@example("the " * 9)
@example("print(f(3))\n" + "-" * 150)
@example("print(f(3))\n" + "=" * 150 + " \n\t")
@example("x\n" + "-" * (t.VALUE_LOOP_ASCII_RUN - 1))
@example("-" * (t.VALUE_LOOP_ASCII_RUN - 1))
@example("-" * t.VALUE_LOOP_ASCII_RUN)
@example("print(f(3))\n" + "—" * t.VALUE_CLOSING_PUNCT_RUN)
@example("print(f(3))\n" + "—" * (t.VALUE_CLOSING_PUNCT_RUN - 1) + "\n")
@MANY
def test_value_loop_screens_never_hold_back_a_run(value: str) -> None:
    """find_value_loop (its screens, in C where built) answers what every exact pass answers
    when run over the whole value, and each regex behind an ASCII or length exit finds
    nothing there."""
    full = (
        phenotypes._glued_run(value)
        or phenotypes._letter_run(value)
        or phenotypes._closing_run_exact(value)
        or phenotypes._word_run_exact(value)
    )
    assert phenotypes.find_value_loop(value) == full, value
    if value.isascii():
        assert phenotypes._LETTER_RUN.search(value) is None
        groups = sum(1 for rx in phenotypes._GROUPS.values() if rx.search(value))
        assert groups < t.SCRIPT_MIN_GROUPS  # find_value_salad's first test
    assert phenotypes._closing_run(value) == phenotypes._closing_run_exact(value), value


_EVENT_PIECES = st.sampled_from(
    ["<", "/", "|", "｜", "DSML", "think>", "t", "i", "p", "f", ">", " "]
)


@given(st.lists(_EVENT_PIECES, max_size=16).map("".join))
@example('｜DSML｜invoke name="x">')
@MANY
def test_no_lt_means_only_dsml_events(text: str) -> None:
    """tokens.scan skips its "<"-event regex on text without "<" (most reasoning): no match of
    it can start elsewhere, so the events are what the DSML search alone finds."""
    if "<" not in text:
        assert tokens._LT_EVENTS.search(text) is None, text
        assert all(type(ev).__name__ in ("Tag", "Bare") for ev in scan(text)), text


# words of every salad group, in and around their ranges, and the separators between words
_SALAD_WORDS = st.sampled_from(
    [
        "config",
        "café",
        "данные",
        "αβγ",
        "שלום",
        "مرحبا",
        "नमस्ते",
        "สวัสดี",
        "中文",
        "データ",
        "한국어",
        "x2",
        "ͰͿ",
        "Ѐӿ",
        "\u05d0\u05ea",
        "\u0620\u065f",
        "\u0900\u0dff",
        "\u0e00\u0e7f",
        "\u036f",
        "\u0e80",
        "\u05eb",
        "\u061f",
    ]
)


@given(st.lists(st.tuples(_SALAD_WORDS, st.sampled_from([" ", "  ", ", ", "\n", ""])), max_size=9))
@example([("config", " "), ("данные", " "), ("中文", " "), ("αβγ", " ")] * 2)
@MANY
def test_salad_group_screen_never_holds_back_a_salad(words: list[tuple[str, str]]) -> None:
    """A value with no letter of a group other than Latin and the east has fewer than
    SCRIPT_MIN_GROUPS groups: the screened salad check answers what the unscreened one does."""
    assert set(phenotypes._GROUPS) == {*phenotypes._ALPHA, "thai", "east"}  # what _BETWEEN reads
    value = "".join(w + sep for w, sep in words)
    assert phenotypes.find_value_salad(value) == phenotypes._value_salad(value), value


_JSON_TEXT = st.one_of(
    st.text(st.sampled_from(list('0123456789-+.eE"\\ \t\n\r[]{},:aflnrstuINy\u00e9')), max_size=16),
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=4),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
        max_leaves=6,
    ).map(lambda v: json.dumps(v, allow_nan=True)),
)


@given(_JSON_TEXT, st.sampled_from(["", " ", "\n", "\t "]), st.sampled_from(["", " ", "\r\n", "x"]))
@example("NaN", "", "")
@example("[" * 5000, "", "")
@MANY
def test_strict_json_without_whitespace_regexes_equals_decode(
    body: str, before: str, after: str
) -> None:
    """The scanner alone, on text that neither starts nor ends in JSON whitespace, answers what
    JSONDecoder.decode answers (NaN and Infinity refused, deep nesting False, extra data
    False)."""
    for text in (body, before + body, body + after, before + body + after):
        assert strict_json(text) == strict_json_decode(text), text


_TEMPLATE_PIECES = st.sampled_from(
    [
        "<|",
        "|>",
        "im_start",
        "<|im_end|>",
        "[INST]",
        "[/INST]",
        "<<SYS>>",
        "<</SYS>>",
        "<<",
        "[",
        "<",
    ]
)


@given(st.lists(st.one_of(_TEMPLATE_PIECES, st.text("ab /|<>[]SYINT", max_size=6)), max_size=12))
@MANY
def test_template_needles_never_hold_back_a_token(pieces: list[str]) -> None:
    """Every template token holds one of the needles, and the screened pass finds what the
    pass over the whole text finds."""
    text = "".join(pieces)
    if phenotypes._TEMPLATE.search(text) is not None:
        assert any(n in text for n in phenotypes._TEMPLATE_NEEDLES), text
    full = list(phenotypes._template_tokens(text))
    assert list(phenotypes.find_template_tokens(text)) == full, text
    sink = FindingSink()
    phenotypes.check_prose(sink, text, 0, "content")  # the accelerator's screen where built
    assert sink.counts.get("template_token_leak", 0) == len(full), text
    kept = [(f.start, f.end, f.detail) for f in sink.findings if f.reason == "template_token_leak"]
    assert kept == full[:MAX_FINDINGS_PER_REASON], text  # the sink keeps the first few


_CALLS = st.lists(
    st.builds(
        lambda name, arg, at: ToolCall(name, {"q": arg}, at, at + 5),
        st.sampled_from(["read", "list_dir", "a\0b", "a"]),
        st.sampled_from(["x", "y", "\0b"]),
        st.integers(0, 99),
    ),
    max_size=6,
)


@given(_CALLS)
@MANY
def test_call_repeats_need_two_calls_of_one_tool(calls: list[ToolCall]) -> None:
    """check_calls skips serialising when no two calls share a tool; it reports exactly what
    the pass over every call reports (names with NUL in them included)."""
    screened, full = FindingSink(), FindingSink()
    phenotypes.check_calls(screened, calls, "tool_calls")
    phenotypes._call_repeats(full, calls, "tool_calls")
    assert screened.findings == full.findings


_SENTENCES = st.sampled_from(
    ["I will call the tool now.", "Done!", "ok.", "v1.2", "wintypes.ULONG", "好的。", "确认？", "x"]
)


@given(
    st.lists(_SENTENCES, max_size=4),
    _SENTENCES,
    st.integers(0, t.PHRASE_LOOP_COPIES + 1),
    st.sampled_from([" ", "\n", "", "  "]),
)
@example([], "I will call the tool now.", 3, " ")
@MANY
def test_phrase_loop_terminator_count_never_holds_back_a_loop(
    head: list[str], sentence: str, copies: int, sep: str
) -> None:
    """Fewer terminator characters than copies: the split would find no loop either."""
    text = sep.join([*head, *[sentence] * copies])
    full = (
        phenotypes._phrase_loop(text)
        if 2 * len(text) >= t.PHRASE_LOOP_COPIES * t.PHRASE_LOOP_MIN_CHARS
        else None
    )
    assert phenotypes.find_phrase_loop(text) == full, text


# --- issue 32 item 4: the damaged-item path -------------------------------------------------


def _loop_everywhere(text: str) -> tuple[int, int, str] | None:
    """The prose-loop pass over every shingle from a zero state: the path _loop_in_words skips."""
    words = text.split()
    ids = phenotypes.shingle_ids(words)
    return phenotypes._loop_pass(text, words, ids, {}, 0, len(ids))


@given(
    st.lists(
        st.tuples(
            st.lists(_WORDS, max_size=40),
            st.lists(_WORDS, min_size=1, max_size=90),
            st.integers(1, 4),
        ),
        min_size=1,
        max_size=3,
    ),
    st.lists(_WORDS, max_size=20),
    st.sampled_from([" ", "\n"]),
)
@example([(["a"], ["the", "plan", "moves", "every", "tenant", "x", "42", "phase"] * 6, 3)], [], " ")
@example([(["x"] * 30, ["the", "plan", "moves"] * 20, 2), (["a"], ["42", "x"] * 40, 3)], [], " ")
@MANY
def test_prose_loop_stretches_equal_the_pass_over_everything(
    parts: list[tuple[list[str], list[str], int]], tail: list[str], sep: str
) -> None:
    """_loop_in_words runs the shingle pass only over the long stretches of repeated shingles,
    each from a zero state: it finds what the pass over every shingle finds (issue 32)."""
    words = [w for head, unit, copies in parts for w in head + unit * copies] + tail
    text = sep.join(words)
    assert phenotypes._loop_in_words(text, text.split()) == _loop_everywhere(text), text[:200]


def test_prose_loop_stretches_at_their_least_length() -> None:
    """Loops whose stretch of repeated shingles is about as short as a loop's can be: the
    bound on a stretch's length is exact (one shingle less and the pass finds nothing)."""
    found = 0
    for period in range(30, 50):
        unit = [f"w{k}" for k in range(period)]
        for copies in (2, 3, 4):
            for tail in ([], ["end"], ["end", "w0"]):
                text = " ".join(["start", *unit * copies, *tail])
                mine = phenotypes._loop_in_words(text, text.split())
                assert mine == _loop_everywhere(text), (period, copies, tail)
                found += mine is not None
    assert found >= 10


def test_prose_loop_stretches_on_corpus() -> None:
    """The same on the false-positive corpus, the adversarial shapes and the differential
    corpus's prose (its loops among them), and some of them do loop."""
    texts = _corpus_texts() + [i.text for i in diff_corpus.build(clean_per_dialect=30)]
    found = 0
    for text in texts:
        mine = phenotypes._loop_in_words(text, text.split())
        assert mine == _loop_everywhere(text), text[:200]
        found += mine is not None
    assert found >= 5


def test_shingle_ids_number_equal_shingles_alike() -> None:
    words = [*"abababcababab"]
    ids = phenotypes.shingle_ids(words)
    shingles = list(zip(*(words[k:] for k in range(t.PROSE_LOOP_NGRAM)), strict=False))
    assert len(ids) == len(shingles)
    for i, a in enumerate(shingles):
        for j, b in enumerate(shingles):
            assert (ids[i] == ids[j]) == (a == b)


@given(
    st.lists(st.sampled_from(["a", "bb", "ccc", " ", "\n", "  "]), max_size=14).map("".join),
    st.integers(1, 16),
    st.data(),
)
@MANY
def test_word_span_skips_to_its_words(text: str, stop: int, data: st.DataObject) -> None:
    """_word_span skips words with islice: the offsets of words first .. stop - 1 as a walk over
    every word gives them (nothing, where a word is missing)."""
    first = data.draw(st.integers(-3, stop - 1))
    spans = [mt.span() for mt in phenotypes._WORD.finditer(text)]
    start = spans[first][0] if 0 <= first < len(spans) else 0
    end = spans[stop - 1][1] if stop - 1 < len(spans) else 0
    assert phenotypes._word_span(text, first, stop) == (start, max(start, end))


def test_remembered_tag_shapes_equal_shapes_read() -> None:
    """tokens.scan remembers each canonical tag's shape by its text: every text scans to the
    same events with the memory empty and with it full of other texts' tags."""
    texts = _corpus_texts() + [i.text for i in diff_corpus.build(clean_per_dialect=30)]
    warm = [scan(text) for text in texts]
    assert tokens._SHAPES  # the canonical tags were remembered
    for text, events in zip(texts, warm, strict=True):
        tokens._SHAPES.clear()
        assert scan(text) == events, text[:200]


_MARKER_PIECES = st.sampled_from(
    [
        "<",
        "</",
        "/",
        "|",
        m.BAR,
        m.CONFUSABLE_BARS[0],
        m.CONFUSABLE_BARS[-1],
        "DSML",
        "DSML",
        " ",
        "  ",
        "invoke",
        "parameter",
        "function_calls",
        ' name="x"',
        ' string="true"',
        ' string="no"',
        ">",
        "/>",
        "\n",
        "a",
    ]
)


def _markers_read_alike(text: str) -> None:
    at = text.find("DSML")
    while at >= 0:
        assert tokens._classify(text, at) == tokens._read_marker(text, at), (text, at)
        at = text.find("DSML", at + 1)


@given(st.lists(_MARKER_PIECES, max_size=20).map("".join))
@example(f'<{m.CONFUSABLE_BARS[0]}DSML{m.CONFUSABLE_BARS[0]}invoke name="x">')
@example("DSML|invoke>")
@example("<|||DSML|invoke>\nx|||DSML|invoke>")  # the window reaches 5 characters back
@example("</|||DSML|invoke>\nx/|||DSML|invoke>")
@MANY
def test_remembered_markers_equal_markers_read(text: str) -> None:
    """tokens._classify remembers what _read_marker makes of a DSML by the characters it reads:
    every DSML reads the same through the memory (warm from other texts) as read afresh, and
    with the memory empty; the same window in a longer text reads alike too."""
    _markers_read_alike(text)
    tokens._MARKERS.clear()
    _markers_read_alike(text)
    _markers_read_alike("xy" + text + "z")


def test_remembered_markers_on_corpus() -> None:
    """The same on the corpus and the damaged differential items (markers of every kind), and
    a long tag (past the remembered window) reads alike."""
    long_tag = f'<|DSML|invoke name="{"x" * 400}">'
    for text in [
        *_corpus_texts(),
        *(i.text for i in diff_corpus.build(clean_per_dialect=30)),
        long_tag,
    ]:
        _markers_read_alike(text)
    assert tokens._MARKERS


def test_tag_memories_stay_bounded() -> None:
    """Output with more distinct tags than the memories hold (a hostile or very varied stream)
    empties them as they fill: they never exceed their bounds, and the events are still the
    tags read afresh."""
    many = tokens.MAX_SHAPES + tokens.MAX_MARKERS + 10
    canonical = "".join(f'<{m.MARKER}invoke name="t{k}">\n' for k in range(many))
    damaged = "".join(f'<|DSML|invoke name="t{k}">\n' for k in range(many))
    for text in (canonical, damaged):
        events = scan(text)
        assert len(events) == many
        assert all(ev.attr_name == f"t{k}" for k, ev in enumerate(events))  # type: ignore[union-attr]
        assert len(tokens._SHAPES) <= tokens.MAX_SHAPES
        assert len(tokens._MARKERS) <= tokens.MAX_MARKERS
        tokens._SHAPES.clear()
        tokens._MARKERS.clear()
        assert scan(text) == events


@given(
    st.lists(
        st.one_of(_SENTENCES, st.sampled_from([".", "!?", "。", " ", "\n", "a.b"])), max_size=12
    ).map("".join)
)
@MANY
def test_terminator_lead_lookahead_splits_alike(text: str) -> None:
    """The sentence splitter's lead lookahead (either branch's first character) changes
    nothing: it splits as the alternation alone does."""
    plain = re.compile(phenotypes._TERMINATOR_RUN)
    assert phenotypes._TERMINATOR.split(text) == plain.split(text), text


def test_grammar_names_taken_as_given_equal_the_full_normalisation() -> None:
    """``normalize_grammar`` returns a plain name of its table at once (issue 32, speed): what
    the full path, run for the same name through the ``@sglang`` spelling, returns; an engine
    dialect (a str subclass) is never mistaken for its base name."""
    for name in [*_GRAMMAR_ALIASES, " V4 ", "V3.2", "v4@vllm", "v4.1@vllm-0.30.0"]:
        if isinstance(name, str) and "@" not in name:
            assert normalize_grammar(name) == normalize_grammar(name + "@sglang"), name
    assert normalize_grammar(None) is None
    dialect = normalize_grammar("v4@vllm-0.30.0")
    assert isinstance(dialect, EngineDialect) and normalize_grammar(dialect) is dialect


@given(st.text(st.sampled_from("think></ ab\n\"'-")), st.integers(0, 3))
@MANY
def test_value_checks_equal_with_their_screens_hoisted(value: str, pad: int) -> None:
    """``check_value`` tests ``find_think_in_value``'s and ``_closing_run``'s first screens
    before calling them (issue 32, speed): the findings are those of the calls themselves."""
    value = value + "-" * (pad * t.VALUE_LOOP_ASCII_RUN // 2)
    sink = FindingSink()
    phenotypes.check_value(sink, value, 0, "tool_calls")
    expected = FindingSink()
    found = phenotypes.find_value_loop(value) or phenotypes._closing_run(value)
    if found is not None:
        expected.add("value_loop", found[0], found[1], "tool_calls", found[2])
    if (think := phenotypes.find_think_in_value(value)) is not None and value.isascii():
        expected.add("think_in_value", think[0], think[1], "tool_calls", think[2])
    if value.isascii():
        assert sink.sorted() == expected.sorted(), value


_VALUE_TEXT = st.lists(
    st.sampled_from([*'ab -—=中é\n\u3000<"', "think>", "abc" * 3, "的" * 8]), max_size=30
).map("".join)


@given(_VALUE_TEXT, st.lists(st.tuples(st.integers(0, 60), st.integers(0, 60)), max_size=6))
@example("print(f(3))\n" + "—" * t.VALUE_CLOSING_PUNCT_RUN, [(0, 12 + t.VALUE_CLOSING_PUNCT_RUN)])
@example("x" + "abc" * 9 + " <think> 中文", [(0, 28), (5, 40), (28, 40)])
@MANY
def test_values_screened_together_find_what_each_value_finds(
    text: str, raw: list[tuple[int, int]]
) -> None:
    """``check_values`` screens a block's values in one call and checks only those with a flag
    (issue 32, speed): the findings are those of ``check_value`` run on every value in turn,
    skipping a span that starts inside the previous one checked (unclosed values)."""
    text = text * 3
    spans = sorted((min(a, b, len(text)), min(max(a, b), len(text))) for a, b in raw)
    sink = FindingSink()
    phenotypes.check_values(sink, text, spans, 7, "tool_calls")
    expected = FindingSink()
    done = 0
    for a, b in spans:
        if a < done:
            continue
        done = b
        phenotypes.check_value(expected, text[a:b], 7 + a, "tool_calls")
        # and given the flags its caller has, check_value finds what it finds without them
        given_flags, alone = FindingSink(), FindingSink()
        flags = phenotypes.value_flags(text[a:b])
        phenotypes.check_value(given_flags, text[a:b], 0, "tool_calls", flags)
        phenotypes.check_value(alone, text[a:b], 0, "tool_calls")
        assert given_flags.sorted() == alone.sorted()
    assert sink.sorted() == expected.sorted(), (text, spans)


_SOUP_VALUE = st.lists(
    st.sampled_from(["ation", "ment", "ness", "ity", "ous", "ive", "the", "", "中", "ing\n"]),
    max_size=14,
).map(" ".join)


@given(st.lists(_SOUP_VALUE, max_size=4))
@example(["ation ment ness ity ous ive"])
@example(["x", "ation ment ness ity ous", "ation ment ness ity ous ive ity"])
@MANY
def test_soup_screened_together_finds_what_each_value_finds(values: list[str]) -> None:
    """``first_soup`` screens a block's values in one call (issue 32, speed): it finds what
    ``find_soup`` finds on each value in turn, and its screen (``may_soup_python``) says yes
    exactly where ``find_soup`` finds a run."""
    text, spans = "", []
    for value in values:
        text += "|"
        spans.append((len(text), len(text) + len(value)))
        text += value
        assert soup.may_soup_python(value) == (soup.find_soup(value) is not None), value
    expected = None
    for a, b in spans:
        found = soup.find_soup(text[a:b])
        if found is not None:
            expected = (a + found[0], a + found[1], found[2])
            break
    assert soup.first_soup(text, spans) == expected


def test_prose_and_first_block_found_once_equal_the_lists_of_starts() -> None:
    """``sample_checks`` finds the first block once for the prose and the quoted-block check
    (issue 32, speed): the prose and the text before the first block are those the lists of
    every start gave, on the corpora's content channels (clean, damaged, open blocks, bare
    markers)."""
    texts = _corpus_texts() + [item.text for item in diff_corpus.build(clean_per_dialect=30)]
    seen_open = seen_bare = 0
    for text in texts:
        content = text.partition("</think>")[2] or text
        part = analyze_content(
            FindingSink(), content, 0, grammar=None, tools=None, finish_reason="stop"
        )
        parsed = part.parsed
        starts = [a for a, _ in parsed.blocks]
        if parsed.open_at_end:
            starts.append(parsed.open_block_start)
        before = content[: min(starts, default=len(content))]
        if parsed.dsml_seen and (at := content.find("DSML")) >= 0:
            starts.append(max(0, content.rfind("<", 0, at)))
        prose = content[: min(starts)] if starts else content
        assert first_block_at(part, len(content)) == len(before), content[:200]
        assert prose_of(content, part) == prose, content[:200]
        seen_open += parsed.open_at_end
        seen_bare += parsed.dsml_seen and not parsed.blocks and not parsed.open_at_end
    assert seen_open and seen_bare  # the corpora reach both odd cases


def test_reasoning_read_in_place_and_its_quiet_prose_checks_skipped() -> None:
    """The grader reads the reasoning inside the grade's text (``reasoning_passes`` with an
    end, issue 32, speed), and skips ``check_prose`` over it when none of its screens passed:
    the passes answer what they answer over the reasoning alone, and ``check_prose`` with no
    screen passed finds nothing there."""
    quiet = 0
    for text in _corpus_texts():
        reasoning, tag, _ = text.partition("</think>")
        if not tag:
            continue
        hits, screens, tagged = phenotypes.reasoning_passes(text, len(reasoning))
        assert (hits, screens, tagged) == phenotypes.reasoning_passes(reasoning), reasoning[:120]
        if not any(screens):
            quiet += 1
            sink = FindingSink()
            phenotypes.check_prose(sink, reasoning, 0, "reasoning")
            assert not sink.findings, reasoning[:120]
    assert quiet
