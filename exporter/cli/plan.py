"""`dsv4-sidecar plan`: how much memory will this deployment really take per rank, and how much
did SGLang plan? A capacity-planning and triage command over the footprint model.

Every PP stage is sized as SGLang sizes it (each stage's own capacity, --max-total-tokens,
the MIN across stages, each stage re-sized to it) and printed. Exit status: 0 a footprint;
2 bad arguments (plan's own flags, or a launch it cannot read); 3 a switch whose footprint is
not modelled (no number); 4 SGLang refuses this deployment (a check of the release named, or
a budget that leaves no page of tokens)."""

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
    PipelinePlan,
    SettingsError,
    available_bytes_from_gpu,
    footprint_for_tokens,
    not_modelled,
    plan_for_budget,
    plan_pipeline,
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
from exporter.footprint.refusals import Refused, config_refusals
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
        help="what the device pool stores for the c4 index-K cache (default: as upstream "
        "SGLang, fp8, fp4 with --enable-deepseek-v4-fp4-indexer; bf16 only for a production "
        "fork: say so with bf16 here or SGLANG_DSV4_BF16_INDEX_K=1)",
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
    budget = p.add_argument_group(
        "budget: an explicit one (--available-*), or derived from --gpu-memory-gib, "
        "--weights-gib and --mem-fraction-static (the launch's own); with an explicit budget, "
        "--gpu-memory-gib and --mem-fraction-static give the reserve only"
    )
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
    p.add_argument(
        "--pp-rank",
        type=int,
        default=0,
        help="the stage --json puts at the top level (every stage is sized and listed)",
    )
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
    p.epilog = (
        "exit status: 0 a footprint; 2 bad arguments; 3 not modelled (no number); "
        "4 SGLang refuses the deployment (its check named)"
    )
    p.set_defaults(run=run)


# Exit statuses (docs/footprint.md, "plan's exit status"): argparse's own 2 is "bad arguments".
EXIT_BAD_ARGUMENTS = 2
EXIT_NOT_MODELLED = 3
EXIT_REFUSED = 4


class UsageError(Exception):
    """An invalid flag combination: reported as one line, exit status 2."""


def _budget(args: argparse.Namespace, mfs: float | None) -> tuple[int, int | None]:
    """(available_bytes, reserve_bytes or None). An explicit budget wins; --mem-fraction-static
    (plan's flag or the pasted launch's) then only sizes the reserve, with --gpu-memory-gib.
    Without one, the budget is derived as SGLang does from the GPU's size, the weights and
    --mem-fraction-static, and refused when one of them is missing: SGLang profiles the free
    memory at start-up, which plan cannot see."""
    direct = [x for x in (args.available_bytes, args.available_gib) if x is not None]
    if len(direct) > 1:
        raise UsageError("give only one of --available-bytes and --available-gib")
    gpu = None if args.gpu_memory_gib is None else int(args.gpu_memory_gib * GIB)
    if direct:
        if args.weights_gib is not None:
            raise UsageError(
                "--weights-gib derives a budget, and one was given (--available-*): drop one"
            )
        if gpu is not None and mfs is None:
            raise UsageError(
                "with an explicit budget, --gpu-memory-gib sizes the reserve and needs "
                "--mem-fraction-static"
            )
        avail = (
            args.available_bytes
            if args.available_bytes is not None
            else int(args.available_gib * GIB)
        )
        if avail <= 0:
            raise UsageError("--available-bytes / --available-gib must be positive")
        reserve = None if gpu is None or mfs is None else int(gpu * (1 - mfs))
        return avail, reserve
    if gpu is not None or args.weights_gib is not None or mfs is not None:
        missing = [
            name
            for name, v in (
                ("--gpu-memory-gib", gpu),
                ("--weights-gib", args.weights_gib),
                ("--mem-fraction-static", mfs),
            )
            if v is None
        ]
        if missing:
            raise UsageError(
                "the budget cannot be derived without " + ", ".join(missing) + " (SGLang's "
                "budget is GPU memory x --mem-fraction-static minus the weights); or give it "
                "with --available-gib"
            )
        assert gpu is not None and mfs is not None and args.weights_gib is not None
        try:
            avail = available_bytes_from_gpu(gpu, int(args.weights_gib * GIB), mfs)
        except BudgetError as exc:
            raise UsageError(str(exc)) from None
        return avail, int(gpu * (1 - mfs))
    return int(50.0 * GIB), None


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


