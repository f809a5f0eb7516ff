"""Run one released SGLang's own DSV4 pool configurator and device pool on many deployments.

Usage (one release per process; the conformance tests start it in a subprocess)::

    python -m tests.conformance.oracle <release_dir>  < cases.json  > results.json

Each case is a *raw* deployment: the launch flags (``argv``, SGLang's own vocabulary), the
``SGLANG_*`` environment, the model's config.json, the PP rank and the budget. Nothing the
project derives is handed in. The release itself parses the flags (its ``ServerArgs``
argparse and ``from_cli_args``, without ``__post_init__``, which needs the GPU and the
model's weights), splits the layers (its ``get_pp_indices``, reading
``SGLANG_PP_LAYER_PARTITION``), reads the environment (its ``envs``; the device pool's
import-time ``ONLINE_C128`` by re-executing that module after the environment changes), sizes
the pools (its ``DSV4PoolConfigurator``), resolves max-running-requests per worker (its
``resolve_max_num_reqs``) and builds its ``DeepSeekV4TokenToKVPool`` on torch's ``meta``
device; the bytes of every tensor it holds are summed per sub-pool. The DSV4 server-arg
defaults the post-init would apply (page 256, max-running-requests 256, SWA ratio 0.1, EAGLE's
auto draft count, attention-DP size, and the two V4.1 server-arg refusals) are applied in
:func:`_dsv4_server_defaults`, each named after the SGLang function it stands for (see
``docs/footprint.md``, "Conformance"). A case SGLang refuses comes back ``refused`` with
SGLang's own message.
"""

from __future__ import annotations

import json
import os
import re
import sys
from types import SimpleNamespace
from typing import Any

from tests.conformance.native_stubs import install


class _Spec:
    """SpeculativeAlgorithm's predicates, for EAGLE (the only MTP algorithm DSV4 accepts)."""

    def __init__(self, on: bool) -> None:
        self._on = on

    def is_none(self) -> bool:
        return not self._on

    def is_eagle(self) -> bool:
        return self._on

    def is_dspark(self) -> bool:
        return False

    def is_dflash(self) -> bool:
        return False


def _server_args(case: dict[str, Any]) -> Any:
    """The release's own reading of the launch flags: its argparse (flag names, aliases,
    defaults) and ``from_cli_args`` (alias fields), with ``__post_init__`` left out."""
    import argparse

    from sglang.srt.server_args import ServerArgs

    class _Parsed(ServerArgs):  # type: ignore[misc, valid-type]
        def __post_init__(self) -> None:
            pass

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    argv = list(case["argv"])
    if argv and not argv[0].startswith("-"):  # `python3 -m sglang.launch_server` itself
        first_flag = next((i for i, t in enumerate(argv) if t.startswith("--")), len(argv))
        argv = argv[first_flag:]
    try:
        ns = parser.parse_args(["--model-path", "oracle-model", *argv])
    except SystemExit:  # argparse refused the command line (printed on stderr)
        raise ValueError(f"SGLang's argparse refuses the launch flags {argv}") from None
    return _Parsed.from_cli_args(ns), ServerArgs


