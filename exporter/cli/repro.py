"""`dsv4-sidecar repro`: graded tool-calling load against an OpenAI-compatible endpoint, per
concurrency level, optionally A/B between two endpoints at the same load.

Examples:
  dsv4-sidecar repro http://127.0.0.1:30000 --concurrency 1,8,16,32,64 --requests 200
  dsv4-sidecar repro --ab fp8=http://sglang-a:30000 bf16=http://sglang-b:30000 --requests 600
  dsv4-sidecar repro --ab fp8 bf16 --arms-file arms.yaml --duration 60 --out runs/ab1 --json

Ctrl-C stops gracefully (requests in flight finish, at most --grace seconds), prints the
partial report and exits with status 130. Only the URLs given are contacted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from exporter.oncall.repro_report import (
    DEFAULT_ALPHA,
    DEFAULT_LEVELS,
    Arm,
    LevelResult,
    is_finite_positive,
)

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import TaskID


class UsageError(Exception):
    """A bad flag: one line on stderr, exit status 2."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "repro",
        help="graded tool-calling load per concurrency level; --ab compares two endpoints",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("url", nargs="?", help="endpoint base URL (http://host:port), one arm")
    p.add_argument(
        "--ab",
        nargs=2,
        metavar=("A", "B"),
        help="two arms run at the same time: LABEL=URL, a URL, or a label from --arms-file",
    )
    p.add_argument(
        "--arms-file",
        type=Path,
        help="YAML/JSON mapping label -> URL or {url, model}, for --ab LABEL LABEL",
    )
    p.add_argument(
        "--concurrency",
        default=",".join(str(c) for c in DEFAULT_LEVELS),
        help="concurrency levels (sessions per arm), comma separated",
    )
    p.add_argument("--requests", type=int, help="requests per arm and level (default 100)")
    p.add_argument("--duration", type=float, help="seconds per level (with or instead of N)")
    p.add_argument("--timeout", type=float, default=120.0, help="timeout of one request (s)")
    p.add_argument("--model", help="model name to send (default: first of /v1/models)")
    p.add_argument("--stream", action="store_true", help="use streaming (SSE) requests")
    p.add_argument("--max-tokens", type=int, default=1024, help="max_tokens of each request")
    p.add_argument("--prompts", type=Path, help="JSON list / JSON Lines of {messages, tools}")
    p.add_argument(
        "--long",
        action="store_true",
        help="prompts that ask for a long answer then a tool call (the long-generation canary's);"
        " with --max-tokens this holds generation length fixed across concurrency levels",
    )
    p.add_argument("--grammar", choices=("v4", "v4.1", "v3.2"), default="v4", help="DSML grammar")
    p.add_argument(
        "--alpha",
        type=float,
        default=DEFAULT_ALPHA,
        help="significance level of the trend and A/B tests (default %(default)s: the one rule "
        "repro and triage share, exporter/stats.py); recorded in the report, which triage "
        "then reads at the same level",
    )
    p.add_argument(
        "--out", type=Path, help="keep every graded sample (redacted) in DIR/samples.jsonl"
    )
    p.add_argument(
        "--grace",
        type=float,
        default=10.0,
        help="after Ctrl-C, seconds to let requests in flight finish before abandoning them",
    )
    p.add_argument("--json", action="store_true", help="print exactly one JSON object")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(run=run)


