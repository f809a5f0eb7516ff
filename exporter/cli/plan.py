"""`dsv4-sidecar plan`: how much memory will this deployment really take per rank, and how much
did SGLang plan? A capacity-planning and triage command over the footprint model."""

from __future__ import annotations

import argparse
import json
import sys

from exporter.footprint import (
    CONFIGURATORS,
    INDEX_K_DTYPES,
    NOT_MODELLED_SWITCHES,
    BudgetError,
    DeploymentSettings,
    Footprint,
    GeometryError,
    SettingsError,
    available_bytes_from_gpu,
    not_modelled,
    plan_for_budget,
    resolve_model,
    stage_slice,
)
from exporter.footprint.releases import (
    NEWEST_RELEASE,
    RULES,
    RuleChoice,
    VersionError,
    rules_for_version,
)

GIB = 1024**3


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plan",
        help="predict KV-pool footprint per rank: planned vs allocated, over-commit",
        description=__doc__,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--model",
        default="deepseek-v4-flash",
        help="preset (deepseek-v4-flash, deepseek-v4-pro) or path to config.json / model dir",
    )
    p.add_argument(
        "--index-k-dtype",
        choices=INDEX_K_DTYPES,
        default="bf16",
        help="what the device pool stores for the c4 index-K cache",
    )
    p.add_argument(
        "--configurator",
        choices=CONFIGURATORS,
        default="legacy",
        help="legacy prices index-K as fp8 always (every upstream release on NVIDIA, and the "
        "bf16 forks' bug); fixed prices it by dtype (the forks' fix)",
    )
    p.add_argument(
        "--sglang-version",
        default=None,
        help=f"SGLang release whose configurator and pool rules to use (default: the newest "
        f"supported, {NEWEST_RELEASE}; rule sets: {', '.join(r.name for r in RULES)}). Newer "
        "releases are computed with the newest rules and reported as unverified",
    )
    p.add_argument(
        "--not-modelled",
        action="append",
        default=[],
        choices=NOT_MODELLED_SWITCHES,
        help="a deployment switch in use whose footprint is not modelled: plan then says so "
        "and prints no number (repeatable)",
    )
    budget = p.add_argument_group("budget (one of)")
    budget.add_argument("--available-bytes", type=int, help="bytes handed to the configurator")
    budget.add_argument("--available-gib", type=float, help="same, in GiB (default 50)")
    budget.add_argument(
        "--gpu-memory-gib", type=float, help="GPU memory; derive the budget as SGLang does"
    )
    budget.add_argument(
        "--weights-gib", type=float, help="weights per rank (with --gpu-memory-gib)"
    )
    budget.add_argument("--mem-fraction-static", type=float, help="with --gpu-memory-gib")
    p.add_argument("--max-running-requests", type=int, default=256)
    p.add_argument(
        "--swa-full-tokens-ratio",
        type=float,
        default=None,
        help="SGLang's --swa-full-tokens-ratio (default 0.1, what SGLang sets for V4; left "
        "unset, a V4.1 deployment on 0.5.21+ runs SWA cap mode: the SWA pool is sized from "
        "max-running-requests, --chunked-prefill-size and --swa-prefix-tails)",
    )
    p.add_argument("--chunked-prefill-size", type=int, default=8192, help="SGLang's (SWA cap mode)")
    p.add_argument(
        "--swa-prefix-tails",
        type=int,
        default=None,
        help="SGLang's (SWA cap mode; default 4 x max-running-requests)",
    )
    p.add_argument(
        "--disable-radix-cache", action="store_true", help="SGLang's (SWA cap mode: no tails)"
    )
    p.add_argument(
        "--disable-overlap-schedule",
        action="store_true",
        help="SGLang's (SWA cap mode: one prefill chunk in flight, not two)",
    )
    p.add_argument(
        "--swa-eviction-interval",
        type=int,
        default=128,
        help="SGLANG_SWA_EVICTION_INTERVAL (SWA cap mode)",
    )
    p.add_argument("--page-size", type=int, default=256)
    p.add_argument("--compress-state-dtype", choices=("float32", "bfloat16"), default="float32")
    p.add_argument("--speculative", action="store_true", help="MTP speculative decoding on")
    p.add_argument(
        "--online-compress", action="store_true", help="SGLANG_OPT_USE_ONLINE_COMPRESS=1"
    )
    p.add_argument("--hisparse-ratio", type=float, default=None, help="HiSparse host/device ratio")
    p.add_argument("--pp-size", type=int, default=1)
    p.add_argument("--pp-rank", type=int, default=0)
    p.add_argument(
        "--layer-range", metavar="START:END", help="explicit layer slice instead of PP split"
    )
    p.add_argument("--json", action="store_true", help="print exactly one JSON object")
    p.set_defaults(run=run)