def _dsv4_server_defaults(sa: Any, server_args_cls: Any, is_v41: bool, version: tuple) -> None:
    """What ServerArgs' post-init does to a DSV4 launch's pool-sizing fields, per release:
    ``apply_deepseek_v4_defaults`` (0.5.12-0.5.18) / ``model_overrides/deepseek_v4.py``
    (0.5.19+): page 256 on CUDA, 256 max running requests when unset, SWA ratio 0.1 when left
    at its default (V4.1 on 0.5.21+ keeps it unset: cap mode); the speculative hook's
    ``auto_choose_speculative_params`` (3 steps, topk 1, 4 draft tokens for DeepSeek);
    attention DP from --enable-dp-attention (0.5.23: --attn-dp-size too); and
    ``validate_deepseek_v41_features`` (0.5.21+), which refuses V4.1 with EAGLE or PP."""
    sa.page_size = 256
    if sa.max_running_requests is None:
        sa.max_running_requests = 256
    default_ratio = getattr(server_args_cls, "swa_full_tokens_ratio", None)
    explicitly_set = sa.swa_full_tokens_ratio is not None and sa.swa_full_tokens_ratio != (
        default_ratio if version < (0, 5, 20) else None
    )
    if not explicitly_set and not (is_v41 and version >= (0, 5, 21)):
        sa.swa_full_tokens_ratio = 0.1
        explicitly_set = version >= (0, 5, 21)  # the override runs before kv_cache_hook
    sa._swa_full_tokens_ratio_explicitly_set = explicitly_set
    if sa.swa_full_tokens_ratio is None:
        sa.swa_full_tokens_ratio = 0.1  # read only in ratio mode
    if sa.speculative_algorithm is not None:
        if sa.speculative_num_steps is None and sa.speculative_num_draft_tokens is None:
            sa.speculative_num_steps, sa.speculative_eagle_topk = 3, 1
            sa.speculative_num_draft_tokens = 4
        elif sa.speculative_num_draft_tokens is None:
            sa.speculative_num_draft_tokens = sa.speculative_num_steps + 1
        if sa.speculative_eagle_topk is None:
            sa.speculative_eagle_topk = 1
        if sa.speculative_num_steps is None:
            sa.speculative_num_steps = sa.speculative_num_draft_tokens - 1
    attn_dp = getattr(sa, "attn_dp_size", None)
    if not attn_dp or attn_dp <= 1:
        attn_dp = sa.dp_size if sa.enable_dp_attention else 1
    sa._oracle_attn_dp_size = attn_dp
    if is_v41 and version >= (0, 5, 21):
        if sa.speculative_algorithm is not None and sa.speculative_algorithm != "DSPARK":
            raise ValueError(
                "DeepSeek-V4.1 does not support speculative decoding other than DSpark yet"
            )
        if sa.pp_size > 1:
            raise ValueError("DeepSeek-V4.1 does not support pipeline parallelism yet")


def _model_config(cfg: dict[str, Any], sa: Any) -> tuple[SimpleNamespace, bool]:
    """The fields SGLang's ModelConfig copies from config.json (V4.1: ``text_config`` merged
    under the top level, as ``normalize_deepseek_v41_config`` does)."""
    is_v41 = cfg.get("model_type") in ("deepseek_v41", "deepseek_v41_text")
    if is_v41:
        text = {k: v for k, v in (cfg.get("text_config") or {}).items() if k != "model_type"}
        cfg = {**text, **{k: v for k, v in cfg.items() if k != "text_config"}}
    ratios = list(cfg["compress_ratios"])
    hf_config = SimpleNamespace(
        architectures=cfg.get("architectures") or ["DeepseekV4ForCausalLM"],
        model_type=cfg.get("model_type", "deepseek_v4"),
        compress_ratios=ratios,
        kv_source_layer_ids=cfg.get("kv_source_layer_ids") or [],
        sliding_window=cfg["sliding_window"],
    )
    context_len = sa.context_length or cfg.get("max_position_embeddings", 1048576)
    return (
        SimpleNamespace(
            qk_nope_head_dim=cfg["head_dim"] - cfg["qk_rope_head_dim"],
            qk_rope_head_dim=cfg["qk_rope_head_dim"],
            index_head_dim=cfg["index_head_dim"],
            compress_ratios=ratios,
            window_size=cfg["sliding_window"],
            context_len=context_len,
            hf_config=hf_config,
            num_hidden_layers=cfg["num_hidden_layers"],
        ),
        is_v41,
    )


def _context(sa: Any) -> dict[str, SimpleNamespace]:
    spec_on = sa.speculative_algorithm is not None
    drafts = sa.speculative_num_draft_tokens if spec_on else None
    schedule = SimpleNamespace(
        max_running_requests=sa.max_running_requests,
        chunked_prefill_size=sa.chunked_prefill_size if sa.chunked_prefill_size else 8192,
        swa_prefix_tails=getattr(sa, "swa_prefix_tails", None),
        swa_full_tokens_ratio=sa.swa_full_tokens_ratio,
        _swa_full_tokens_ratio_explicitly_set=sa._swa_full_tokens_ratio_explicitly_set,
        disable_overlap_schedule=sa.disable_overlap_schedule,
        mem_fraction_static=0.9,
        max_total_tokens=sa.max_total_tokens,
        page_size=sa.page_size,
    )
    spec = SimpleNamespace(
        speculative_algorithm=sa.speculative_algorithm,
        speculative_num_draft_tokens=drafts,
        max_speculative_num_draft_tokens=drafts,
        speculative_num_steps=sa.speculative_num_steps if spec_on else None,
        speculative_eagle_topk=sa.speculative_eagle_topk if spec_on else None,
    )
    kernel = SimpleNamespace(
        dsv4_attn_backend="flashmla",
        enable_deepseek_v4_fp4_indexer=bool(getattr(sa, "enable_deepseek_v4_fp4_indexer", False)),
    )
    exec_ = SimpleNamespace(
        kernel=kernel,
        features=SimpleNamespace(enable_encoder_swa_bounded_replay=False),
        graph=SimpleNamespace(cuda_graph_config=None),
    )
    memory = SimpleNamespace(enable_hisparse=False, disable_radix_cache=sa.disable_radix_cache)
    disagg = SimpleNamespace(disaggregation_mode="null", disaggregation_decode_extra_slots=0)
    platform = SimpleNamespace(is_sm120=False, is_sm100=False)
    return {
        "get_schedule": schedule,
        "get_spec": spec,
        "get_exec": exec_,
        "get_memory": memory,
        "get_disagg": disagg,
        "get_platform": platform,
    }


