"""Types of the C accelerator exporter/dsml/_textscan.c: the grader's hot character-level
passes, each with a pure-Python reference it is tested equal to."""

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