class UsageError(Exception):
    """An invalid flag combination: reported as one line, exit status 2."""


def _budget(args: argparse.Namespace) -> tuple[int, int | None]:
    """(available_bytes, reserve_bytes or None) from whichever budget flags were given."""
    gpu_flags = [args.gpu_memory_gib, args.weights_gib, args.mem_fraction_static]
    direct = [x for x in (args.available_bytes, args.available_gib) if x is not None]
    if any(v is not None for v in gpu_flags):
        if direct:
            raise UsageError(
                "give either --available-bytes/--available-gib or --gpu-memory-gib, not both"
            )
        if any(v is None for v in gpu_flags):
            raise UsageError(
                "--gpu-memory-gib needs --weights-gib and --mem-fraction-static as well"
            )
        gpu = int(args.gpu_memory_gib * GIB)
        avail = available_bytes_from_gpu(gpu, int(args.weights_gib * GIB), args.mem_fraction_static)
        return avail, int(gpu * (1 - args.mem_fraction_static))
    if len(direct) > 1:
        raise UsageError("give only one of --available-bytes and --available-gib")
    if args.available_bytes is not None:
        if args.available_bytes <= 0:
            raise UsageError("--available-bytes must be positive")
        return args.available_bytes, None
    gib = 50.0 if args.available_gib is None else args.available_gib
    if gib <= 0:
        raise UsageError("--available-gib must be positive")
    return int(gib * GIB), None


def _layer_range(spec: str | None) -> tuple[int, int] | None:
    if spec is None:
        return None
    try:
        a, b = spec.split(":")
        return int(a), int(b)
    except ValueError:
        raise UsageError(f"--layer-range must look like START:END, got {spec!r}") from None


class NotModelled(Exception):
    """The deployment uses a switch whose footprint the model does not reproduce."""

    def __init__(self, switches: list[str], release: RuleChoice) -> None:
        super().__init__(", ".join(switches))
        self.switches = switches
        self.release = release


def compute(args: argparse.Namespace) -> tuple[Footprint, int | None]:
    if args.layer_range and (args.pp_size != 1 or args.pp_rank != 0):
        raise UsageError("--layer-range replaces --pp-size/--pp-rank; give one or the other")
    geom = resolve_model(args.model)
    settings = DeploymentSettings(
        index_k_dtype=args.index_k_dtype,
        swa_full_tokens_ratio=(
            0.1 if args.swa_full_tokens_ratio is None else args.swa_full_tokens_ratio
        ),
        swa_ratio_explicit=args.swa_full_tokens_ratio is not None or not geom.is_v41,
        page_size=args.page_size,
        max_running_requests=args.max_running_requests,
        compress_state_dtype=args.compress_state_dtype,
        speculative=args.speculative,
        online_compress=args.online_compress,
        hisparse_ratio=args.hisparse_ratio,
        chunked_prefill_size=args.chunked_prefill_size,
        swa_prefix_tails=args.swa_prefix_tails,
        disable_radix_cache=args.disable_radix_cache,
        disable_overlap_schedule=args.disable_overlap_schedule,
        swa_eviction_interval=args.swa_eviction_interval,
    )
    release = rules_for_version(args.sglang_version)
    switches = [*args.not_modelled, *not_modelled(geom, settings, release)]
    if switches:
        raise NotModelled(switches, release)
    stage = stage_slice(geom, args.pp_size, args.pp_rank, _layer_range(args.layer_range))
    available, reserve = _budget(args)
    fp = plan_for_budget(geom, settings, args.configurator, available, stage, release)
    return fp, reserve