def _install_context(getters: dict[str, Any]) -> None:
    """Point every loaded release module's runtime getters (``get_schedule()``,
    ``get_global_server_args()``, ...) at this case's values. Releases import these names
    into each module, so each module's binding is replaced, not only the defining one."""
    import types

    for mod in list(sys.modules.values()):
        if not getattr(mod, "__name__", "").startswith("sglang"):
            continue
        for name, value in getters.items():
            if isinstance(getattr(mod, name, None), types.FunctionType):
                setattr(mod, name, (lambda v: lambda *a, **k: v)(value))


def _runner(
    sa: Any, model_config: SimpleNamespace, pp_rank: int, layers: tuple[int, int]
) -> SimpleNamespace:
    """The attributes of ModelRunner (<=0.5.15) and KVCacheConfigurator (>=0.5.16) it reads."""
    spec_on = sa.speculative_algorithm is not None
    drafts = sa.speculative_num_draft_tokens if spec_on else None
    attn_dp = sa._oracle_attn_dp_size
    server_args = SimpleNamespace(
        swa_full_tokens_ratio=sa.swa_full_tokens_ratio,
        speculative_algorithm=sa.speculative_algorithm,
        max_speculative_num_draft_tokens=drafts,
        speculative_num_draft_tokens=drafts,
        max_running_requests=sa.max_running_requests,
        disaggregation_mode="null",
        disaggregation_decode_extra_slots=0,
        enable_hisparse=False,
        enable_deepseek_v4_fp4_indexer=bool(getattr(sa, "enable_deepseek_v4_fp4_indexer", False)),
        max_mamba_cache_size=None,
        max_total_tokens=sa.max_total_tokens,
        pp_size=sa.pp_size,
    )
    start, end = layers
    pp = SimpleNamespace(rank_in_group=pp_rank)
    return SimpleNamespace(
        model_config=model_config,
        server_args=server_args,
        enable_hisparse=False,
        start_layer=start,
        end_layer=end,
        pp_size=sa.pp_size,
        pp_group=pp,
        dp_size=attn_dp,
        ps=SimpleNamespace(pp_size=sa.pp_size, attn_dp_size=attn_dp),
        attn_dp_size=attn_dp,
        mambaish_config=None,
        layer_info=SimpleNamespace(start_layer=start, end_layer=end),
        spec_algorithm=_Spec(spec_on),
        spec_aux_config=SimpleNamespace(dspark_num_stages=None, dflash_draft_num_layers=None),
        kv_cache_dtype_str="fp8_e4m3",
        sliding_window_size=model_config.window_size,
        page_size=sa.page_size,
        is_hybrid_swa=True,
    )


# Environment read at import time by the device pool (ONLINE_C128): re-executed on change.
_IMPORT_TIME_ENV = ("SGLANG_OPT_USE_ONLINE_COMPRESS",)
_CASE_ENV = (
    "SGLANG_DSV4_COMPRESS_STATE_DTYPE",
    "SGLANG_OPT_USE_ONLINE_COMPRESS",
    "SGLANG_EXPERIMENTAL_ONLINE_C128_MTP",
    "SGLANG_SWA_EVICTION_INTERVAL",
    "SGLANG_PP_LAYER_PARTITION",
)
_imported_env: dict[str, str | None] = {}


def _apply_env(env: dict[str, str]) -> None:
    """Set the case's SGLANG_* environment the way a launch would, before SGLang reads it."""
    import importlib

    for key in _CASE_ENV:
        os.environ.pop(key, None)
    os.environ.update(env)
    now = {k: os.environ.get(k) for k in _IMPORT_TIME_ENV}
    import sglang.srt.mem_cache.deepseek_v4_memory_pool as mp

    if _imported_env and now != _imported_env:
        importlib.reload(mp)
    _imported_env.update(now)


