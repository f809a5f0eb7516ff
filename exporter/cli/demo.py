"""`dsv4-sidecar demo`: the same as `make demo`."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "demo",
        help="run the whole stack on 127.0.0.1: simulated SGLang, sidecar, tap, Prometheus, load",
        description="Run the simulated SGLang, the sidecar (fake GPUs, tap, probe files), a real "
        "Prometheus with the alert rules (when installed) and a load generator ramping "
        "concurrency, with a live summary. Ctrl-C stops everything and cleans up.",
    )
    p.add_argument("--index-k-dtype", choices=("fp8", "bf16", "fp4"), default="bf16")
    p.add_argument("--hicache", choices=("on", "off"), default="on")
    p.add_argument("--configurator", choices=("legacy", "fixed"), default="legacy")
    p.add_argument(
        "--levels",
        default="1,4,8,16,32,64,96",
        help="concurrency levels the load ramps through, comma separated",
    )
    p.add_argument("--level-seconds", type=float, default=10.0, help="seconds per level")
    p.add_argument(
        "--duration",
        type=float,
        default=None,
        help="stop after this many seconds (default: run until Ctrl-C)",
    )
    p.add_argument("--no-prometheus", action="store_true", help="do not start Prometheus")
    p.add_argument("--tp-size", type=int, default=8, help="simulated GPUs (ranks)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    import asyncio

    from rich.console import Console

    from exporter.cli._common import fail
    from exporter.demo import DemoOptions, StackError, run_demo

    try:
        levels = tuple(int(x) for x in args.levels.split(",") if x.strip())
        if not levels or min(levels) < 1 or max(levels) > 512:
            raise ValueError
    except ValueError:
        return fail("demo", f"--levels must be positive integers up to 512, got {args.levels!r}")
    if args.level_seconds <= 0 or (args.duration is not None and args.duration <= 0):
        return fail("demo", "--level-seconds and --duration must be positive")
    opts = DemoOptions(
        index_k_dtype=args.index_k_dtype,
        hicache=args.hicache,
        configurator=args.configurator,
        levels=levels,
        level_seconds=args.level_seconds,
        duration=args.duration,
        prometheus=not args.no_prometheus,
        tp_size=args.tp_size,
    )
    try:
        return asyncio.run(run_demo(opts, Console()))
    except StackError as exc:  # e.g. the simulator refusing --tp-size 0: its own message
        return fail("demo", str(exc).strip())
