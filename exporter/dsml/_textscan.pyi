"""Types of the C accelerator exporter/dsml/_textscan.c (see textcheck.check_text)."""

Span = tuple[int, int]
Mix = tuple[int, int, bytes]  # start, end, the script-group letters involved
LoopSpan = tuple[int, int, int, int]  # start, end, period, repeats

def scan(
    text: str, loops: int = 3
) -> tuple[
    tuple[int, ...], tuple[int, ...], tuple[Span, ...], Mix | None, bool, tuple[LoopSpan, ...]
]:
    """control offsets, U+FFFD offsets, mojibake spans, script mix, salad screen, loops."""

def configure(**thresholds: int) -> None:
    """Set every threshold scan() uses: the keys of textcheck.NATIVE_THRESHOLDS, all of them."""