def _resolve_max_num_reqs(runner: SimpleNamespace, token_capacity: int) -> int:
    """The release's own ``resolve_max_num_reqs`` (KVCacheConfigurator, 0.5.16+) or
    ``_resolve_max_num_reqs`` (ModelRunner's KV-cache mixin, 0.5.12-0.5.15)."""
    try:
        from sglang.srt.mem_cache.kv_cache_configurator import KVCacheConfigurator

        return int(KVCacheConfigurator.resolve_max_num_reqs(runner, token_capacity))
    except ImportError:
        from sglang.srt.model_executor.model_runner_kv_cache_mixin import (
            ModelRunnerKVCacheMixin,
        )

        return int(ModelRunnerKVCacheMixin._resolve_max_num_reqs(runner, token_capacity))


def _token_constraints(runner: SimpleNamespace, own: list[int]) -> Any:
    """The release's own ``_apply_token_constraints`` (KVCacheConfigurator, 0.5.16+;
    ModelRunner's KV-cache mixin, 0.5.12-0.5.15), bound to ``runner``: the user cap
    (--max-total-tokens, read where that release reads it) and the all-reduce MIN across PP
    ranks. The all-reduce is the one thing run here instead: every stage's own capacity is in
    ``own`` (each stage's configurator ran in this process), so the collective is their MIN,
    computed by an ``all_reduce`` stand-in that takes the MIN of the tensor and every stage's."""
    import torch

    try:
        import sglang.srt.mem_cache.kv_cache_configurator as mod

        method = mod.KVCacheConfigurator._apply_token_constraints
    except ImportError:
        import sglang.srt.model_executor.model_runner_kv_cache_mixin as mod  # type: ignore[no-redef]

        method = mod.ModelRunnerKVCacheMixin._apply_token_constraints

    def all_reduce_min(tensor: Any, op: Any = None, group: Any = None) -> None:
        tensor.fill_(min([int(tensor.item()), *own]))

    group = SimpleNamespace(cpu_group=None)
    parallel = SimpleNamespace(pp_size=runner.pp_size, world_group=group)
    torch.distributed.all_reduce = all_reduce_min  # type: ignore[assignment]
    mod.get_world_group = lambda: group  # type: ignore[attr-defined]
    mod.get_parallel = lambda: parallel  # type: ignore[attr-defined]
    if hasattr(mod, "configured_pp_size"):  # 0.5.18 reads the PP size through it
        mod.configured_pp_size = lambda: runner.pp_size
    return lambda capacity: int(method(runner, capacity))


def _stage(
    case: dict[str, Any], sa: Any, model_config: SimpleNamespace, pp_rank: int
) -> tuple[SimpleNamespace, Any, Any]:
    """One PP stage's runner, configurator and its own ``calculate_pool_sizes`` on the budget
    (its refusals raise here: any stage's refusal stops SGLang's server)."""
    import sglang.srt.model_executor.pool_configurator as pc
    from sglang.srt.distributed.utils import get_pp_indices

    layers = get_pp_indices(model_config.num_hidden_layers, pp_rank, sa.pp_size)
    runner = _runner(sa, model_config, pp_rank, layers)
    ctx: dict[str, Any] = dict(_context(sa))
    ctx["max_speculative_num_draft_tokens"] = ctx["get_spec"].max_speculative_num_draft_tokens
    ctx["get_server_args"] = runner.server_args
    ctx["get_global_server_args"] = runner.server_args
    _install_context(ctx)
    configurator = pc.DSV4PoolConfigurator(runner)
    config = configurator.calculate_pool_sizes(case["available_bytes"], sa.page_size)
    return runner, configurator, config


