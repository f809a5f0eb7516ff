"""Run one released SGLang's own DSV4 pool configurator and device pool on many deployments.

Usage (one release per process; the conformance tests start it in a subprocess)::

    python -m tests.conformance.oracle <release_dir>  < cases.json  > results.json

Each case names a geometry (the config.json fields SGLang's ``ModelConfig`` copies), a budget
and the deployment switches. For each, the release's real ``DSV4PoolConfigurator`` turns the
budget into pool sizes (``calculate_pool_sizes``), then the release's real
``DeepSeekV4TokenToKVPool`` is built with those sizes on torch's ``meta`` device, and the bytes
of every tensor it holds are summed per sub-pool. Nothing here re-implements SGLang: the
objects handed in carry exactly the attributes the release reads from its ``ModelRunner`` /
``KVCacheConfigurator`` and runtime context, with the values SGLang's server-argument
defaults give a DeepSeek-V4 deployment (see ``docs/footprint.md``, "Conformance").
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


def _context(case: dict[str, Any]) -> dict[str, SimpleNamespace]:
    spec_on = bool(case["speculative"])
    drafts = case.get("num_draft_tokens", 2) if spec_on else None
    schedule = SimpleNamespace(
        max_running_requests=case["max_running_requests"],
        chunked_prefill_size=case.get("chunked_prefill_size", 8192),
        swa_prefix_tails=case.get("swa_prefix_tails"),
        swa_full_tokens_ratio=case["swa_ratio"],
        # False: --swa-full-tokens-ratio not given, so 0.5.21+ sizes SWA in cap mode.
        _swa_full_tokens_ratio_explicitly_set=case.get("swa_ratio_explicit", True),
        disable_overlap_schedule=case.get("disable_overlap_schedule", False),
    )
    spec = SimpleNamespace(
        speculative_algorithm="EAGLE" if spec_on else None,
        speculative_num_draft_tokens=drafts,
        max_speculative_num_draft_tokens=drafts,
        speculative_num_steps=(drafts - 1) if drafts else None,
        speculative_eagle_topk=1 if spec_on else None,
    )
    kernel = SimpleNamespace(
        dsv4_attn_backend="flashmla",
        enable_deepseek_v4_fp4_indexer=case["index_k"] == "fp4",
    )
    exec_ = SimpleNamespace(
        kernel=kernel,
        features=SimpleNamespace(enable_encoder_swa_bounded_replay=False),
        graph=SimpleNamespace(cuda_graph_config=None),
    )
    memory = SimpleNamespace(
        enable_hisparse=False, disable_radix_cache=case.get("disable_radix_cache", False)
    )
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


def _runner(case: dict[str, Any]) -> SimpleNamespace:
    """The attributes of ModelRunner (<=0.5.15) and KVCacheConfigurator (>=0.5.16) it reads."""
    g = case["geometry"]
    ratios = list(g["compress_ratios"])
    hf_config = SimpleNamespace(
        architectures=["DeepseekV4ForCausalLM"],
        model_type="deepseek_v4",
        compress_ratios=ratios,
        kv_source_layer_ids=g.get("kv_source_layer_ids") or [],
        sliding_window=g["sliding_window"],
    )
    model_config = SimpleNamespace(
        qk_nope_head_dim=g["head_dim"] - g["qk_rope_head_dim"],
        qk_rope_head_dim=g["qk_rope_head_dim"],
        index_head_dim=g["index_head_dim"],
        compress_ratios=ratios,
        window_size=g["sliding_window"],
        context_len=g.get("context_len", 1048576),
        hf_config=hf_config,
        num_hidden_layers=g["num_hidden_layers"],
    )
    spec_on = bool(case["speculative"])
    drafts = case.get("num_draft_tokens", 2) if spec_on else None
    server_args = SimpleNamespace(
        swa_full_tokens_ratio=case["swa_ratio"],
        speculative_algorithm="EAGLE" if spec_on else None,
        max_speculative_num_draft_tokens=drafts,
        speculative_num_draft_tokens=drafts,
        max_running_requests=case["max_running_requests"],
        disaggregation_mode="null",
        disaggregation_decode_extra_slots=0,
        enable_hisparse=False,
        enable_deepseek_v4_fp4_indexer=case["index_k"] == "fp4",
    )
    start, end = case["layer_range"]
    pp = SimpleNamespace(rank_in_group=case.get("pp_rank", 0))
    return SimpleNamespace(
        model_config=model_config,
        server_args=server_args,
        enable_hisparse=False,
        start_layer=start,
        end_layer=end,
        pp_size=case.get("pp_size", 1),
        pp_group=pp,
        dp_size=1,
        ps=SimpleNamespace(pp_size=case.get("pp_size", 1), attn_dp_size=1),
        attn_dp_size=1,
        layer_info=SimpleNamespace(start_layer=start, end_layer=end),
        spec_algorithm=_Spec(spec_on),
        spec_aux_config=SimpleNamespace(dspark_num_stages=None, dflash_draft_num_layers=None),
        kv_cache_dtype_str="fp8_e4m3",
        sliding_window_size=g["sliding_window"],
        page_size=case["page_size"],
        is_hybrid_swa=True,
    )


def run_case(case: dict[str, Any]) -> dict[str, Any]:
    import sglang.srt.model_executor.pool_configurator as pc

    # Read when sizing (envs.X.get()), so set per case: SGLang's own switch for the state dtype.
    if case.get("state_dtype") == "bfloat16":
        os.environ["SGLANG_DSV4_COMPRESS_STATE_DTYPE"] = "bfloat16"
    else:
        os.environ.pop("SGLANG_DSV4_COMPRESS_STATE_DTYPE", None)
    # SWA cap mode's eviction interval (0.5.21+), also read when sizing.
    if case.get("swa_eviction_interval") is not None:
        os.environ["SGLANG_SWA_EVICTION_INTERVAL"] = str(case["swa_eviction_interval"])
    else:
        os.environ.pop("SGLANG_SWA_EVICTION_INTERVAL", None)
    ctx: dict[str, Any] = dict(_context(case))
    runner = _runner(case)
    ctx["max_speculative_num_draft_tokens"] = ctx["get_spec"].max_speculative_num_draft_tokens
    ctx["get_server_args"] = runner.server_args
    ctx["get_global_server_args"] = runner.server_args
    _install_context(ctx)
    configurator = pc.DSV4PoolConfigurator(runner)
    config = configurator.calculate_pool_sizes(case["available_bytes"], case["page_size"])
    if hasattr(configurator, "finalize_with_max_running_requests"):
        config.max_running_requests = case["max_running_requests"]
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
    result: dict[str, Any] = {"bytes_per_full_token": configurator.bytes_per_full_token, **sizes}
    if case.get("build_pool", True):
        result["pool_tensors"] = _pool_tensor_bytes(case, runner, sizes)
    return result


def _pool_kwargs(
    case: dict[str, Any], runner: SimpleNamespace, sizes: dict[str, int]
) -> dict[str, Any]:
    """Every argument any release's DeepSeekV4TokenToKVPool takes, as its model runner passes it."""
    import sglang.srt.model_executor.pool_configurator as pc
    import torch

    # As the model runner does: float32 state until the release reads
    # SGLANG_DSV4_COMPRESS_STATE_DTYPE (_get_dsv4_compress_state_dtype_sizes, 0.5.14+).
    reads_env = hasattr(pc, "_get_dsv4_compress_state_dtype_sizes")
    bf16 = reads_env and case.get("state_dtype") == "bfloat16"
    state_dtype = torch.bfloat16 if bf16 else torch.float32
    mc = runner.model_config
    mrr = case["max_running_requests"]
    return {
        "max_num_reqs": mrr,
        "num_req_slots": mrr + 1,
        "swa_size": sizes["swa_max_total_num_tokens"],
        "c4_size": sizes["c4_max_total_num_tokens"],
        "c128_size": sizes["c128_max_total_num_tokens"],
        "full_size": sizes["full_max_total_num_tokens"],
        "c4_state_pool_size": sizes["c4_state_pool_size"],
        "c128_state_pool_size": sizes["c128_state_pool_size"],
        "page_size": case["page_size"],
        "swa_page_size": case["page_size"],
        "sliding_window": mc.window_size,
        "dtype": torch.float8_e4m3fn,
        "state_dtype": state_dtype,
        "c4_state_dtype": state_dtype,
        "c128_state_dtype": state_dtype,
        "qk_nope_head_dim": mc.qk_nope_head_dim,
        "qk_rope_head_dim": mc.qk_rope_head_dim,
        "indexer_head_dim": mc.index_head_dim,
        "layer_num": runner.end_layer - runner.start_layer,
        "device": "meta",
        "enable_memory_saver": False,
        "compression_ratios": list(mc.compress_ratios),
        "start_layer": runner.start_layer,
        "end_layer": runner.end_layer,
        "enable_hisparse": False,
        "online_mtp_max_draft_tokens": 0,
        "kv_source_layers": list(mc.hf_config.kv_source_layer_ids),
        "is_draft_worker": False,
    }


def _pool_tensor_bytes(
    case: dict[str, Any], runner: SimpleNamespace, sizes: dict[str, int]
) -> dict[str, int]:
    """Build the release's device pool on the meta device; bytes of every tensor by path."""
    import inspect

    import sglang.srt.mem_cache.deepseek_v4_memory_pool as mp
    import torch

    wanted = _pool_kwargs(case, runner, sizes)
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
    cases = json.load(sys.stdin)
    out = []
    for case in cases:
        try:
            out.append({"ok": True, **run_case(case)})
        except Exception as exc:  # reported per case, so one bad case does not hide the rest
            import traceback

            traceback.print_exc()
            out.append({"ok": False, "error": f"{type(exc).__name__}: {exc}"})
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    os.environ.setdefault("SGLANG_LOGGING_LEVEL", "ERROR")
    main()