def run(args: argparse.Namespace) -> int:
    try:
        fp, reserve = compute(args)
    except NotModelled as exc:
        if args.json:
            out = {
                "sglang_version": exc.release.version,
                "rules": exc.release.rules.name,
                "rules_verified": exc.release.verified,
                "not_modelled": exc.switches,
            }
            print(json.dumps(out, sort_keys=True))
        else:
            for switch in exc.switches:
                print(f"not modelled: {switch}")
            print("no footprint computed: a number would be wrong for this deployment")
        return 3
    except (UsageError, GeometryError, SettingsError, BudgetError, VersionError) as exc:
        print(f"dsv4-sidecar plan: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        out = fp.to_json()
        out["reserve_bytes"] = reserve
        print(json.dumps(out, sort_keys=True))
        return 0
    _print_human(fp, reserve)
    return 0


def _gib(n: float) -> str:
    return f"{n / GIB:,.3f}"


def verdict(fp: Footprint, reserve: int | None) -> str:
    """One line an operator can paste into a ticket."""
    over = fp.overcommit_bytes
    ik = fp.pools["c4_index_k"].overcommit_bytes
    tokens = ""
    if fp.correct_full_tokens is not None and fp.correct_full_tokens != fp.full_tokens:
        delta = fp.correct_full_tokens - fp.full_tokens
        tokens = (
            f"; priced correctly the same budget holds {fp.correct_full_tokens:,} tokens "
            f"({delta / fp.full_tokens:+.1%})"
        )
    of_reserve = f" = {over / reserve:.0%} of the {_gib(reserve)} GiB reserve" if reserve else ""
    if fp.reclaimable_bytes > 0.25 * GIB:
        return (
            f"UNDER-COMMIT: the {fp.configurator} configurator planned "
            f"{_gib(fp.reclaimable_bytes)} GiB per rank that the device pool never allocates "
            f"(index-K stored as "
            f"{fp.settings.index_k_dtype}, priced as fp8){tokens}: reclaimable KV capacity."
        )
    if over > 0.25 * GIB and ik > 0.5 * over:
        return (
            f"OVER-COMMIT: the device pool allocates {_gib(over)} GiB per rank more than "
            f"the {fp.configurator} configurator planned{of_reserve}, {_gib(ik)} GiB of it "
            f"unpriced {fp.settings.index_k_dtype} index-K{tokens}. Deploy the fixed configurator "
            "or use fp8 index-K."
        )
    if over > 0:
        return (
            f"OK: only the page-padding remainder is unplanned ({_gib(over)} GiB per rank"
            f"{of_reserve}){tokens}."
        )
    return (
        f"OK (conservative): the plan exceeds the allocation by {_gib(-over)} GiB per rank{tokens}."
    )


def _print_human(fp: Footprint, reserve: int | None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    s = fp.stage
    title = (
        f"{fp.model} · index-K {fp.settings.index_k_dtype} · {fp.configurator} configurator · "
        f"PP {s.pp_rank}/{s.pp_size} layers [{s.start},{s.end}) "
        f"(SWA-only {s.main.swa_only}, c4 {s.main.c4}, c128 {s.main.c128})"
    )
    t = Table(title=title, title_justify="left")
    t.add_column("pool (GiB)", no_wrap=True, min_width=14)
    for col in ("tokens", "planned", "allocated", "over-commit"):
        t.add_column(col, justify="right", no_wrap=True)
    for p in fp.pools.values():
        style = "bold red" if p.overcommit_bytes > 0.25 * GIB else None
        t.add_row(
            p.name,
            f"{p.tokens:,}",
            _gib(p.planned_bytes),
            _gib(p.allocated_bytes),
            _gib(p.overcommit_bytes),
            style=style,
        )
    t.add_section()
    t.add_row(
        "total",
        f"{fp.full_tokens:,} full",
        _gib(fp.planned_bytes),
        _gib(fp.allocated_bytes),
        _gib(fp.overcommit_bytes),
        style="bold",
    )
    console.print(t)
    bpt = fp.bytes_per_full_token
    console.print(
        f"bytes per full token: legacy {bpt['legacy']:.2f}, fixed {bpt['fixed']:.2f}; "
        f"c128 state fixed {_gib(fp.c128_state_fixed_bytes)} GiB; "
        f"budget {_gib(fp.available_bytes or 0)} GiB"
    )
    if fp.release is not None:
        style = None if fp.release.verified else "bold yellow"
        console.print(fp.release.note, style=style)
    console.print(verdict(fp, reserve), style="bold")
