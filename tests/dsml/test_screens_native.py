"""The C accelerator's screens of the once-per-sample checks answer exactly what their Python
twins in ``exporter/dsml/phenotypes.py`` answer (issue 32, speed).

``prose_screens`` (prose loop, template tokens, glue, in one pass), ``may_glue`` and
``value_flags`` (the value-loop, word-run and letter-run regexes and check_value's other
screens) only decide whether a check's exact pass runs, so a wrong "no" would hide a
finding: each is compared with its twin on the corpora, at the edges of every range and
threshold it reads, and on generated text built from the characters that matter to it.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from exporter.dsml import accel, soup
from exporter.dsml import phenotypes as ph
from exporter.dsml import thresholds as t
from tests.dsml.adversarial import SHAPES
from tests.dsml.diff_corpus import build as diff_corpus
from tests.dsml.fp_corpus import PROSE, corpus

native = pytest.importorskip("exporter.dsml._textscan", reason="built without a C compiler")
DSML_KERNELS = ("c",)  # every test here runs both builds itself (tests/dsml/conftest.py)
MANY = settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _prose_same(text: str) -> None:
    assert accel.kernel() == "c"  # so the dispatchers below run the accelerator
    expected = ph.prose_screens_python(text)
    assert ph.prose_screens(text) == expected, text[:120]
    # and the fused pass over reasoning (scan_prose: the screens with the text checks)
    assert ph.reasoning_passes(text)[1] == expected, text[:120]


def _glue_same(text: str) -> None:
    assert native.may_glue(text) == ph._may_glue(text), text[:120]


def _value_same(text: str) -> None:
    assert accel.kernel() == "c"
    # value_flags: the same screens and check_value's others, on the value alone and on a
    # span of a longer text (a block's values are screened in one call, without slices)
    flags = ph.value_flags_python(text)
    assert ph.value_flags(text) == flags, text[:120]
    around = "中" + text + "\n-x"
    spans = [(1, 1 + len(text)), (0, len(around)), (1 + len(text), len(around))]
    expected = bytes(ph.value_flags_python(around[a:b]) for a, b in spans)
    assert ph.values_flags(around, spans) == expected, text[:120]


def _all_same(text: str) -> None:
    _prose_same(text)
    _glue_same(text)
    _value_same(text)


def _texts() -> list[str]:
    texts = [c.text for c in corpus() if c.text]
    for item in diff_corpus(clean_per_dialect=60):
        reasoning, _, content = item.text.partition("</think>")
        texts += [item.text, reasoning, content]
    texts += ["\n\n".join(paragraphs) for paragraphs in PROSE.values()]
    return texts + [build(5_000) for build in SHAPES.values()]


def test_equal_on_the_corpora() -> None:
    answers: tuple[set[tuple[bool, ...]], set[tuple[bool, ...]]] = (set(), set())
    flags: set[int] = set()
    for text in _texts():
        _all_same(text)
        answers[0].add(ph.prose_screens_python(text))
        answers[1].add(ph.value_screens_python(text))
        flags.add(ph.value_flags_python(text))
    # the corpora reach both answers of every screen, so the comparison compared something
    for k in range(6):  # three answers of each function, told apart by their position
        assert {a[k % 3] for a in answers[k // 3]} == {False, True}, k
    for bit in (ph.V_NON_ASCII, ph.V_THINK, ph.V_CLOSING):
        assert {f & bit for f in flags} == {0, bit}, bit


# Characters at both ends of every range the glue classes read (phenotypes._glue_table),
# whitespace str.split knows beyond ASCII, a lone surrogate and characters beyond the BMP.
_EDGES = [
    0x40,
    0x41,
    0x5A,
    0x5B,
    0x60,
    0x61,
    0x7A,
    0x7B,
    0xBF,
    0xC0,
    0x27F,
    0x280,
    0x33F,
    0x340,
    0x3FF,
    0x400,
    0x4FF,
    0x500,
    0x5BF,
    0x5C0,
    0x5FF,
    0x600,
    0x67F,
    0x680,
    0x7FF,
    0x800,
    0xFFF,
    0x1000,
    0x2FFF,
    0x3000,
    0x4E2D,
    0xAC00,
    0xD800,
    0xDFFF,
    0xE000,
    0x1F389,
    0x20000,
]
_SPACES = list(" \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0\u1680\u2000\u2028\u3000")
_CHARS = st.sampled_from(
    [chr(c) for c in _EDGES] + _SPACES + list("ab_1²½.,;:!?)]}<|[/INSTY>") + list("щלم中한")
)
_WORDS = st.sampled_from(["the", "plan", "данные", "中文", "x", "42", "-", "a\u3000b", "ok."])
_SEPS = st.sampled_from([" ", "\n", "  ", "\t", "\u3000", "\x1c", "\n\n"])


@st.composite
def _prose(draw: st.DrawFn) -> str:
    """Words around the prose-loop thresholds (need * 2 characters, need + ngram words), often
    with a passage repeated (probes found earlier), and template needles and their prefixes."""
    need = t.PROSE_LOOP_MIN_WORDS
    head = draw(st.lists(_WORDS, max_size=need + 10))
    unit = draw(st.lists(_WORDS, min_size=1, max_size=need))
    copies = draw(st.integers(0, 4))
    tail = draw(st.lists(_WORDS, max_size=40))
    words = head + unit * copies + tail
    seps = draw(st.lists(_SEPS, min_size=len(words), max_size=len(words)))
    text = "".join(w + s for w, s in zip(words, seps, strict=True))
    needle = draw(st.sampled_from(["", "<", "[INS", "<<SYS", *ph._TEMPLATE_NEEDLES]))
    at = draw(st.integers(0, len(text)))
    return text[:at] + needle + text[at:]


@given(_prose())
@example("the plan " * 200)
@example(("word " * 1700) + "end")  # joined text past screen_max
@MANY
def test_prose_screens_equal_on_generated_prose(text: str) -> None:
    _prose_same(text)


@given(st.lists(st.text(_CHARS, max_size=12), max_size=20).map("".join))
@MANY
def test_screens_equal_on_generated_characters(text: str) -> None:
    _all_same(text)


@given(
    st.text(_CHARS, max_size=4),
    st.text(_CHARS, min_size=1, max_size=t.VALUE_LOOP_MAX_UNIT + 1),
    st.sampled_from(
        [
            *range(t.VALUE_LOOP_UNIT_REPEATS - 2, t.VALUE_LOOP_UNIT_REPEATS + 2),
            *range(t.VALUE_LOOP_CHAR_REPEATS - 1, t.VALUE_LOOP_CHAR_REPEATS + 2),
        ]
    ),
    st.text(_CHARS, max_size=4),
)
@example("x", "abc", t.VALUE_LOOP_UNIT_REPEATS, "")
@example(" ", "abc", t.VALUE_LOOP_UNIT_REPEATS, "")
@example("²", "的", t.VALUE_LOOP_UNIT_REPEATS, "")
@example("\n", "了", t.VALUE_LOOP_CHAR_REPEATS, "")  # a letter run after a line break
@MANY
def test_value_loop_screen_equal_around_its_thresholds(
    before: str, unit: str, copies: int, after: str
) -> None:
    """Units up to one longer than the regex allows, one copy short of and past its count,
    after a word character, punctuation, a space or nothing."""
    for text in (before + unit * copies + after, unit * copies, before + unit * copies):
        _value_same(text)


_RUN_WORDS = st.sampled_from(["the", "Ab", "x", "42", "x2", "²", "½", "_a", "данные", "中文", "ha"])


@given(
    st.text(_CHARS, max_size=3),
    st.lists(_RUN_WORDS, min_size=1, max_size=ph._WORD_UNIT_MAX + 1),
    st.integers(ph._WORD_SCREEN_COPIES - 1, t.VALUE_WORD_LOOP_REPEATS + 1),
    st.sampled_from([" ", "  ", "\n", "\t", "\u3000"]),
    st.text(_CHARS, max_size=3),
)
@example("", ["the"], 8, " ", "")
@example("a", ["Ab", "x"], 8, " ", "")
@MANY
def test_word_run_screen_equal_around_its_thresholds(
    before: str, unit: list[str], copies: int, sep: str, after: str
) -> None:
    """Units of up to one word more than the regex allows (letters, digits, numerics, "_"),
    around the copy counts and the space count, after whitespace, a character or nothing."""
    run = (sep.join(unit) + " ") * copies
    for text in (before + run + after, run, run.rstrip(), before + " " + run):
        _value_same(text)


def test_value_screens_equal_for_every_ascii_character() -> None:
    """The accelerator answers ASCII characters' word and letter classes from their code (no
    database lookup) and screens the glued-unit pass on a stretch of equal characters a unit
    apart: every ASCII character before a unit, as the unit, inside a word of a word run, and
    each unit length at one copy short of and at the count."""
    for code in range(128):
        c = chr(code)
        for text in (
            c + "ab" * t.VALUE_LOOP_UNIT_REPEATS,
            "x" + c + c * t.VALUE_LOOP_UNIT_REPEATS,
            "x" + (c + "b") * t.VALUE_LOOP_UNIT_REPEATS,
            ("a" + c + "b ") * t.VALUE_WORD_LOOP_REPEATS,
            (c + " ") * t.VALUE_WORD_LOOP_REPEATS,
        ):
            _value_same(text)
    for size in range(1, t.VALUE_LOOP_MAX_UNIT + 2):
        unit = "abcdefghijk"[:size]
        for copies in (t.VALUE_LOOP_UNIT_REPEATS - 1, t.VALUE_LOOP_UNIT_REPEATS):
            for text in ("x" + unit * copies, "x" + unit * copies + "y", "x " + unit * copies):
                _value_same(text)
                _value_same(text.replace("a", "中"))


# what value_flags reads besides the three value regexes' screens: "think>" and its pieces,
# whitespace str.rstrip knows (beyond ASCII too), closing-run symbols, ASCII and non-ASCII
_TAIL_CHARS = st.sampled_from([*_SPACES, *"think>/<-=_a1", "—", "中", "─", "é"])


@given(
    st.text(_TAIL_CHARS, max_size=40),
    st.sampled_from("-=—─a中 "),
    st.integers(0, 20),
    st.text(st.sampled_from(_SPACES), max_size=3),
)
@example("print(f(3))\n", "-", ph._CLOSING_MIN, "\u3000\x85")
@example("x", "—", ph._CLOSING_MIN - 1, "")
@example("<think", ">", 1, "")
@MANY
def test_value_flags_equal_on_tails_think_tags_and_runs(
    head: str, ch: str, copies: int, tail: str
) -> None:
    """The closing-run tail (at, below and past its length, behind any whitespace), "think>"
    whole and cut, and a character above 127 anywhere."""
    for text in (head + ch * copies + tail, head + ch * copies, ch * copies + head):
        _value_same(text)


@given(st.text(st.sampled_from("aab.-"), max_size=200), st.text(_CHARS, max_size=6))
@example("x" + "ab" * t.VALUE_LOOP_UNIT_REPEATS, "")
@example("x" + "abcdefgh" * t.VALUE_LOOP_UNIT_REPEATS, "")
@example("x" + "abcdefgh" * (t.VALUE_LOOP_UNIT_REPEATS - 1) + "abcdefg", "")
@MANY
def test_period_stretch_skips_nothing(text: str, after: str) -> None:
    """The glued-unit screen reads a window of text backwards and skips past a position that
    breaks it: on text from few characters (stretches that break late, restart and overlap)
    it answers what the regex answers."""
    _value_same(text + after)
    _value_same(after + text)


def test_value_flags_reject_what_they_cannot_read() -> None:
    numbers = ph._VALUE_FLAG_NUMBERS
    assert native.value_flags("text", [], *numbers) == b""
    for spans in ([(0, 5)], [(3, 2)], [(-1, 2)]):
        with pytest.raises(ValueError):
            native.value_flags("text", spans, *numbers)
    for bad in ([(0,)], [[0, 1]], [("0", 1)], 7):
        with pytest.raises(TypeError):
            native.value_flags("text", bad, *numbers)
    with pytest.raises(ValueError):
        native.value_flags("text", [(0, 4)], *numbers[:-1], 0)  # no closing run below 1


def test_screens_reject_what_they_cannot_read() -> None:
    with pytest.raises(TypeError):
        native.may_glue(b"bytes")
    with pytest.raises(TypeError):
        native.prose_screens("text", 80, 6, 32, 8192, ("",))
    with pytest.raises(ValueError):
        native.prose_screens("text", 10, 6, 32, 8192, ())  # no stride between probes
    with pytest.raises(ValueError):
        native.value_flags("text", [(0, 4)], 0, 8, 3, 4, 7, 16, 4)


def test_scan_prose_answers_what_scan_and_prose_screens_answer() -> None:
    """The fused pass the grader runs over reasoning returns the answers of the two passes
    and of the tag screen, on every text of the corpora and at the tag screen's edges (each
    pass is compared with its Python twin above)."""
    args = (t.PROSE_LOOP_MIN_WORDS, t.PROSE_LOOP_NGRAM, ph._PROBE, ph._SCREEN_MAX)
    edges = ["<", "D", "DSM", "DSML", "xDSML", "DSMl", "DSM<", "中DSML", "\U0001f389DSM", "a<b"]
    tags: set[bool] = set()
    for text in [*_texts(), "", *edges]:
        tagged = "<" in text or "DSML" in text
        expected = (native.scan(text), native.prose_screens(text, *args, ph._TEMPLATE_NEEDLES))
        got = native.scan_prose(text, *args, ph._TEMPLATE_NEEDLES)
        assert got == (*expected, tagged), text[:120]
        tags.add(tagged)
    assert tags == {False, True}
    with pytest.raises(ValueError):
        native.scan_prose("text", 1, 1, 40, 10, ())  # a stride below 1, as prose_screens says
    for end in (-1, 5):
        with pytest.raises(ValueError):
            native.scan_prose("text", *args, (), end)


@given(st.lists(st.text(_CHARS, max_size=12), max_size=20).map("".join), st.text(_CHARS))
@example("plain ascii head", "中文 tail </think> DSML")
@example("the plan " * 200, "\x00\ufffd")
@MANY
def test_scan_prose_reads_a_head_in_place(head: str, tail: str) -> None:
    """scan_prose over text[:end] (the reasoning, read inside the grade's text) answers what
    it answers over the head alone: an ASCII head of a wider text included."""
    args = (t.PROSE_LOOP_MIN_WORDS, t.PROSE_LOOP_NGRAM, ph._PROBE, ph._SCREEN_MAX)
    alone = native.scan_prose(head, *args, ph._TEMPLATE_NEEDLES)
    assert native.scan_prose(head + tail, *args, ph._TEMPLATE_NEEDLES, len(head)) == alone
    assert ph.reasoning_passes(head + tail, len(head)) == ph.reasoning_passes(head)


@pytest.mark.parametrize("shift", range(0, 2 * ph._PROBE + 1))
def test_prose_loop_screen_finds_a_probe_seen_before_at_every_offset(shift: int) -> None:
    """The accelerator finds a probe's earlier copy by blocks of its characters at fixed
    offsets: a copy at every offset from a block boundary is found, and a copy that differs in
    its last or first character is not (the twin decides both)."""
    stride = 2 * t.PROSE_LOOP_MIN_WORDS - ph._PROBE
    words = " ".join(f"w{k:03d}" for k in range(3 * t.PROSE_LOOP_MIN_WORDS))  # all distinct
    probe = words[2 * stride : 2 * stride + ph._PROBE]  # the second probe's characters
    assert " " not in (probe[0], probe[-1])  # so a copy leaves the words single-spaced
    at = stride // 2 + shift
    answers = set()
    for copy in (probe, probe[:-1] + "#", "#" + probe[1:]):
        text = words[:at] + copy + words[at + len(copy) :]  # the probes stay where they were
        assert " ".join(text.split()) == text
        _prose_same(text)
        answers.add(ph.prose_screens_python(text)[0])
    assert answers == {True, False}


@pytest.mark.parametrize(("need", "probe"), [(1, 1), (2, 1), (2, 2), (2, 3), (3, 5), (9, 8)])
def test_prose_loop_probes_at_other_sizes(need: int, probe: int) -> None:
    """The accelerator takes the screen's numbers as arguments: at probes of 1-8 characters
    (blocks of 1-4, odd numbers of pieces, strides down to 1) it answers what the twin answers
    with the same numbers, on text with and without repeats (under the sanitizers too)."""
    rng = random.Random(probe * 100 + need)
    vocabulary = ["a", "bc", "def", "中", "x", "ab", "ghij"]
    saved = (t.PROSE_LOOP_MIN_WORDS, t.PROSE_LOOP_NGRAM, ph._PROBE)
    answers = set()
    try:
        t.PROSE_LOOP_MIN_WORDS, t.PROSE_LOOP_NGRAM, ph._PROBE = need, 1, probe
        for size in range(0, 60):
            words = [rng.choice(vocabulary[: 2 + size % 6]) for _ in range(size)]
            text = " ".join(words) + ("" if size % 3 else "  " + "".join(words[:4]))
            got = native.prose_screens(text, need, 1, probe, ph._SCREEN_MAX, ())[0]
            assert got == ph._may_loop(text), (need, probe, text)
            answers.add(got)
    finally:
        t.PROSE_LOOP_MIN_WORDS, t.PROSE_LOOP_NGRAM, ph._PROBE = saved
    assert answers == {False, True}


_SOUP_WORDS = st.sampled_from(
    [*sorted(soup.PIECES)[:12], "ation", "the", "", "ingx", "ING", "ation\n", "中", "ity."]
)


@given(
    st.lists(st.lists(_SOUP_WORDS, max_size=12), max_size=5),
    st.sampled_from([" ", "  ", "\n", "\u3000 "]),
)
@example([["ation", "ment", "ness", "ity", "ous", "ive"]], " ")
@example([["x"], ["ation", "ment", "ness", "ity", "ous"], ["ive"]], " ")
@MANY
def test_soup_screen_finds_the_first_value_that_may_hold_soup(
    values: list[list[str]], sep: str
) -> None:
    """soup_screen over a block's values answers the first value where its twin
    (soup.may_soup_python) says a run of pieces can be there: pieces one short of and at the
    run, runs broken by an empty word, another separator or a piece's look-alike."""
    texts = [sep.join(words) if k % 2 else " ".join(words) for k, words in enumerate(values)]
    text, spans = "", []
    for value in texts:
        text += "<x>"
        spans.append((len(text), len(text) + len(value)))
        text += value
    expected = next(
        (k for k, (a, b) in enumerate(spans) if soup.may_soup_python(text[a:b])), len(spans)
    )
    assert native.soup_screen(text, spans, t.SOUP_MIN_PIECES, soup._WINDOW) == expected
    # a value longer than a window is read in windows: always one that may hold soup
    assert native.soup_screen("ab c", [(0, 4)], t.SOUP_MIN_PIECES, 3) == 0


def test_soup_screen_counts_pieces_with_wide_ends() -> None:
    """The screen rejects a word by its first and last characters only where every piece's are
    ASCII (soup.PIECES): pieces that start or end wider are still found."""
    try:
        native.set_pieces(("中文", "ab", "éx"))
        for word, found in (("中文", 1), ("ab", 1), ("éx", 1), ("中x", 0), ("ba", 0)):
            text = " ".join([word] * t.SOUP_MIN_PIECES)
            assert native.soup_screen(text, [(0, len(text))], t.SOUP_MIN_PIECES, 1000) == 1 - found
    finally:
        accel.set_pieces(soup.PIECES)
    text = " ".join(sorted(soup.PIECES)[: t.SOUP_MIN_PIECES])
    assert native.soup_screen(text, [(0, len(text))], t.SOUP_MIN_PIECES, 1000) == 0


def test_soup_screen_rejects_what_it_cannot_read() -> None:
    for spans in ([(0, 5)], [(3, 2)]):
        with pytest.raises(ValueError):
            native.soup_screen("text", spans, 6, 10)
    with pytest.raises(ValueError):
        native.soup_screen("text", [], 0, 10)
    with pytest.raises(TypeError):
        native.soup_screen("text", [(0,)], 6, 10)
    for bad in (["ation"], ("",), ("x" * 17,), ("ok",) * 129):
        with pytest.raises(TypeError):
            native.set_pieces(bad)