def run_case(
    case: dict[str, Any], version: tuple[int, int, int], keep: list[Any] | None = None
) -> dict[str, Any]:
    """One raw deployment through the release, every PP stage: each stage's configurator
    sizes its layers from the budget, the release's ``_apply_token_constraints`` caps and
    MIN-syncs the capacity, a stage whose count changed is re-sized with its
    ``calculate_pool_sizes_from_max_tokens`` (the order of ``config_from_budget`` 0.5.16+ and
    of the KV-cache mixin 0.5.12-0.5.15), then requests per worker and the finalized pools.
    ``case["device"]`` (default ``meta``) is where the pools are built (``cuda`` in the GPU
    check: there only the case's own ``pp_rank``); ``keep``, when given, receives them. The
    result is the case's ``pp_rank`` stage, with every stage under ``stages``."""
    _apply_env(case.get("env", {}))
    sa, server_args_cls = _server_args(case)
    model_config, is_v41 = _model_config(case["config"], sa)
    _dsv4_server_defaults(sa, server_args_cls, is_v41, version)
    built = [_stage(case, sa, model_config, r) for r in range(sa.pp_size)]
    own = [int(config.full_max_total_num_tokens) for _, _, config in built]
    device = case.get("device", "meta")
    stages = []
    for rank, (runner, configurator, config) in enumerate(built):
        constrained = _token_constraints(runner, own)(config.full_max_total_num_tokens)
        if constrained != config.full_max_total_num_tokens:
            config = configurator.calculate_pool_sizes_from_max_tokens(constrained, sa.page_size)
        mrr = _resolve_max_num_reqs(runner, config.full_max_total_num_tokens)
        if hasattr(configurator, "finalize_with_max_running_requests"):
            config.max_running_requests = mrr
            config = configurator.finalize_with_max_running_requests(config)
        sizes = {
            k: getattr(config, k)
            for k in (
                "full_max_total_num_tokens",
                "swa_max_total_num_tokens",
                "c4_max_total_num_tokens",
                "c128_max_total_num_tokens",
                "c4_state_pool_size",
                "c128_state_pool_size",
            )
        }
        result: dict[str, Any] = {
            "bytes_per_full_token": configurator.bytes_per_full_token,
            "layers": [runner.start_layer, runner.end_layer],
            "own_full_tokens": own[rank],
            "max_running_requests_per_worker": mrr,
            **sizes,
        }
        build = case.get("build_pool", True) and (device == "meta" or rank == case["pp_rank"])
        if build:
            result["pool_tensors"] = _pool_tensor_bytes(sa, runner, sizes, mrr, device, keep)
        stages.append(result)
    return {**stages[case.get("pp_rank", 0)], "stages": stages}


def _pool_kwargs(
    sa: Any, runner: SimpleNamespace, sizes: dict[str, int], mrr: int, device: str = "meta"
) -> dict[str, Any]:
    """Every argument any release's DeepSeekV4TokenToKVPool takes, as its model runner passes it."""
    import sglang.srt.model_executor.pool_configurator as pc
    import torch

    # As the model runner does: float32 state until the release reads
    # SGLANG_DSV4_COMPRESS_STATE_DTYPE (_get_dsv4_compress_state_dtype_sizes, 0.5.14+).
    reads_env = hasattr(pc, "_get_dsv4_compress_state_dtype_sizes")
    bf16 = reads_env and pc._get_dsv4_compress_state_dtype_sizes()[0] == 2
    state_dtype = torch.bfloat16 if bf16 else torch.float32
    mc = runner.model_config
    drafts = runner.server_args.max_speculative_num_draft_tokens or 0
    return {
        "max_num_reqs": mrr,
        "num_req_slots": mrr + 1,
        "swa_size": sizes["swa_max_total_num_tokens"],
        "c4_size": sizes["c4_max_total_num_tokens"],
        "c128_size": sizes["c128_max_total_num_tokens"],
        "full_size": sizes["full_max_total_num_tokens"],
        "c4_state_pool_size": sizes["c4_state_pool_size"],
        "c128_state_pool_size": sizes["c128_state_pool_size"],
        "page_size": sa.page_size,
        "swa_page_size": sa.page_size,
        "sliding_window": mc.window_size,
        "dtype": torch.float8_e4m3fn,
        "state_dtype": state_dtype,
        "c4_state_dtype": state_dtype,
        "c128_state_dtype": state_dtype,
        "qk_nope_head_dim": mc.qk_nope_head_dim,
        "qk_rope_head_dim": mc.qk_rope_head_dim,
        "indexer_head_dim": mc.index_head_dim,
        "layer_num": runner.end_layer - runner.start_layer,
        "device": device,
        "enable_memory_saver": False,
        "compression_ratios": list(mc.compress_ratios),
        "start_layer": runner.start_layer,
        "end_layer": runner.end_layer,
        "enable_hisparse": False,
        "online_mtp_max_draft_tokens": drafts,
        "kv_source_layers": list(mc.hf_config.kv_source_layer_ids),
        "is_draft_worker": False,
    }


