"""`dsv4-sidecar plan`: how much memory will this deployment really take per rank, and how much
did SGLang plan? A capacity-planning and triage command over the footprint model."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from exporter.footprint import (
    CONFIGURATORS,
    INDEX_K_DTYPES,
    NOT_MODELLED_SWITCHES,
    BudgetError,
    Footprint,
    GeometryError,
    ModelGeometry,
    SettingsError,
    available_bytes_from_gpu,
    not_modelled,
    plan_for_budget,
    preset_for_served_name,
    resolve_model,
    stage_slice,
)
from exporter.footprint.launch import (
    LAUNCH_FIELDS,
    Launch,
    LaunchError,
    Resolved,
    add_launch_arguments,
    parse_env,
    parse_launch,
    resolve,
)
from exporter.footprint.refusals import Refused
from exporter.footprint.releases import (
    NEWEST_RELEASE,
    RULES,
    RuleChoice,
    VersionError,
    rules_for_version,
)
from exporter.units import GIB


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plan",
        help="predict KV-pool footprint per rank: planned vs allocated, over-commit",
        description=__doc__,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--model",
        default=None,
        help="preset (deepseek-v4-flash, deepseek-v4-pro) or path to config.json / model dir "
        "(default: the launch's --model-path when it names a preset or a local model dir, "
        "else deepseek-v4-flash)",
    )
    p.add_argument(
        "--index-k-dtype",
        choices=INDEX_K_DTYPES,
        default=None,
        help="what the device pool stores for the c4 index-K cache (default: fp4 with "
        "--enable-deepseek-v4-fp4-indexer, bf16 with SGLANG_DSV4_BF16_INDEX_K, else bf16, "
        "the production forks' dtype)",
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
    sglang = p.add_argument_group(
        "SGLang's launch flags (its names; also accepted as a whole launch command after --)"
    )
    add_launch_arguments(sglang, model_alias=False)
    p.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an SGLANG_* switch of the deployment (repeatable), e.g. "
        "SGLANG_OPT_USE_ONLINE_COMPRESS=1, SGLANG_DSV4_COMPRESS_STATE_DTYPE=bfloat16",
    )
    p.add_argument(
        "--speculative",
        action="store_true",
        help="shorthand for --speculative-algorithm EAGLE (SGLang's default draft count)",
    )
    p.add_argument("--hisparse-ratio", type=float, default=None, help="HiSparse host/device ratio")
    p.add_argument("--pp-rank", type=int, default=0)
    p.add_argument(
        "--layer-range", metavar="START:END", help="explicit layer slice instead of PP split"
    )
    p.add_argument(
        "launch",
        nargs=argparse.REMAINDER,
        help="after --: the launch command as run (python -m sglang.launch_server ...), "
        "VAR=value prefixes taken as its environment",
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


def _geometry(model: str | None, model_path: str | None) -> ModelGeometry:
    """--model, else the launch's --model-path (a local model dir, or a published name that
    matches a preset), else V4-Flash."""
    if model is not None:
        return resolve_model(model)
    if model_path is not None:
        if Path(model_path, "config.json").is_file():
            return resolve_model(model_path)
        preset = preset_for_served_name(model_path)
        if preset is None:
            raise UsageError(
                f"--model-path {model_path!r} is neither a local model dir nor a DeepSeek-V4 "
                "preset name: give --model"
            )
        return preset
    return resolve_model("deepseek-v4-flash")


def launch_of(args: argparse.Namespace) -> Launch:
    """The deployment as SGLang would be launched: plan's SGLang flags, --env, --speculative,
    then the launch command after ``--`` (its flags and VAR=value prefixes win)."""
    env = parse_env(args.env)
    base = Launch(
        **{
            name: getattr(args, name)
            for name in LAUNCH_FIELDS
            if getattr(args, name, None) is not None
        },
        env=env,
    )
    if args.speculative and base.speculative_algorithm is None:
        base = replace(base, speculative_algorithm="EAGLE")
    tail = [t for t in (args.launch or []) if t != "--"]
    return parse_launch(tail, base=base) if tail else base


def compute(args: argparse.Namespace) -> tuple[Footprint, int | None, Resolved]:
    if args.layer_range and (args.pp_size not in (None, 1) or args.pp_rank != 0):
        raise UsageError("--layer-range replaces --pp-size/--pp-rank; give one or the other")
    release = rules_for_version(args.sglang_version)
    launch = launch_of(args)
    geom = _geometry(args.model, launch.model_path)
    index_k = args.index_k_dtype
    if (
        index_k is None
        and not launch.enable_deepseek_v4_fp4_indexer
        and "SGLANG_DSV4_BF16_INDEX_K" not in launch.env
    ):
        index_k = "bf16"
    resolved = resolve(launch, geom, release, index_k)
    settings = resolved.settings
    if args.hisparse_ratio is not None:
        settings = replace(settings, hisparse_ratio=args.hisparse_ratio)
    switches = [
        *args.not_modelled,
        *resolved.not_modelled,
        *not_modelled(geom, settings, release),
    ]
    if switches:
        raise NotModelled(list(dict.fromkeys(switches)), release)
    stage = stage_slice(
        geom,
        resolved.pp_size,
        args.pp_rank,
        _layer_range(args.layer_range),
        partition=resolved.partition,
    )
    # --mem-fraction-static is SGLang's flag: from plan's flags or the launch command.
    args.mem_fraction_static = launch.mem_fraction_static
    available, reserve = _budget(args)
    fp = plan_for_budget(geom, settings, args.configurator, available, stage, release)
    return fp, reserve, resolved


def run(args: argparse.Namespace) -> int:
    try:
        fp, reserve, resolved = compute(args)
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
    except Refused as exc:
        if args.json:
            r = exc.refusal
            print(
                json.dumps({"refused": {"check": r.check, "since": r.since, "message": r.message}})
            )
        print(f"dsv4-sidecar plan: {exc}", file=sys.stderr)
        return 2
    except (
        UsageError,
        GeometryError,
        SettingsError,
        BudgetError,
        VersionError,
        LaunchError,
    ) as exc:
        print(f"dsv4-sidecar plan: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        out = fp.to_json()
        out["reserve_bytes"] = reserve
        out["resolved"] = {
            "attn_dp_size": resolved.attn_dp_size,
            "pp_size": resolved.pp_size,
            "max_running_requests_per_worker": fp.settings.max_running_requests,
            "num_draft_tokens": fp.settings.num_draft_tokens,
            "notes": list(resolved.notes),
        }
        print(json.dumps(out, sort_keys=True))
        return 0
    _print_human(fp, reserve)
    for note in resolved.notes:
        print(f"resolved: {note}")
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
