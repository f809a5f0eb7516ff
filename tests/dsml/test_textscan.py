"""The C accelerator of the text checks (exporter/dsml/_textscan.c) finds exactly what the
pure-Python reference (``textcheck.check_text_python``) finds.

The reference is the specification: the accelerator only makes it fast, as CPython's ``_json``
does for ``json``. So every test here compares the two, position for position and detail for
detail, on the corpora, on the adversarial shapes at sizes where the bounded loops matter, and
on generated text built from the characters each check looks at. A build without a C compiler
falls back to the reference; that fallback is exercised too.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.dsml import accel, fastpath, phenotypes, textcheck
from exporter.dsml import markers as m
from exporter.dsml import thresholds as t
from exporter.dsml.grader import body_end_of
from tests.dsml.adversarial import SHAPES
from tests.dsml.builders import apply_edits
from tests.dsml.compiler import c_compiler
from tests.dsml.diff_corpus import build as diff_corpus
from tests.dsml.fp_corpus import PROSE, corpus

native = pytest.importorskip("exporter.dsml._textscan", reason="built without a C compiler")
DSML_KERNELS = ("c",)  # every test here runs both builds itself (tests/dsml/conftest.py)
MANY = settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def test_the_accelerator_runs_where_a_compiler_is() -> None:
    """Without it nothing fails, the grader is only slower: so a lost build step would go
    unnoticed but for this test (CI has gcc)."""
    if c_compiler() is None:
        pytest.skip("no C compiler on this machine: the reference runs")
    assert accel.available(), "exporter/dsml/_textscan.c was not built: run `make native`"
    # and a plain import runs it: exporter.dsml.KERNEL == "c" (test_accel.py, in a subprocess,
    # so a DSV4_DSML_KERNEL set for this run does not decide)


def _same(text: str) -> None:
    expected = textcheck.check_text_python(text)
    assert textcheck.check_text(text) == expected, text[:120]
    # and the fused pass over reasoning (scan_prose: the text checks with the prose screens)
    assert accel.kernel() == "c"
    hits, _screens, tagged = phenotypes.reasoning_passes(text)
    assert hits == expected, text[:120]
    assert tagged == ("<" in text or "DSML" in text), text[:120]


def test_equal_on_the_corpora() -> None:
    texts = [c.text for c in corpus() if c.text]
    for item in diff_corpus(clean_per_dialect=60):
        texts.append(item.text)
        reasoning, _, content = item.text.partition("</think>")
        texts += [reasoning, content]
    texts += ["\n\n".join(paragraphs) for paragraphs in PROSE.values()]
    kinds: set[str] = set()
    for text in texts:
        _same(text)
        kinds.update(hit[0] for hit in textcheck.check_text(text))
    # the corpora reach every check, so the comparison above compared something
    assert {"ngram_loop", "symbol_salad", "script_mix"} <= kinds, kinds


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_equal_on_adversarial_shapes(shape: str) -> None:
    for size in (3_000, 200_000):
        _same(SHAPES[shape](size))


# Characters each check looks at: ASCII letters, digits and the punctuation around glued Ġ;
# whitespace (deleted by the salad screen); C0/C1 controls, ESC and "["; the mojibake leads
# (Â Ã Ð Ñ à-ï ð) and continuation look-alikes; Ġ Ċ ĉ; U+FFFD; one letter of every script
# group, CJK punctuation (U+3000-U+303F) and the sentence ends of every script; a surrogate
# and a character beyond the BMP (4-byte strings).
_CHARS = (
    list("abcxyzXYZ019.,;:!?)]}'\"-=*_ \t\n\r\x0c\x0b\x1b[\x00\x7f")
    + list("\x80\x85\x9f\xa0\xa9\xbf")
    + list("ÂÃÐÑàåéïð")
    + list("\u0122\u0143\u0152\u0178\u02c6\u2013\u201c\u2026\u20ac\u2122")
    + list("ĠĊĉ\ufffd")
    + list("аБαβאבكلअथกขạ中文かカ한국ԱՀ")
    + list("\u3000\u3002\u303f\uff01\uff1f\u0964\u06d4\u061f\ud800\U0001f389")
)
_CHAR = st.sampled_from(_CHARS)
_PIECE = st.one_of(
    st.text(_CHAR, max_size=40),
    # loops: a unit repeated, around the thresholds (16 / 6 / 4 / 64 repeats)
    st.builds(
        lambda unit, k: unit * k, st.text(_CHAR, min_size=1, max_size=40), st.integers(1, 90)
    ),
    # salads and runs of one character
    st.builds(lambda ch, k: ch * k, _CHAR, st.integers(1, 300)),
    # words of several scripts joined by spaces (script switches)
    st.lists(
        st.sampled_from(["ab", "cd", "аб", "вг", "αβ", "中", "文", "אב", "كل", "한국", "a", "б"]),
        min_size=2,
        max_size=30,
    ).map(" ".join),
)


@given(st.lists(_PIECE, max_size=8).map("".join))
@MANY
def test_equal_on_generated_text(text: str) -> None:
    _same(text)


@given(st.text(_CHAR, min_size=1, max_size=30), st.integers(1, 40), st.text(_CHAR, max_size=300))
@MANY
def test_equal_on_loops_at_every_offset(unit: str, repeats: int, prefix: str) -> None:
    """A loop near the start makes the Python finder look behind index 0 (a negative index
    counts from the end there); the accelerator must do the same."""
    body = unit * repeats
    for text in (prefix + body, body + prefix, prefix + body + prefix[::-1]):
        _same(text)


def _at_edges(core: str) -> list[str]:
    """``core`` alone, at the start, in the middle and at the end of some prose."""
    pad = "Some words here. "
    return [core, core + pad, pad + core + pad, pad + core]


def _thresholds() -> list[str]:
    """Each check just below, at and just above its threshold (from thresholds.py)."""
    run = t.SALAD_MIN_RUN
    cores = []
    for k in (run - 1, run, run + 1):
        cores += ["?!;" * (k // 3) + "?!;"[: k % 3], ", . ; " * (k // 3) + ",.;"[: k % 3]]
        cores.append("\u2014\u3002" * (k // 2) + "\u2014" * (k % 2))
    for unit, need in (("ok. ", t.LOOP_REPEATS_SHORT), ("the same line again\n", 6), ("ha", 64)):
        cores += [unit * (need - 1), unit * need, unit * (need + 1)]
    words = ["ab", "аб", "αβ", "中", "אב"]
    for k in (t.SCRIPT_MIN_SWITCHES - 1, t.SCRIPT_MIN_SWITCHES, t.SCRIPT_MIN_SWITCHES + 1):
        cores.append(" ".join(words[i % len(words)] for i in range(k + 1)))
    for span in (t.SCRIPT_SPAN - 1, t.SCRIPT_SPAN, t.SCRIPT_SPAN + 1):
        cores.append(_switches_spanning(span))
    for moji in (
        "a\u0120b",
        "\u0120\u0120",
        "\u010a\u010a",
        ".\u010aX",
        "\u00c3\u00a9",
        "\u00e2\u20ac\u2122",
        "\u00f0\u0178\u02dc\u20ac",
        "\u00e2\u20ac",
        "\u00f0\u0178",
    ):
        cores += [moji, moji * 2, moji + " x " + moji]
    cores += ["\x01", "\x1b", "\x1b[", "\x7f\x9f", "\ufffd"]
    return cores


def _switches_spanning(span: str | int) -> str:
    """SCRIPT_MIN_SWITCHES switches between three scripts whose first and last switch points
    are ``span`` characters apart (switch k sits at the last letter of word k; the gap to the
    next is that word's length plus its space)."""
    need = t.SCRIPT_MIN_SWITCHES
    letters = "aαа"  # latin, greek, cyrillic
    total = int(span) - (need - 1)  # letters in words 1..need-1
    lengths = [total // (need - 1)] * (need - 1)
    lengths[0] += total - sum(lengths)
    words = [letters[0] * 3] + [letters[(k + 1) % 3] * n for k, n in enumerate(lengths)]
    return " ".join([*words, letters[need % 3] * 3])


@pytest.mark.parametrize("core", _thresholds())
def test_equal_at_every_threshold_and_edge(core: str) -> None:
    for text in _at_edges(core):
        _same(text)


def test_equal_past_every_cap() -> None:
    """More than 8 hits of each character check, more loops than reported, 100k+ switches."""
    cases = [
        "\x01a" * 20,
        "\x1bx\x1b[" * 20 + "\x1b",
        "\ufffd " * 20,
        "caf\u00c3\u00a9 " * 20,
        "theĠmodel " * 20,
        "ĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠ",
        "".join(f"{w} " * 40 + ". " for w in ("alpha", "beta", "gamma", "delta", "epsilon")),
        "ab вг αβ " * 50_000,
    ]
    for text in cases:
        _same(text)


@pytest.mark.parametrize(
    "make",
    [
        lambda n: "abc" * (n // 3),
        lambda n: "the quick brown fox " * (n // 20),
        SHAPES["random unicode"],
    ],
    ids=["short loop", "sentence loop", "random unicode"],
)
def test_large_inputs_are_equal(make: Callable[[int], str]) -> None:
    """10 MB, past every bound of the loop search; how the cost grows is measured in
    bench/bench_dsml.py (linearity rows), not here."""
    _same(make(10_000_000))


def test_configure_takes_every_threshold_by_keyword() -> None:
    with pytest.raises(TypeError, match="every threshold"):
        native.configure(probe=t.LOOP_PROBE)
    with pytest.raises(TypeError):
        native.configure(12)
    # out of range: at most 16 distinct letters are counted per unit
    values = {**accel.NATIVE_THRESHOLDS, "min_letters": 99}
    with pytest.raises(ValueError, match="min_letters"):
        native.configure(**values)
    # the rejected call changed nothing
    _same("abc" * 40 + " the end")
    with pytest.raises(TypeError):
        native.scan(b"bytes are not text")


# --- the canonical block: fastpath.canonical_calls_python and its C build ---------------------


def _calls_same(text: str) -> None:
    """Both agree from every block opener of every spelling, with the body ending at the end,
    at the final EOS, and a few characters early (the regexes' endpos)."""
    end = body_end_of(text)[0]
    for sp in fastpath._SPELLINGS.values():
        at = text.find(sp.block_open)
        starts = {at, at + len(sp.block_open)} if at >= 0 else {0}
        for start in starts:
            for body_end in {end, len(text), max(0, end - 7)}:
                got = native.canonical_calls(text, start, body_end, sp.native)
                want = fastpath.canonical_calls_python(text, start, body_end, sp)
                assert got == want, (text[start : start + 200], body_end)


def _block_texts() -> list[str]:
    texts = [c.text for c in corpus() if c.text and "DSML" in c.text]
    return texts + [i.text for i in diff_corpus(clean_per_dialect=60) if "DSML" in i.text]


def test_canonical_calls_equal_on_the_corpora() -> None:
    accepted = 0
    for text in _block_texts():
        _calls_same(text)
        sp = next((s for s in fastpath._SPELLINGS.values() if s.block_open in text), None)
        if sp is not None:
            start = text.find(sp.block_open) + len(sp.block_open)
            accepted += fastpath.canonical_calls_python(text, start, len(text), sp) is not None
    assert accepted > 100  # both paths of the comparison were exercised


_EDITS = st.sampled_from(
    [
        *'<>"/\n |\uff5cDSMLD=',
        *("\u00a0", "\u3000", "\x1f", "\U0001f600", "<|", "<\uff5c", '"/>\n', "x" * 257),
        *(m.parameter_close(), m.parameter_close("v4.1"), m.invoke_close()),
        *('" string="true">', '" string="false">', '<\uff5cDSML\uff5cparameter name="'),
    ]
)


@given(
    st.sampled_from(_block_texts()),
    st.lists(st.tuples(st.floats(0, 1), st.integers(0, 2), _EDITS), min_size=1, max_size=4),
)
@MANY
def test_canonical_calls_equal_on_damaged_blocks(text: str, edits: list) -> None:
    """Blocks with characters and tag pieces inserted, deleted or replaced anywhere."""
    _calls_same(apply_edits(text, edits))


def _one_call(name: str, key: str, value: str, *, string: bool = True, tail: str = "") -> str:
    return (
        f"{m.block_open('v4')}\n{m.invoke_open(name)}\n{m.parameter_open(key, string)}{value}"
        f"{m.parameter_close()}\n{m.invoke_close()}\n{m.block_close('v4')}{tail}"
    )


_ODD = ["", " ", "\t", "\u00a0", "\u2003", "\u3000", "\x1c", "\x7f", "|", "\uff5c", "`", "\\", "'"]


@pytest.mark.parametrize("odd", _ODD)
def test_canonical_calls_equal_on_odd_names_and_keys(odd: str) -> None:
    """Characters name_problem rejects (Unicode whitespace included) and the length limit."""
    for name in (f"get{odd}x", odd, "n" * 255 + odd, "n" * 256, "n" * 257):
        _calls_same(_one_call(name, "city", "Paris"))
        _calls_same(_one_call("get", name, "Paris"))


@pytest.mark.parametrize(
    "value",
    ["Paris", "a<b", "a<|b", "a<\uff5cb", "D", "<", "a D<|", '{"k": [1, 2]}', "1e400", "NaN"],
)
def test_canonical_calls_equal_on_values(value: str) -> None:
    """Values the one-match path takes, and the ones (a "<" or a "D") the closer search takes."""
    for string in (True, False):
        for tail in ("", "\n", "\n\nmore", m.EOS):
            _calls_same(_one_call("get", "q", value, string=string, tail=tail))


def test_canonical_calls_equal_past_the_small_buffers() -> None:
    """More parameters and calls than the C code keeps without allocating, and long values."""
    param = m.parameter_open("k{}", True) + "v" * 40 + m.parameter_close() + "\n"
    invoke = m.invoke_open("tool") + "\n" + "".join(param.format(i) for i in range(100))
    block = (
        m.block_open("v4") + "\n" + (invoke + m.invoke_close() + "\n") * 20 + m.block_close("v4")
    )
    for text in (block, block.replace("k7", "k6"), block + "\n trailing"):
        _calls_same(text)


_FALLBACK = """
import json, sys
sys.modules["exporter.dsml._textscan"] = None  # as if built without a C compiler
from exporter.dsml import accel, grade_text
texts = json.load(sys.stdin)
print(json.dumps({"kernel": accel.kernel(),
                  "results": [[r.verdict, [list(f) for f in r.findings]]
                              for r in map(grade_text, texts)]}))
"""


def test_the_reference_runs_when_the_accelerator_is_missing() -> None:
    """Import falls back to the reference, and the grader's results are the same."""
    from exporter.dsml import grade_text

    texts = [c.text for c in corpus() if c.text][:300]
    texts += [SHAPES[s](4_000) for s in sorted(SHAPES)]
    out = subprocess.run(
        [sys.executable, "-c", _FALLBACK],
        input=json.dumps(texts),
        capture_output=True,
        text=True,
        check=True,
    )
    got = json.loads(out.stdout)
    assert got["kernel"] == "python"
    here = [[r.verdict, [list(f) for f in r.findings]] for r in map(grade_text, texts)]
    assert json.loads(json.dumps(here)) == got["results"]
