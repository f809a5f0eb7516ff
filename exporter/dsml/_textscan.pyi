"""Types of the C accelerator exporter/dsml/_textscan.c: the grader's hot character-level
passes, each with a pure-Python reference it is tested equal to."""

from collections.abc import Sequence

from exporter.dsml.accel import NativeSpelling, RawCall, ScanResult

def scan(text: str, loops: int = 3) -> ScanResult:
    """textcheck.check_text_python's detection passes: control offsets, U+FFFD offsets,
    mojibake spans, script mix, the salad screen, loops."""

def configure(**thresholds: int) -> None:
    """Set every threshold scan() uses: the keys of accel.NATIVE_THRESHOLDS, all of them."""

def canonical_calls(
    text: str,
    pos: int,
    body_end: int,
    spelling: NativeSpelling,
    /,
) -> tuple[tuple[RawCall, ...], int] | None:
    """fastpath.canonical_calls_python: the invokes of a canonical block, or None."""

def may_glue(text: str, /) -> bool:
    """phenotypes._may_glue: whether two scripts can touch inside a word."""

def prose_screens(
    text: str, need: int, ngram: int, probe: int, screen_max: int, needles: tuple[str, ...], /
) -> tuple[bool, bool, bool]:
    """phenotypes.prose_screens_python: whether the prose-loop pass, the template-token pass
    and the glue pass can find anything, in one pass."""

def value_flags(
    text: str,
    spans: Sequence[tuple[int, int]],
    max_unit: int,
    repeats: int,
    max_words: int,
    copies: int,
    min_spaces: int,
    run: int,
    closing: int,
    /,
) -> bytes:
    """phenotypes.value_flags_python of text[a:b] for each span, one byte of V_* bits each."""

def set_pieces(pieces: tuple[str, ...], /) -> None:
    """The words soup_screen counts (soup.PIECES)."""

def soup_screen(text: str, spans: Sequence[tuple[int, int]], need: int, window: int, /) -> int:
    """The index of the first span where soup.may_soup_python(text[a:b]) holds, or len(spans)."""

def scan_prose(
    text: str,
    need: int,
    ngram: int,
    probe: int,
    screen_max: int,
    needles: tuple[str, ...],
    end: int = ...,
    /,
) -> tuple[ScanResult, tuple[bool, bool, bool], bool]:
    """(scan(text), prose_screens(text, ...), "<" in text or "DSML" in text) in one pass:
    phenotypes.reasoning_passes; of text[:end] where end is given (read in place)."""
