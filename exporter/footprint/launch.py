"""SGLang's own launch vocabulary in, SGLang's own resolution applied: server args -> settings.

An operator has a launch command (``python -m sglang.launch_server --model-path ... --tp 8
--dp 8 --enable-dp-attention --speculative-algorithm EAGLE ...``) and a few ``SGLANG_*``
environment switches, not this project's vocabulary. :func:`parse_launch` reads the flags that
change the DSV4 pool footprint under SGLang's names and aliases (``server_args.py``
``add_cli_args``); :func:`resolve` applies what the release does to them before the pool
configurator runs (docs/footprint.md, "Launch resolution"), and says what it resolved:

- page size: forced to 256 on CUDA for DSV4 (``apply_deepseek_v4_defaults`` 0.5.12-0.5.18,
  ``model_overrides/deepseek_v4.py`` 0.5.19+);
- ``--max-running-requests`` is global: 256 when unset (the DSV4 hook), divided by the
  attention-DP size per worker (``requested_max_running_requests_per_worker``,
  ``resolve_max_num_reqs``);
- ``--swa-full-tokens-ratio`` left unset: 0.1 for V4; V4.1 on 0.5.21+ keeps it unset (SWA cap
  mode);
- EAGLE with no draft count: SGLang's auto choice for DeepSeek, 3 steps, top-k 1, 4 draft
  tokens (``auto_choose_speculative_params``); any speculative algorithm but EAGLE (NEXTN)
  and, from 0.5.16, DSPARK (NGRAM, EAGLE3, ...), or EAGLE with top-k > 1, is refused as
  ``apply_deepseek_v4_defaults`` refuses it (``refusals.speculative_refusals``).

Pure: parsing a list of strings and a mapping, no I/O.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from exporter.footprint.geometry import GeometryError, ModelGeometry, parse_pp_partition
from exporter.footprint.refusals import (
    SGLANG_SPECULATIVE_ALGORITHMS,
    Refusal,
    Refused,
    speculative_refusals,
)
from exporter.footprint.releases import RuleChoice
from exporter.footprint.settings import (
    DEFAULT_CHUNKED_PREFILL_SIZE,
    DEFAULT_SWA_EVICTION_INTERVAL,
    DSV4_MAX_RUNNING_REQUESTS,
    DSV4_PAGE_SIZE,
    DSV4_SWA_RATIO,
    DeploymentSettings,
    IndexKDtype,
    SettingsError,
    StateDtype,
)

# auto_choose_speculative_params for DeepSeek architectures (every release 0.5.12-0.5.23):
# (num_steps, eagle_topk, num_draft_tokens) when --speculative-num-steps is not given.
DSV4_AUTO_SPECULATIVE = (3, 1, 4)
TRUTHY = ("1", "true", "yes", "on")

# SGLANG_* switches read when sizing the pools; anything else SGLANG_* is reported as having no
# known footprint effect, never silently dropped.
ENV_MODELLED = (
    "SGLANG_DSV4_COMPRESS_STATE_DTYPE",
    "SGLANG_OPT_USE_ONLINE_COMPRESS",
    "SGLANG_EXPERIMENTAL_ONLINE_C128_MTP",
    "SGLANG_SWA_EVICTION_INTERVAL",
    "SGLANG_PP_LAYER_PARTITION",
    "SGLANG_DSV4_BF16_INDEX_K",
)
ENV_NOT_MODELLED = {
    "SGLANG_DSV4_UNIFIED_KV": "unified-kv",
    "SGLANG_DSV4_UNIFIED_KV_TRITON": "unified-kv",
    "SGLANG_DSV4_UNIFIED_KV_FP8": "unified-kv",
}
# Launch flags of `python -m sglang.launch_server` that change the footprint in ways the
# model does not reproduce -> the NOT_MODELLED_SWITCHES key reported.
FLAG_NOT_MODELLED = {
    "enable_hisparse": "hisparse",
    "enable_encoder_swa_bounded_replay": "encoder-replay",
}


class LaunchError(ValueError):
    """A launch command or --env entry that cannot be read; the message names it."""


@dataclass(frozen=True)
class Launch:
    """SGLang server args that size DSV4 pools, as given (None: left to SGLang's default)."""

    model_path: str | None = None
    tp_size: int = 1
    pp_size: int = 1
    dp_size: int = 1
    enable_dp_attention: bool = False
    attn_dp_size: int | None = None  # 0.5.23's --attn-dp-size
    max_running_requests: int | None = None
    speculative_algorithm: str | None = None
    speculative_num_draft_tokens: int | None = None
    speculative_num_steps: int | None = None
    speculative_eagle_topk: int | None = None
    page_size: int | None = None
    context_length: int | None = None
    chunked_prefill_size: int | None = None
    swa_full_tokens_ratio: float | None = None
    swa_prefix_tails: int | None = None
    disable_radix_cache: bool = False
    disable_overlap_schedule: bool = False
    enable_deepseek_v4_fp4_indexer: bool = False
    mem_fraction_static: float | None = None
    max_total_tokens: int | None = None  # --max-total-tokens: caps every stage's pools
    device: str = "cuda"
    dsv4_attn_backend: str | None = None
    disaggregation_mode: str = "null"
    enable_hisparse: bool = False
    enable_encoder_swa_bounded_replay: bool = False
    env: Mapping[str, str] = field(default_factory=dict)
    ignored: tuple[str, ...] = ()  # launch tokens with no known footprint effect


def add_launch_arguments(
    p: argparse.ArgumentParser | argparse._ArgumentGroup, model_alias: bool = True
) -> None:
    """SGLang's flag names and aliases (``ServerArgs.add_cli_args``) for what sizes the pools.
    ``--tp`` and ``--dp`` are not SGLang aliases but unique prefixes its argparse accepts
    (``--pp`` is ambiguous there and refused here too). Defaults are None ("not given") so
    that resolution can apply SGLang's own defaults."""
    names = ("--model-path", "--model") if model_alias else ("--model-path",)
    p.add_argument(*names, dest="model_path", default=None)
    p.add_argument(
        "--tp-size", "--tp", "--tensor-parallel-size", dest="tp_size", type=int, default=None
    )
    p.add_argument("--pp-size", "--pipeline-parallel-size", dest="pp_size", type=int, default=None)
    p.add_argument(
        "--dp-size", "--dp", "--data-parallel-size", dest="dp_size", type=int, default=None
    )
    p.add_argument("--enable-dp-attention", action="store_true", default=None)
    p.add_argument("--attn-dp-size", dest="attn_dp_size", type=int, default=None)
    p.add_argument(
        "--max-running-requests",
        type=int,
        default=None,
        help="global, as SGLang takes it (divided per attention-DP worker; default 256)",
    )
    p.add_argument("--speculative-algorithm", default=None, type=str.upper)
    p.add_argument("--speculative-num-draft-tokens", type=int, default=None)
    p.add_argument("--speculative-num-steps", type=int, default=None)
    p.add_argument("--speculative-eagle-topk", type=int, default=None)
    p.add_argument("--page-size", type=int, default=None, help="DSV4 on CUDA: forced to 256")
    p.add_argument("--context-length", type=int, default=None)
    p.add_argument("--chunked-prefill-size", type=int, default=None)
    p.add_argument(
        "--swa-full-tokens-ratio",
        type=float,
        default=None,
        help="unset: 0.1 for V4; V4.1 on 0.5.21+ runs SWA cap mode",
    )
    p.add_argument("--swa-prefix-tails", type=int, default=None)
    p.add_argument("--disable-radix-cache", action="store_true", default=None)
    p.add_argument("--disable-overlap-schedule", action="store_true", default=None)
    p.add_argument("--enable-deepseek-v4-fp4-indexer", action="store_true", default=None)
    p.add_argument("--mem-fraction-static", type=float, default=None)
    p.add_argument(
        "--max-total-tokens",
        type=int,
        default=None,
        help="caps the full-token count of every PP stage (SGLang's _apply_token_constraints)",
    )
    p.add_argument("--device", default=None)
    p.add_argument("--dsv4-attn-backend", default=None)
    p.add_argument("--disaggregation-mode", default=None)
    p.add_argument("--enable-hisparse", action="store_true", default=None)
    p.add_argument("--enable-encoder-swa-bounded-replay", action="store_true", default=None)


LAUNCH_FIELDS = (
    "model_path",
    "tp_size",
    "pp_size",
    "dp_size",
    "enable_dp_attention",
    "attn_dp_size",
    "max_running_requests",
    "speculative_algorithm",
    "speculative_num_draft_tokens",
    "speculative_num_steps",
    "speculative_eagle_topk",
    "page_size",
    "context_length",
    "chunked_prefill_size",
    "swa_full_tokens_ratio",
    "swa_prefix_tails",
    "disable_radix_cache",
    "disable_overlap_schedule",
    "enable_deepseek_v4_fp4_indexer",
    "mem_fraction_static",
    "max_total_tokens",
    "device",
    "dsv4_attn_backend",
    "disaggregation_mode",
    "enable_hisparse",
    "enable_encoder_swa_bounded_replay",
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise LaunchError(f"launch command: {message}")


def parse_env(entries: Sequence[str]) -> dict[str, str]:
    """``--env KEY=VALUE`` entries (repeatable) as a mapping; a malformed one is an error."""
    out: dict[str, str] = {}
    for entry in entries:
        key, sep, value = entry.partition("=")
        if not sep or not key or not key.replace("_", "").isalnum():
            raise LaunchError(f"--env expects KEY=VALUE, got {entry!r}")
        out[key] = value
    return out


def _strip_launcher(argv: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """Drop ``VAR=value`` prefixes (taken as env), ``python -m sglang.launch_server`` and
    ``sglang serve``: what is left are the server's flags."""
    tokens = list(argv)
    if len(tokens) == 1 and " " in tokens[0]:
        tokens = shlex.split(tokens[0])
    env: dict[str, str] = {}
    while tokens and "=" in tokens[0] and not tokens[0].startswith("-"):
        env.update(parse_env([tokens.pop(0)]))
    for i, tok in enumerate(tokens):
        if tok.startswith("-") and tok not in ("-m",):
            head = tokens[:i]
            if any("sglang" in t or t.startswith("python") for t in head) or not head:
                return tokens[i:], env
            break
    if tokens and not tokens[0].startswith("-"):
        raise LaunchError(
            f"launch command: expected SGLang's flags after the launcher, got {tokens[0]!r}"
        )
    return tokens, env


def parse_launch(
    argv: Sequence[str], env: Mapping[str, str] | None = None, base: Launch | None = None
) -> Launch:
    """A launch command (or just its flags) as SGLang reads the footprint's flags; flags
    given here override ``base``; flags this model does not know are kept in ``ignored``."""
    tokens, prefix_env = _strip_launcher(argv)
    if "--pp" in tokens:
        raise LaunchError(
            "launch command: ambiguous option --pp (SGLang's argparse: it could match "
            "--pp-size, --pp-max-micro-batch-size, ...); use --pp-size"
        )
    parser = _Parser(add_help=False, allow_abbrev=False)
    add_launch_arguments(parser)
    ns, rest = parser.parse_known_args(tokens)
    start = base or Launch()
    values = {name: getattr(start, name) for name in LAUNCH_FIELDS}
    for name in LAUNCH_FIELDS:
        given = getattr(ns, name)
        if given is not None:
            values[name] = given
    merged_env = {**start.env, **prefix_env, **(env or {})}
    ignored = tuple(t for t in rest if t.startswith("-"))
    return Launch(**values, env=merged_env, ignored=(*start.ignored, *ignored))


_BOOL_FIELDS = frozenset(
    name for name in LAUNCH_FIELDS if isinstance(getattr(Launch(), name), bool)
)
_INT_FIELDS = frozenset(
    (
        "tp_size",
        "pp_size",
        "dp_size",
        "attn_dp_size",
        "max_running_requests",
        "speculative_num_draft_tokens",
        "speculative_num_steps",
        "speculative_eagle_topk",
        "page_size",
        "context_length",
        "chunked_prefill_size",
        "swa_prefix_tails",
        "max_total_tokens",
    )
)
_FLOAT_FIELDS = frozenset(("swa_full_tokens_ratio", "mem_fraction_static"))


def launch_from_server_args(args: Mapping[str, object], env: Mapping[str, str]) -> Launch:
    """A running server's args (``/server_info`` reports every ``ServerArgs`` field under the
    names :data:`LAUNCH_FIELDS` uses) as a :class:`Launch`, so that the sidecar's view and
    ``plan --`` meet in the same :func:`resolve` (one place per release default: issue 33).
    Values of the wrong type are left to SGLang's default rather than trusted; only the
    ``SGLANG_*`` part of ``env`` is the deployment's."""
    values: dict[str, object] = {}
    for name in LAUNCH_FIELDS:
        v = args.get(name)
        if v is None:
            continue
        if name in _BOOL_FIELDS:
            if isinstance(v, bool):
                values[name] = v
        elif name in _INT_FIELDS:
            if isinstance(v, int) and not isinstance(v, bool):
                values[name] = v
        elif name in _FLOAT_FIELDS:
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                values[name] = float(v)
        elif isinstance(v, str):
            values[name] = v.upper() if name == "speculative_algorithm" else v
    if values.get("speculative_algorithm") == "NONE":
        del values["speculative_algorithm"]
    sglang_env = {k: v for k, v in env.items() if k.startswith("SGLANG_")}
    return Launch(**values, env=sglang_env)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Resolved:
    """What the release makes of a launch: the settings the pools are sized with, the PP
    split inputs, and one line per value SGLang chose or changed (``notes``)."""

    settings: DeploymentSettings
    pp_size: int
    partition: tuple[int, ...] | None
    attn_dp_size: int
    notes: tuple[str, ...]
    not_modelled: tuple[str, ...]
    # --max-total-tokens: SGLang's user cap on every stage's full tokens (None: none given).
    max_total_tokens: int | None = None


def _truthy(env: Mapping[str, str], key: str) -> bool:
    return env.get(key, "").strip().lower() in TRUTHY


def default_index_k_dtype(env: Mapping[str, str], fp4_indexer: bool) -> IndexKDtype:
    """What the device pool stores for index-K when nobody said otherwise: the one place for
    this default (``plan`` and the sidecar's ``auto`` both come here). Upstream stores fp8,
    fp4 with ``--enable-deepseek-v4-fp4-indexer`` (0.5.13+; 0.5.12 stores fp8 whatever is
    asked: ``pricing.stored_index_k_dtype``); bf16 only in the production forks, and only
    when their switch ``SGLANG_DSV4_BF16_INDEX_K`` is set (or the operator says so:
    ``plan --index-k-dtype bf16``, the sidecar's ``index_k_dtype`` setting). Before issue 33,
    ``plan`` defaulted to the fork's bf16 and showed a false OVER-COMMIT on upstream."""
    if _truthy(env, "SGLANG_DSV4_BF16_INDEX_K"):
        return "bf16"
    return "fp4" if fp4_indexer else "fp8"


def _positive(name: str, value: int | None) -> None:
    if value is not None and value < 1:
        raise LaunchError(f"--{name.replace('_', '-')} must be >= 1, got {value}")


def resolve(
    launch: Launch,
    geom: ModelGeometry,
    choice: RuleChoice,
    index_k_dtype: IndexKDtype | None = None,
) -> Resolved:
    """Apply the release's server-arg resolution to ``launch`` (module docstring)."""
    notes: list[str] = []
    unmodelled: list[str] = []
    env = launch.env
    for name in (
        "tp_size",
        "pp_size",
        "dp_size",
        "attn_dp_size",
        "max_running_requests",
        "max_total_tokens",
    ):
        _positive(name, getattr(launch, name))
    # Attention DP: --enable-dp-attention makes every DP rank an attention worker
    # (ModelRunner.dp_size / ps.attn_dp_size); 0.5.23 also takes --attn-dp-size.
    attn_dp = 1
    if launch.attn_dp_size and launch.attn_dp_size > 1:
        attn_dp = launch.attn_dp_size
    elif launch.enable_dp_attention:
        attn_dp = launch.dp_size
    if attn_dp > 1 and launch.tp_size % attn_dp:
        raise LaunchError(
            f"--tp-size {launch.tp_size} is not divisible by the attention-DP size {attn_dp}"
        )
    page = DSV4_PAGE_SIZE
    if launch.device not in (None, "cuda"):
        raise LaunchError(
            f"--device {launch.device}: only CUDA's DSV4 pools are modelled (page size 256)"
        )
    if launch.page_size is not None and launch.page_size != DSV4_PAGE_SIZE:
        notes.append(
            f"--page-size {launch.page_size} -> {DSV4_PAGE_SIZE}: SGLang forces 256 for "
            "DeepSeek-V4 on CUDA (apply_deepseek_v4_defaults / model_overrides/deepseek_v4.py)"
        )
    mrr = launch.max_running_requests
    if mrr is None:
        mrr = DSV4_MAX_RUNNING_REQUESTS
        notes.append(f"--max-running-requests unset -> {mrr} (apply_deepseek_v4_defaults)")
    floor = choice.rules.requests_per_worker_floor
    per_worker = max(floor, mrr // attn_dp)
    if mrr < attn_dp:
        notes.append(
            f"--max-running-requests {mrr} is below the attention-DP size {attn_dp}: "
            + (
                f"{per_worker} request per worker (0.5.23: max(1, mrr // attn_dp_size))"
                if per_worker
                else "0 requests per worker (0.5.12-0.5.22: mrr // attn_dp_size): the "
                "server admits no request"
            )
        )
    elif attn_dp > 1:
        notes.append(
            f"--max-running-requests {mrr} over {attn_dp} attention-DP workers -> {per_worker} "
            "per worker (requested_max_running_requests_per_worker)"
        )
    algo = launch.speculative_algorithm
    speculative = algo is not None and algo != "NONE"
    drafts = 0
    if speculative:
        if algo not in SGLANG_SPECULATIVE_ALGORITHMS:
            raise LaunchError(
                f"--speculative-algorithm {algo}: not one of SGLang's "
                f"({', '.join(SGLANG_SPECULATIVE_ALGORITHMS)})"
            )
        algo = "EAGLE" if algo == "NEXTN" else algo
        for refusal in speculative_refusals(algo, launch.speculative_eagle_topk, choice):
            raise Refused(refusal)
        if algo == "DSPARK":
            unmodelled.append("dspark-draft")
        if launch.speculative_num_draft_tokens is not None:
            drafts = launch.speculative_num_draft_tokens
        elif launch.speculative_num_steps is not None:
            # SGLang: num_draft_tokens = num_steps + 1 with topk 1 when only steps are given.
            drafts = launch.speculative_num_steps + 1
            notes.append(f"--speculative-num-draft-tokens unset -> {drafts} (num_steps + 1)")
        else:
            drafts = DSV4_AUTO_SPECULATIVE[2]
            notes.append(
                f"--speculative-num-draft-tokens unset -> {drafts} "
                "(auto_choose_speculative_params for DeepSeek: steps 3, topk 1, 4 tokens)"
            )
        if drafts < 1:
            raise LaunchError(f"--speculative-num-draft-tokens must be >= 1, got {drafts}")
    ratio_given = launch.swa_full_tokens_ratio is not None
    ratio = DSV4_SWA_RATIO if launch.swa_full_tokens_ratio is None else launch.swa_full_tokens_ratio
    explicit = ratio_given or not (geom.is_v41 and choice.rules.swa_cap_mode)
    if not ratio_given:
        notes.append(
            "--swa-full-tokens-ratio unset -> "
            + ("SWA cap mode (V4.1, 0.5.21+)" if not explicit else f"{DSV4_SWA_RATIO} (DSV4)")
        )
    chunked = launch.chunked_prefill_size
    if chunked is None:
        chunked = DEFAULT_CHUNKED_PREFILL_SIZE
        if not explicit:
            notes.append(
                f"--chunked-prefill-size unset -> {chunked} assumed (SGLang picks it from the "
                "GPU's memory; give it to be exact in SWA cap mode)"
            )
    for flag, switch in FLAG_NOT_MODELLED.items():
        if getattr(launch, flag):
            unmodelled.append(switch)
    if launch.dsv4_attn_backend == "trtllm":
        unmodelled.append("trtllm-layout")
    if launch.disaggregation_mode == "decode":
        unmodelled.append("pd-decode-slots")
    for key, switch in ENV_NOT_MODELLED.items():
        if _truthy(env, key) and switch not in unmodelled:
            unmodelled.append(switch)
    for key in sorted(env):
        if key.startswith("SGLANG_") and key not in ENV_MODELLED and key not in ENV_NOT_MODELLED:
            notes.append(f"env {key}: no known effect on the DSV4 pools (not modelled)")
    for token in launch.ignored:
        notes.append(f"{token}: no known effect on the DSV4 pools (ignored)")
    raw_dtype = env.get("SGLANG_DSV4_COMPRESS_STATE_DTYPE", "float32").strip().lower()
    dtypes: dict[str, StateDtype] = {
        "float32": "float32",
        "fp32": "float32",
        "bfloat16": "bfloat16",
        "bf16": "bfloat16",
    }
    if raw_dtype not in dtypes:
        raise LaunchError(
            f"SGLANG_DSV4_COMPRESS_STATE_DTYPE={raw_dtype!r}: SGLang takes float32 or bfloat16"
        )
    if launch.enable_deepseek_v4_fp4_indexer and not choice.rules.has_fp4_indexer:
        raise Refused(
            Refusal(
                "server_args.ServerArgs.add_cli_args",
                "0.5.12",
                "unrecognized arguments: --enable-deepseek-v4-fp4-indexer (from 0.5.13)",
            )
        )
    if index_k_dtype is None:
        index_k_dtype = default_index_k_dtype(env, bool(launch.enable_deepseek_v4_fp4_indexer))
    eviction = env.get("SGLANG_SWA_EVICTION_INTERVAL")
    try:
        eviction_interval = int(eviction) if eviction else DEFAULT_SWA_EVICTION_INTERVAL
    except ValueError:
        raise LaunchError(f"SGLANG_SWA_EVICTION_INTERVAL={eviction!r} is not an integer") from None
    partition: tuple[int, ...] | None = None
    raw_partition = env.get("SGLANG_PP_LAYER_PARTITION")
    if raw_partition is not None:
        if launch.pp_size == 1 and choice.rules.pp_partition_ignored_at_pp1:
            notes.append("SGLANG_PP_LAYER_PARTITION ignored at pp_size 1 (get_pp_indices)")
        else:
            try:
                partition = parse_pp_partition(raw_partition)
            except GeometryError as exc:
                raise LaunchError(str(exc)) from None
    try:
        settings = DeploymentSettings(
            index_k_dtype=index_k_dtype,
            swa_full_tokens_ratio=ratio,
            swa_ratio_explicit=explicit,
            page_size=page,
            max_running_requests=per_worker,
            compress_state_dtype=dtypes[raw_dtype],
            speculative=speculative,
            num_draft_tokens=drafts,
            online_compress=_truthy(env, "SGLANG_OPT_USE_ONLINE_COMPRESS"),
            online_c128_mtp=_truthy(env, "SGLANG_EXPERIMENTAL_ONLINE_C128_MTP"),
            chunked_prefill_size=chunked,
            swa_prefix_tails=launch.swa_prefix_tails,
            disable_radix_cache=bool(launch.disable_radix_cache),
            disable_overlap_schedule=bool(launch.disable_overlap_schedule),
            swa_eviction_interval=eviction_interval,
        )
    except SettingsError as exc:
        raise LaunchError(str(exc)) from None
    return Resolved(
        settings=settings,
        pp_size=launch.pp_size,
        partition=partition,
        attn_dp_size=attn_dp,
        notes=tuple(notes),
        not_modelled=tuple(unmodelled),
        max_total_tokens=launch.max_total_tokens,
    )
