"""`dsv4-sidecar scan`: offline triage of tool-call outputs (JSON Lines in, verdicts out).

Each line is ``{"text": ..., "grammar": "v4"|"v3.2", "finish_reason": ..., "tools": [...],
"thinking": bool}`` (only ``text`` required; ``tools`` may be names or OpenAI tool objects),
an OpenAI chat completion (or list of stream chunks), or ``{"response": <one of those>,
"tools": [...]}`` -- the sample shapes the ingest API takes. A line that cannot be read
(invalid JSON, nested deeper than 64 levels, a field of the wrong type) is reported as verdict
``error`` and the scan goes on; the summary names the first unreadable line numbers and
counts the rest. Blank lines are skipped. A line over 64 MiB is unreadable (skipped without
being held), and the whole input is bounded by ``--max-bytes`` and ``--max-seconds`` (a device
such as ``/dev/zero``, or a pipe that never ends): past either the scan stops, prints the
summary of what it read, and exits 2. On a terminal, progress (bytes read, lines graded)
is drawn on stderr while the scan runs; piped or redirected, nothing extra is written.
"""

from __future__ import annotations

import argparse
import contextlib
import heapq
import io
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, Literal

from exporter.dsml import DEFAULT_MAX_CHARS, REASON_SPECS, VERDICTS, Finding, Result
from exporter.dsml.engines import QUALIFIED
from exporter.dsml.grader import normalize_grammar
from exporter.samplers.decode import SampleError, from_json, grade, loads_bounded
from exporter.sources.bounded import (
    SCAN_LINE_MAX_BYTES,
    SCAN_MAX_BYTES,
    SCAN_MAX_SECONDS,
    BoundedReader,
    InputRejected,
    open_local,
    read_lines,
)
from exporter.stats import wilson_interval

if TYPE_CHECKING:
    from rich.text import Text

RANK = {"degenerate": 0, "error": 1, "truncated": 2, "suspect": 3}
# The summary names this many unreadable line numbers and counts the rest: enough to open the
# file at the first few, bounded however broken the input is.
MAX_UNREADABLE_LINES = 20
# Progress is updated every this many lines: a 547 MB file is millions of lines, and the bar
# needs a few updates a second, not one per line.
PROGRESS_EVERY = 512
_READ_SIZE = 1 << 20


