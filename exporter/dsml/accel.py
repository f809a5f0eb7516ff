"""Which build of the grader's character-level passes runs: the C accelerator or its Python twin.

The only place that decides. ``exporter/dsml/_textscan.c`` compiles two hot passes and three
screens, each with a pure-Python reference that is its specification
(``textcheck.check_text_python``, ``fastpath.canonical_calls_python``, and
``phenotypes._may_glue``, ``prose_screens_python``,
``value_flags_python`` (over ``value_screens_python``), ``soup.may_soup_python``), as CPython's
``_json`` accelerates ``json``; ``scan_prose`` runs the text checks, the prose screens and a
tag screen over one reasoning in one pass (``phenotypes.reasoning_passes``: the twins one after
the other). The grammar
(``tokens.py`` + ``structure.py``) is written once, in Python.

At import the accelerator runs when it was built, unless ``DSV4_DSML_KERNEL`` says otherwise:
``python`` forces the twin (what an install without a C compiler runs), ``c`` asks for the
accelerator, ``auto`` or unset takes it when built. A value that cannot be honoured never stops
the process: the twin runs and :data:`WHY` says why. :func:`select` switches at run time, so the
DSML tests run whole on both kernels (``tests/dsml/conftest.py``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from types import ModuleType

from exporter.dsml import thresholds as t
from exporter.dsml.loops import MIN_LOOP_CHARS

ENV = "DSV4_DSML_KERNEL"
KERNELS = ("c", "python")

# What the accelerator's scan() returns (exporter/dsml/_textscan.pyi): control offsets, U+FFFD
# offsets, mojibake spans, script mix (start, end, group letters), the salad screen's answer,
# loops (start, end, period, repeats).
ScanResult = tuple[
    tuple[int, ...],
    tuple[int, ...],
    tuple[tuple[int, int], ...],
    tuple[int, int, bytes] | None,
    bool,
    tuple[tuple[int, int, int, int], ...],
]
# One call of a canonical block as the structural pass finds it: name, start, end (the
# invoke's last character), and its parameters (key, string flag, value start, value end).
RawParam = tuple[str, bool, int, int]
RawCall = tuple[str, int, int, tuple[RawParam, ...]]
NativeSpelling = tuple[str, str, str, str, str, bool, int]
CanonicalCalls = Callable[[str, int, int, NativeSpelling], tuple[tuple[RawCall, ...], int] | None]
# The screens of phenotypes.py: may_glue(text), prose_screens(text, need, ngram, probe,
# screen_max, needles) -> (loop, template, glue); their numbers and needles come from
# the caller.
MayGlue = Callable[[str], bool]
ProseScreens = Callable[[str, int, int, int, int, tuple[str, ...]], tuple[bool, bool, bool]]
# value_flags(text, spans, max_unit, repeats, max_words, copies, min_spaces, run, closing)
# -> one byte of V_* bits per span
# (phenotypes.value_flags_python of text[a:b]): a block's values screened in one call.
# soup_screen(text, spans, need, window) -> index of the first span that can hold word-piece
# soup (soup.may_soup_python), or len(spans); the pieces come through set_pieces().
SoupScreen = Callable[[str, Sequence[tuple[int, int]], int, int], int]
ValueFlags = Callable[[str, Sequence[tuple[int, int]], int, int, int, int, int, int, int], bytes]
# scan, prose_screens and a tag screen over one text in one pass (reasoning is read whole by
# all three): scan_prose(text, *prose_screens' numbers and needles, end) -> (scan(head),
# prose_screens(head, ...), "<" in head or "DSML" in head) of head = text[:end].
ScanProse = Callable[
    [str, int, int, int, int, tuple[str, ...], int],
    tuple[ScanResult, tuple[bool, bool, bool], bool],
]

# Every number the accelerator uses, from thresholds.py (its configure() takes exactly these).
NATIVE_THRESHOLDS: dict[str, int] = {
    "probe": t.LOOP_PROBE,
    "stride": t.LOOP_STRIDE,
    "max_period": t.LOOP_MAX_PERIOD,
    "far_every": t.LOOP_FAR_EVERY,
    "tries": t.LOOP_TRIES,
    "min_letters": t.LOOP_MIN_LETTERS,
    "repeats_short": t.LOOP_REPEATS_SHORT,
    "repeats_medium": t.LOOP_REPEATS_MEDIUM,
    "repeats_long": t.LOOP_REPEATS_LONG,
    "repeats_few": t.LOOP_REPEATS_FEW_LETTERS,
    "short_unit": t.LOOP_SHORT_UNIT,
    "long_unit": t.LOOP_LONG_UNIT,
    "min_loop_chars": MIN_LOOP_CHARS,
    "script_min_groups": t.SCRIPT_MIN_GROUPS,
    "script_min_switches": t.SCRIPT_MIN_SWITCHES,
    "script_span": t.SCRIPT_SPAN,
    "script_max_switches": t.SCRIPT_MAX_SWITCHES,
    "salad_min_run": t.SALAD_MIN_RUN,
}


def _load() -> ModuleType | None:
    try:
        from exporter.dsml import _textscan
    except ImportError:  # installed without a C compiler
        return None
    _textscan.configure(**NATIVE_THRESHOLDS)
    return _textscan


_BUILT = _load()

# The passes callers run; None means "run the Python twin". Read at each call (accel.scan),
# never imported by name, so select() reaches every caller.
scan: Callable[[str], ScanResult] | None = None
canonical_calls: CanonicalCalls | None = None
may_glue: MayGlue | None = None
prose_screens: ProseScreens | None = None
value_flags: ValueFlags | None = None
soup_screen: SoupScreen | None = None
scan_prose: ScanProse | None = None
WHY = ""
"""Why the kernel differs from what ``DSV4_DSML_KERNEL`` asked for ("" when it does not)."""


def available() -> bool:
    """Was the accelerator built (and importable) in this install?"""
    return _BUILT is not None


def kernel() -> str:
    """``c`` when the accelerator runs now, ``python`` when the twin does."""
    return "c" if scan is not None else "python"


def select(name: str) -> None:
    """Run ``name`` (``c`` or ``python``) from now on, in every caller.

    ValueError for any other name; RuntimeError for ``c`` when the accelerator is not built."""
    global scan, canonical_calls, may_glue, prose_screens, value_flags, scan_prose
    global soup_screen
    if name not in KERNELS:
        raise ValueError(f"unknown DSML kernel {name!r}: use one of {', '.join(KERNELS)}")
    if name == "python":
        scan = canonical_calls = may_glue = prose_screens = scan_prose = None
        value_flags = soup_screen = None
        return
    if _BUILT is None:
        raise RuntimeError("exporter/dsml/_textscan.c is not built here: run `make native`")
    scan, canonical_calls = _BUILT.scan, _BUILT.canonical_calls
    may_glue, prose_screens = _BUILT.may_glue, _BUILT.prose_screens
    scan_prose = _BUILT.scan_prose
    value_flags, soup_screen = _BUILT.value_flags, _BUILT.soup_screen


def set_pieces(pieces: Iterable[str]) -> None:
    """Give the accelerator the words its ``soup_screen`` counts (``soup.PIECES``, which calls
    this at import: the list is written once, there)."""
    if _BUILT is not None:
        _BUILT.set_pieces(tuple(sorted(pieces)))


def _from_env(value: str) -> tuple[str, str]:
    """(kernel, why) for a ``DSV4_DSML_KERNEL`` value; never raises."""
    wanted = value.strip().lower()
    default = "c" if _BUILT is not None else "python"
    if wanted in ("", "auto"):
        return default, ""
    if wanted not in KERNELS:
        return default, f"{ENV}={value!r} is not c, python or auto: {default} runs"
    if wanted == "c" and _BUILT is None:
        return "python", f"{ENV}=c but exporter/dsml/_textscan.c is not built: python runs"
    return wanted, ""


_chosen, WHY = _from_env(os.environ.get(ENV, ""))
select(_chosen)