def _check_url(url: str, what: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise UsageError(f"{what} must be an http:// or https:// URL, got {url!r}")
    return url.rstrip("/")


def _load_arms_file(path: Path) -> dict[str, Any]:
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot read --arms-file {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise UsageError(f"--arms-file {path} is not valid YAML/JSON: {exc}") from None
    if isinstance(data, dict) and isinstance(data.get("arms"), dict):
        data = data["arms"]
    if not isinstance(data, dict):
        raise UsageError(f"--arms-file {path}: expected a mapping of label -> URL")
    return data


def _arm(spec: str, table: dict[str, Any] | None, model: str | None) -> Arm:
    label, sep, url = spec.partition("=")
    if sep and "://" not in label:
        if not label.strip():
            raise UsageError(f"empty label in {spec!r}")
        return Arm(label.strip(), _check_url(url, f"URL of arm {label!r}"), model)
    if "://" in spec:
        url = _check_url(spec, "the endpoint")
        return Arm(urlsplit(url).netloc, url, model)
    if table is None:
        raise UsageError(f"arm {spec!r} is neither LABEL=URL nor a URL (or give --arms-file)")
    entry = table.get(spec)
    if isinstance(entry, str):
        return Arm(spec, _check_url(entry, f"URL of arm {spec!r}"), model)
    if isinstance(entry, dict) and isinstance(entry.get("url"), str):
        return Arm(
            spec, _check_url(entry["url"], f"URL of arm {spec!r}"), model or entry.get("model")
        )
    raise UsageError(f"arm {spec!r} is not defined in --arms-file (labels: {sorted(table)})")


def parse_arms(args: argparse.Namespace) -> list[Arm]:
    if (args.url is None) == (args.ab is None):
        raise UsageError("give one endpoint URL, or --ab A B")
    table = _load_arms_file(args.arms_file) if args.arms_file else None
    if args.url is not None:
        return [_arm(args.url, table, args.model)]
    arms = [_arm(s, table, args.model) for s in args.ab]
    if arms[0].label == arms[1].label:
        raise UsageError(f"both arms are labelled {arms[0].label!r}: name them LABEL=URL")
    return arms


def _validate(args: argparse.Namespace) -> tuple[list[Arm], tuple[int, ...]]:
    from exporter.oncall.repro_report import parse_levels

    arms = parse_arms(args)
    try:
        levels = parse_levels(args.concurrency)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.requests is not None and not 1 <= args.requests <= 1_000_000:
        raise UsageError("--requests must be between 1 and 1000000")
    if args.duration is not None and not (
        is_finite_positive(args.duration) and args.duration <= 86400
    ):
        raise UsageError("--duration must be positive seconds, at most 86400")
    if not is_finite_positive(args.timeout):
        raise UsageError("--timeout must be positive seconds")
    if not 0 < args.alpha < 1:
        raise UsageError("--alpha must be between 0 and 1")
    if args.max_tokens < 1:
        raise UsageError("--max-tokens must be positive")
    if args.long and args.prompts:
        raise UsageError("--long and --prompts are exclusive (--long is a built-in prompt set)")
    if not (args.grace >= 0):
        raise UsageError("--grace must be >= 0")
    return arms, levels


class _Progress:
    """A rich progress bar per arm and level, on stderr (stdout stays clean for --json)."""

    def __init__(
        self, console: Console, arms: list[Arm], requests: int | None, duration: float | None
    ) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        self.arms, self.requests, self.duration = arms, requests, duration
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn() if requests is not None else TextColumn(""),
            TextColumn("{task.fields[bad]}"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
            disable=not console.is_terminal,
        )
        self.tasks: list[TaskID] = []
        self.level_started = time.monotonic()

    def level_start(self, _li: int, concurrency: int) -> None:
        self.level_started = time.monotonic()
        self.tasks = [
            self.progress.add_task(
                f"{arm.label} · c={concurrency}",
                total=self.requests if self.requests is not None else self.duration,
                bad="",
            )
            for arm in self.arms
        ]

    def exchange(self, index: int, level: LevelResult) -> None:
        done = level.requests + level.errors
        completed = (
            done
            if self.requests is not None
            else min(time.monotonic() - self.level_started, self.duration or 0)
        )
        self.progress.update(
            self.tasks[index],
            completed=completed,
            bad=f"degenerate {level.degenerate}/{level.requests}"
            + (f" errors {level.errors}" if level.errors else ""),
        )


async def _main(args: argparse.Namespace, arms: list[Arm], levels: tuple[int, ...]) -> int:
    from rich.console import Console

    from exporter.oncall.repro import ReproRunner
    from exporter.oncall.repro_render import print_report
    from exporter.oncall.samples import SampleWriter
    from exporter.samplers.prompts import PromptsError, load_prompts

    err = Console(stderr=True)
    try:
        prompts: list[dict[str, Any]] | None = None
        if args.long:
            prompts = load_prompts(None, "canary_long_prompts.json")
        elif args.prompts:
            prompts = load_prompts(args.prompts)
    except PromptsError as exc:
        print(f"dsv4-sidecar repro: error: {exc}", file=sys.stderr)
        return 2
    writer = None
    if args.out is not None:
        try:
            writer = SampleWriter(args.out)
        except OSError as exc:
            print(f"dsv4-sidecar repro: error: cannot write {args.out}: {exc}", file=sys.stderr)
            return 2
    bar = None if args.quiet else _Progress(err, arms, args.requests, args.duration)
    runner = ReproRunner(
        arms,
        levels,
        requests=args.requests,
        duration=args.duration,
        timeout=args.timeout,
        stream=args.stream,
        grammar=args.grammar,
        max_tokens=args.max_tokens,
        prompts=prompts,
        writer=writer,
        alpha=args.alpha,
        on_exchange=bar.exchange if bar else None,
        on_level_start=bar.level_start if bar else None,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_sigint() -> None:
        if stop.is_set():
            runner.abort()
            return
        stop.set()
        err.print(
            f"stopping: letting requests in flight finish (at most {args.grace:g} s; "
            "Ctrl-C again to abandon them)",
            style="yellow",
        )
        loop.call_later(args.grace, runner.abort)

    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGINT, on_sigint)
    try:
        if bar is not None:
            with bar.progress:
                report = await runner.run(stop)
        else:
            report = await runner.run(stop)
    finally:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.remove_signal_handler(signal.SIGINT)
    doc = report.to_json()
    if args.out is not None:
        (args.out / "report.json").write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    if args.json:
        print(json.dumps(doc, sort_keys=True), flush=True)
    else:
        # Piped into a file or a ticket: wide enough for the reasons column.
        out = Console() if sys.stdout.isatty() else Console(width=132)
        print_report(report, out)
        if args.out is not None:
            out.print(
                f"samples: {args.out / 'samples.jsonl'} ({writer.lines if writer else 0} lines); "
                f"report: {args.out / 'report.json'}",
                markup=False,
                highlight=False,
            )
    if report.interrupted:
        return 130
    if report.graded == 0:
        print(
            "dsv4-sidecar repro: no answer could be graded (see errors per level)", file=sys.stderr
        )
        return 1
    return 0


def run(args: argparse.Namespace) -> int:
    try:
        arms, levels = _validate(args)
    except UsageError as exc:
        print(f"dsv4-sidecar repro: error: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(_main(args, arms, levels))