def _grammar(value: str) -> str:
    """``auto``, a base grammar, or one an engine's parser reads (``QUALIFIED``, a vLLM one
    with its release: ``v4@vllm-0.30.0``)."""
    if value == "auto":
        return value
    try:
        normalize_grammar(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{exc} (or {', '.join(QUALIFIED)})") from None
    return value


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "scan",
        help="grade tool-call outputs from a JSON Lines file: verdicts, reasons, worst examples",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("file", metavar="FILE", help="JSON Lines file, or - for stdin")
    p.add_argument(
        "--json",
        action="store_true",
        help="one JSON object per input line on stdout, in order; the summary goes to stderr",
    )
    p.add_argument("--summary-json", metavar="FILE", help="write the summary as JSON to FILE")
    p.add_argument(
        "--grammar",
        type=_grammar,
        default="auto",
        help="grammar for lines that do not say (default: from the block's name); v4@vllm, "
        "v3.2@vllm, v4.1@vllm: as vLLM's deepseek_v4 / deepseek_v32 / deepseek_v41 parser "
        "delivers the block (v4@vllm-0.24.0: as that release's does; default the newest)",
    )
    p.add_argument(
        "--thinking",
        choices=("auto", "on", "off"),
        default="auto",
        help="thinking mode for lines that do not say (auto: split at the first </think>)",
    )
    p.add_argument("--examples", type=int, default=5, help="worst examples to show (default 5)")
    p.add_argument(
        "--max-chars",
        type=int,
        default=DEFAULT_MAX_CHARS,
        help="grade head and tail of longer outputs (default %(default)s characters)",
    )
    p.add_argument(
        "--max-bytes",
        type=int,
        default=SCAN_MAX_BYTES,
        help="stop after reading this many bytes in all (default %(default)s); the summary "
        "covers what was read and the exit status is 2",
    )
    p.add_argument(
        "--max-seconds",
        type=float,
        default=SCAN_MAX_SECONDS,
        help="stop after this many seconds in all (default %(default)s), likewise",
    )
    p.set_defaults(run=run)


@dataclass
class Summary:
    """Counts over a scan; every verdict listed, reasons by the number of lines showing them."""

    lines: int = 0
    verdicts: Counter[str] = field(default_factory=Counter)
    reasons: Counter[str] = field(default_factory=Counter)
    unreadable: int = 0
    unreadable_lines: list[int] = field(default_factory=list)  # the first MAX_UNREADABLE_LINES

    def add(self, result: Result) -> None:
        self.lines += 1
        self.verdicts[result.verdict] += 1
        self.reasons.update(set(result.reasons))

    def add_unreadable(self, number: int) -> None:
        """A line that is not a gradable object: verdict ``error``, and its number kept."""
        self.lines += 1
        self.verdicts["error"] += 1
        self.reasons["bad_input"] += 1
        self.unreadable += 1
        if len(self.unreadable_lines) < MAX_UNREADABLE_LINES:
            self.unreadable_lines.append(number)

    def unreadable_text(self) -> str | None:
        """ "3 unreadable lines: 4, 9, 12" (with "and N more" past the bound)."""
        if not self.unreadable:
            return None
        shown = ", ".join(str(n) for n in self.unreadable_lines)
        more = self.unreadable - len(self.unreadable_lines)
        word = "line" if self.unreadable == 1 else "lines"
        return f"{self.unreadable} unreadable {word}: {shown}" + (
            f" and {more:,} more" if more else ""
        )

    def _row(self, k: int) -> dict[str, Any]:
        lo, hi = wilson_interval(k, self.lines)
        rate = k / self.lines if self.lines else 0.0
        return {"count": k, "rate": rate, "ci95": [lo, hi]}

    def to_json(self) -> dict[str, Any]:
        return {
            "lines": self.lines,
            "unreadable": {"count": self.unreadable, "first_lines": self.unreadable_lines},
            "verdicts": {v: self._row(self.verdicts[v]) for v in VERDICTS},
            "reasons": {
                r: {
                    **self._row(n),
                    "family": REASON_SPECS[r].family,
                    "severity": REASON_SPECS[r].severity,
                }
                for r, n in sorted(self.reasons.items(), key=lambda x: (-x[1], x[0]))
            },
        }


class InputError(Exception):
    """A line that is not a gradable object."""


def grade_line(obj: Any, args: argparse.Namespace) -> Result:
    """Grade one decoded line; InputError when its shape or fields are wrong."""
    try:
        request = from_json(
            obj,
            source="scan",
            grammar=None if args.grammar == "auto" else args.grammar,
            thinking={"auto": None, "on": True, "off": False}[args.thinking],
        )
    except SampleError as exc:
        raise InputError(str(exc)) from None
    result = grade(request, max_chars=args.max_chars)
    if result.error is not None:
        raise InputError(result.error)
    return result


def _dumps(obj: dict[str, Any]) -> str:
    """One JSON line; readable UTF-8 unless the text holds lone surrogates (then escaped)."""
    line = json.dumps(obj, ensure_ascii=False, default=str)
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:
        line = json.dumps(obj, default=str)
    return line


def error_json(message: str) -> dict[str, Any]:
    return {"verdict": "error", "reasons": ["bad_input"], "error": message}


def _lines(
    reader: BoundedReader, progress: _Progress | None = None, line_max: int = SCAN_LINE_MAX_BYTES
) -> Iterator[tuple[int, str | None]]:
    """(line number, stripped line) for each non-blank line; the line is None when it is over
    ``line_max`` bytes (skipped without being held: ``/dev/zero`` has no newline at all, and
    used to grow one line without bound)."""
    for number, raw in read_lines(reader, line_max, _READ_SIZE):
        if progress is not None:
            progress.advance(number, reader.total)
        if raw is None:
            yield number, None
        elif line := raw.decode("utf-8", "replace").strip():
            yield number, line


class _Progress:
    """Bytes read and lines seen, drawn on stderr by rich while a scan runs.

    Only on a terminal: a scan's stdout is often piped (``--json``) and its stderr collected
    by a script, where a bar would be noise in a file. Transient: the summary replaces it.
    """

    def __init__(self, total: int | None, console_file: IO[str]) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._progress = Progress(
            TextColumn("scan"),
            BarColumn(),
            DownloadColumn(),
            TextColumn("{task.fields[lines]:,} lines"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=Console(file=console_file),
            transient=True,
            # stdout is the scan's output (``--json`` lines): never routed through the bar
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._task = self._progress.add_task("scan", total=total, lines=0)
        self._bytes = 0

    def __enter__(self) -> _Progress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def advance(self, line: int, total_bytes: int) -> None:
        self._bytes = total_bytes
        if line % PROGRESS_EVERY == 0:
            self._progress.update(self._task, completed=self._bytes, lines=line)


def _progress_for(fd: int, stderr: IO[str]) -> _Progress | None:
    """A progress display when stderr is a terminal, sized by the file when it has a size."""
    try:
        if not stderr.isatty():
            return None
    except (AttributeError, ValueError):  # a closed or fake stream
        return None
    total: int | None = None
    try:
        size = os.fstat(fd).st_size
        total = size or None
    except (OSError, AttributeError, ValueError):
        total = None
    return _Progress(total, stderr)


def run(args: argparse.Namespace) -> int:
    try:
        fd = _stdin() if args.file == "-" else open_local(args.file)
    except OSError as exc:
        why = getattr(exc, "strerror", None) or exc
        print(f"dsv4-sidecar scan: cannot read {args.file}: {why}", file=sys.stderr)
        return 2
    summary = Summary()
    worst: list[tuple[tuple[int, int, int, int], int, Result]] = []
    progress = _progress_for(fd, sys.stderr) if isinstance(fd, int) else None
    stopped: str | None = None
    reader: BoundedReader | None = None
    try:
        # One byte budget and one deadline for the whole input, not per read.
        reader = BoundedReader(fd, args.max_bytes, time.monotonic() + args.max_seconds)
        with progress if progress is not None else contextlib.nullcontext():
            _scan(reader, args, summary, worst, progress)
    except InputRejected as exc:
        stopped = f"input stopped: {args.file} {exc} (--max-bytes, --max-seconds)"
    except OSError as exc:
        print(f"dsv4-sidecar scan: read failed: {exc}", file=sys.stderr)
        return 2
    finally:
        if reader is not None:
            reader.restore()
        if args.file != "-" and isinstance(fd, int):
            os.close(fd)
    if stopped is not None:
        print(f"dsv4-sidecar scan: {stopped}; the summary covers what was read", file=sys.stderr)
    if args.summary_json:
        try:
            with open(args.summary_json, "w", encoding="utf-8") as fh:
                json.dump(summary.to_json(), fh, indent=2)
        except OSError as exc:
            print(f"dsv4-sidecar scan: cannot write summary: {exc}", file=sys.stderr)
            return 2
    if args.json:
        if not args.summary_json:
            _print_summary(summary, [], file=sys.stderr)
        return 2 if stopped else 0
    _print_summary(summary, sorted(worst, reverse=True), file=sys.stdout)
    return 2 if stopped else 0


def _stdin() -> int | IO[bytes]:
    """stdin's descriptor, or its byte stream when it has none (an in-process caller's)."""
    try:
        return sys.stdin.fileno()
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        return sys.stdin.buffer


def _scan(
    reader: BoundedReader,
    args: argparse.Namespace,
    summary: Summary,
    worst: list[tuple[tuple[int, int, int, int], int, Result]],
    progress: _Progress | None,
) -> None:
    for number, line in _lines(reader, progress):
        if line is None:
            summary.add_unreadable(number)
            if args.json:
                message = f"line {number}: over {SCAN_LINE_MAX_BYTES} bytes"
                print(json.dumps({"line": number, **error_json(message)}), flush=False)
            continue
        try:
            result = grade_line(loads_bounded(line), args)
        except (SampleError, InputError) as exc:
            message = f"line {number}: {exc}"
            summary.add_unreadable(number)
            if args.json:
                print(json.dumps({"line": number, **error_json(message)}), flush=False)
            continue
        summary.add(result)
        if args.json:
            print(_dumps({"line": number, **result.to_json()}))
        _keep_worst(worst, number, result, args.examples)


def _keep_worst(
    heap: list[tuple[tuple[int, int, int, int], int, Result]], number: int, result: Result, n: int
) -> None:
    """Keep the ``n`` worst results (bounded memory: results hold their text)."""
    if n <= 0 or result.verdict not in RANK:
        return
    hard = sum(1 for r in result.reasons if REASON_SPECS[r].severity == "hard")
    soft = sum(1 for r in result.reasons if REASON_SPECS[r].severity == "soft")
    score = (-RANK[result.verdict], hard, soft, -number)
    item = (score, number, result)
    if len(heap) < n:
        heapq.heappush(heap, item)
    elif score > heap[0][0]:
        heapq.heapreplace(heap, item)


def _print_summary(
    summary: Summary,
    worst: list[tuple[tuple[int, int, int, int], int, Result]],
    *,
    file: IO[str],
) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(file=file, highlight=False)
    n = summary.lines
    table = Table(title=f"{n} outputs graded", title_justify="left")
    columns: tuple[tuple[str, Literal["left", "right"]], ...] = (
        ("verdict", "left"),
        ("count", "right"),
        ("rate", "right"),
        ("95% CI (Wilson)", "right"),
    )
    for col, justify in columns:
        table.add_column(col, justify=justify, no_wrap=True)
    for verdict in VERDICTS:
        k = summary.verdicts[verdict]
        lo, hi = wilson_interval(k, n)
        style = "bold red" if verdict == "degenerate" and k else None
        table.add_row(verdict, str(k), _pct(k, n), f"{lo:.1%} – {hi:.1%}", style=style)
    console.print(table)
    unreadable = summary.unreadable_text()
    if unreadable:
        console.print(unreadable, markup=False, highlight=False, soft_wrap=True)
    if summary.reasons:
        reasons = Table(title="reasons (lines showing each)", title_justify="left")
        for col in ("reason", "family", "severity", "count", "rate", "95% CI (Wilson)"):
            reasons.add_column(
                col, no_wrap=True, justify="right" if col in ("count", "rate") else "left"
            )
        for code, k in sorted(summary.reasons.items(), key=lambda x: (-x[1], x[0])):
            spec = REASON_SPECS[code]
            lo, hi = wilson_interval(k, n)
            reasons.add_row(
                code, spec.family, spec.severity, str(k), _pct(k, n), f"{lo:.1%} – {hi:.1%}"
            )
        console.print(reasons)
    for _, number, result in worst:
        console.print(
            f"\n[bold]line {number}[/bold]: {result.verdict} — {', '.join(result.reasons)}"
        )
        shown = 0
        for finding in result.findings:
            if REASON_SPECS[finding.reason].severity == "info" or shown >= 4:
                continue
            shown += 1
            console.print(_snippet(result, finding))


def _pct(k: int, n: int) -> str:
    return f"{k / n:.1%}" if n else "–"


_VISIBLE = {"\n": "⏎", "\t": "⇥", "\r": "␍"}


def _visible(text: str) -> str:
    """Control characters as escapes, so a sample cannot drive the terminal."""
    out = []
    for ch in text:
        code = ord(ch)
        if ch in _VISIBLE:
            out.append(_VISIBLE[ch])
        elif code < 0x20 or 0x7F <= code <= 0x9F:
            out.append(f"\\x{code:02x}")
        elif 0xD800 <= code <= 0xDFFF:  # a lone surrogate cannot be written to a terminal
            out.append(f"\\u{code:04x}")
        else:
            out.append(ch)
    return "".join(out)


def _snippet(result: Result, finding: Finding, context: int = 60) -> Text:
    """The text around a finding, with every finding's span in it highlighted."""
    from rich.text import Text

    text = result.text
    start = max(0, finding.start - context)
    end = min(len(text), max(finding.end, finding.start) + context)
    if finding.end - finding.start > 4 * context:  # a long span: show its two ends
        end = finding.start + 2 * context
    marks = [
        (max(f.start, start), min(f.end, end))
        for f in result.findings
        if f.end >= start and f.start <= end and REASON_SPECS[f.reason].severity != "info"
    ]
    line = Text(f"  [{finding.reason} @{finding.start} {finding.channel}] ", style="dim")
    if start > 0:
        line.append("…", style="dim")
    pos = start
    for a, b in sorted(marks):
        if a > pos:
            line.append(_visible(text[pos:a]))
        if b > max(a, pos):
            line.append(_visible(text[max(a, pos) : b]), style="bold white on red")
        elif a == b and a >= pos:
            line.append("▮", style="bold red")
        pos = max(pos, b)
    if end > pos:
        line.append(_visible(text[pos:end]))
    if end < len(text):
        line.append("…", style="dim")
    if finding.detail:
        line.append(f"  ({finding.detail})", style="dim")
    return line