def compute(args: argparse.Namespace) -> tuple[PipelinePlan, int, int | None, Resolved]:
    """Every stage of the deployment, the stage --json puts first, the reserve, the resolution."""
    if args.layer_range and (args.pp_size not in (None, 1) or args.pp_rank != 0):
        raise UsageError("--layer-range replaces --pp-size/--pp-rank; give one or the other")
    release = rules_for_version(args.sglang_version)
    launch = launch_of(args)
    geom = _geometry(args.model, launch.model_path)
    resolved = resolve(launch, geom, release, args.index_k_dtype)
    settings = resolved.settings
    if args.hisparse_ratio is not None:
        settings = replace(settings, hisparse_ratio=args.hisparse_ratio)
    # What SGLang refuses outright comes before what is not modelled: V4.1 with EAGLE is
    # refused (validate_deepseek_v41_features), not a cap-mode footprint left unmodelled.
    if args.layer_range is None:
        for rank in range(resolved.pp_size):
            stage = stage_slice(geom, resolved.pp_size, rank, partition=resolved.partition)
            for refusal in config_refusals(geom, settings, stage, release):
                raise Refused(refusal)
    switches = [
        *args.not_modelled,
        *resolved.not_modelled,
        *not_modelled(geom, settings, release),
    ]
    if switches:
        raise NotModelled(list(dict.fromkeys(switches)), release)
    if not 0 <= args.pp_rank < resolved.pp_size:
        raise UsageError(f"--pp-rank {args.pp_rank} must be in 0..{resolved.pp_size - 1}")
    available, reserve = _budget(args, launch.mem_fraction_static)
    layer_range = _layer_range(args.layer_range)
    if layer_range is not None:
        # An explicit slice is one stage alone: no other stage to sync with.
        stage = stage_slice(geom, 1, 0, layer_range)
        fp = plan_for_budget(geom, settings, args.configurator, available, stage, release)
        if resolved.max_total_tokens is not None and resolved.max_total_tokens < fp.full_tokens:
            fp = footprint_for_tokens(
                geom,
                settings,
                args.configurator,
                resolved.max_total_tokens // settings.page_size * settings.page_size,
                stage,
                available,
                release,
            )
        pipeline = PipelinePlan((fp,), (fp.full_tokens,), fp.full_tokens, resolved.max_total_tokens)
        return pipeline, 0, reserve, resolved
    pipeline = plan_pipeline(
        geom,
        settings,
        args.configurator,
        available,
        release,
        resolved.pp_size,
        resolved.partition,
        resolved.max_total_tokens,
    )
    return pipeline, args.pp_rank, reserve, resolved


def run(args: argparse.Namespace) -> int:
    try:
        pipeline, rank, reserve, resolved = compute(args)
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
        return EXIT_NOT_MODELLED
    except (Refused, BudgetError) as exc:
        if isinstance(exc, Refused):
            r = exc.refusal
            refused = {"check": r.check, "since": r.since, "message": r.message}
        else:
            refused = {
                "check": "calculate_pool_sizes: not enough memory",
                "since": "0.5.12",
                "message": str(exc),
            }
        if args.json:
            print(json.dumps({"refused": refused}))
        detail = str(exc) if isinstance(exc, Refused) else f"{refused['check']}: {exc}"
        print(f"dsv4-sidecar plan: SGLang refuses: {detail}", file=sys.stderr)
        return EXIT_REFUSED
    except (
        UsageError,
        GeometryError,
        SettingsError,
        VersionError,
        LaunchError,
    ) as exc:
        print(f"dsv4-sidecar plan: error: {exc}", file=sys.stderr)
        return EXIT_BAD_ARGUMENTS
    fp = pipeline.stages[rank]
    if args.json:
        out = _stage_json(fp, reserve)
        out["stages"] = [_stage_json(s, reserve) for s in pipeline.stages]
        out["pipeline"] = {
            "pp_size": len(pipeline.stages),
            "own_full_tokens": list(pipeline.own_full_tokens),
            "full_tokens": pipeline.full_tokens,
            "max_total_tokens": pipeline.max_total_tokens,
            "limiting_stages": list(pipeline.limiting_stages),
        }
        out["resolved"] = {
            "attn_dp_size": resolved.attn_dp_size,
            "pp_size": resolved.pp_size,
            "max_running_requests_per_worker": fp.settings.max_running_requests,
            "num_draft_tokens": fp.settings.num_draft_tokens,
            "max_total_tokens": resolved.max_total_tokens,
            "notes": list(resolved.notes),
        }
        print(json.dumps(out, sort_keys=True))
        return 0
    for stage in pipeline.stages:
        _print_human(stage, reserve)
    if len(pipeline.stages) > 1 or pipeline.max_total_tokens is not None:
        print(_sync_line(pipeline))
    for note in resolved.notes:
        print(f"resolved: {note}")
    return 0


def _stage_json(fp: Footprint, reserve: int | None) -> dict[str, object]:
    out = fp.to_json()
    out["reserve_bytes"] = reserve
    return out


def _sync_line(pipeline: PipelinePlan) -> str:
    own = ", ".join(f"{t:,}" for t in pipeline.own_full_tokens)
    cap = (
        f", --max-total-tokens {pipeline.max_total_tokens:,}"
        if pipeline.max_total_tokens is not None
        else ""
    )
    return (
        f"full tokens per stage on its own: [{own}]{cap} -> {pipeline.full_tokens:,} on every "
        "stage (SGLang's _apply_token_constraints: user cap, MIN across PP ranks)"
    )


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
    if fp.device is not None:
        dev = fp.device
        console.print(
            f"device bytes (PyTorch's caching allocator, modelled): allocated "
            f"{_gib(dev.allocated)} GiB, reserved {_gib(dev.reserved)} GiB in {dev.segments} "
            f"segments (what NVML sees of the pools) for {_gib(dev.tensors)} GiB of tensors; "
            f"over-commit on reserved {_gib(fp.device_overcommit_bytes or 0)} GiB"
        )
    if fp.release is not None:
        style = None if fp.release.verified else "bold yellow"
        console.print(fp.release.note, style=style)
    console.print(verdict(fp, reserve), style="bold")