def _pool_tensor_bytes(
    sa: Any,
    runner: SimpleNamespace,
    sizes: dict[str, int],
    mrr: int,
    device: str = "meta",
    keep: list[Any] | None = None,
) -> dict[str, int]:
    """Build the release's device pool (on ``device``; ``keep`` receives it); bytes of every
    tensor, summed by sub-pool."""
    import inspect

    import sglang.srt.mem_cache.deepseek_v4_memory_pool as mp
    import torch

    wanted = _pool_kwargs(sa, runner, sizes, mrr, device)
    params = inspect.signature(mp.DeepSeekV4TokenToKVPool.__init__).parameters
    if "select_dsv4_kv_layout" in vars(mp) and "kv_layout" in params:
        wanted["kv_layout"], wanted["compressed_kv_layout"] = mp.select_dsv4_kv_layout()
    pool = mp.DeepSeekV4TokenToKVPool(**{k: v for k, v in wanted.items() if k in params})
    found: dict[str, tuple[int, int]] = {}
    seen: set[int] = set()

    def walk(obj: Any, path: str, depth: int) -> None:
        if id(obj) in seen or depth > 6:
            return
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            found[path] = (obj.nbytes, obj.shape[-1] if obj.dim() else 0)
            return
        if isinstance(obj, (list, tuple)):
            for i, item in enumerate(obj):
                walk(item, f"{path}[{i}]", depth + 1)
            return
        if isinstance(obj, dict):
            for k, item in obj.items():
                walk(item, f"{path}[{k!r}]", depth + 1)
            return
        if hasattr(obj, "__dict__") and type(obj).__module__.startswith("sglang"):
            for k, item in vars(obj).items():
                walk(item, f"{path}.{k}" if path else k, depth + 1)

    walk(pool, "", 0)
    if keep is not None:
        keep.append(pool)
    return _by_pool(found, wanted["compression_ratios"])


# Attribute paths of each sub-pool across releases (0.5.12: one attribute per pool;
# 0.5.21+: dicts keyed by compress ratio, with the old names kept as aliases).
_PATHS = (
    ("swa_kv", ("swa_kv_pool.",)),
    ("c4_kv", ("c4_kv_pool.", "kv_pools[4].")),
    ("c128_kv", ("c128_kv_pool.", "kv_pools[128].")),
    ("c1_kv", ("kv_pools[1].",)),
    ("c2_kv", ("kv_pools[2].",)),
    ("c4_index_k", ("c4_indexer_kv_pool.", "index_pools[4].")),
    ("c1_index_k", ("index_pools[1].",)),
    ("c2_index_k", ("index_pools[2].",)),
    ("c4_index_state", ("indexer_compress_state_pools[",)),
    ("c128_mtp_pending_lens", ("online_c128_mtp_pending_seq_lens",)),
)
_STATE = re.compile(r"^compress_state_pools\[(\d+)\]")


def _by_pool(found: dict[str, tuple[int, int]], ratios: list[int]) -> dict[str, int]:
    """Sum tensor bytes per sub-pool. Compress-state pools sit in one list indexed by layer:
    the layer's compress ratio names the pool (c4, c128, or V4.1's ratio-2 pair state)."""
    out: dict[str, int] = {}
    for path, (nbytes, _last_dim) in found.items():
        name = next((n for n, prefixes in _PATHS if path.startswith(prefixes)), None)
        state = _STATE.match(path)
        if name is None and state:
            name = f"c{ratios[int(state.group(1))]}_state"
        if name is None:
            name = f"other:{path}"
        out[name] = out.get(name, 0) + nbytes
    return out


def main() -> None:
    release_dir = sys.argv[1]
    install(release_dir)
    version = tuple(int(x) for x in os.path.basename(release_dir.rstrip("/")).split(".")[:3])
    cases = json.load(sys.stdin)
    out = []
    for case in cases:
        try:
            out.append({"ok": True, **run_case(case, version)})  # type: ignore[arg-type]
        except (AssertionError, ValueError, KeyError, RuntimeError) as exc:
            # SGLang's own refusal (an assert, a ValueError, a missing kv_source): reported
            # per case, so one refusal does not hide the rest.
            out.append({"ok": False, "refused": True, "error": f"{type(exc).__name__}: {exc}"})
        except Exception as exc:  # anything else is the oracle failing, not SGLang refusing
            import traceback

            traceback.print_exc()
            out.append({"ok": False, "refused": False, "error": f"{type(exc).__name__}: {exc}"})
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    os.environ.setdefault("SGLANG_LOGGING_LEVEL", "ERROR")
    main()
