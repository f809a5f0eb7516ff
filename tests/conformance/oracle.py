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
        swa_prefix_tails=None,
        swa_full_tokens_ratio=case["swa_ratio"],
        _swa_full_tokens_ratio_explicitly_set=True,
        disable_overlap_schedule=False,
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
    memory = SimpleNamespace(enable_hisparse=False, disable_radix_cache=False)
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


def _install_context(ctx: dict[str, SimpleNamespace], drafts: int | None) -> None:
    """Point every imported release module's runtime-context getters at this case."""
    try:
        import sglang.srt.runtime_context as rc
    except ImportError:  # releases before 0.5.19 read everything from server_args
        return
    originals = {name: getattr(rc, name, None) for name in (*ctx, "max_speculative_num_draft_tokens")}
    for mod in list(sys.modules.values()):
        if not getattr(mod, "__name__", "").startswith("sglang"):
            continue
        for name, value in ctx.items():
            orig = originals.get(name)
            if orig is not None and getattr(mod, name, None) is orig:
                setattr(mod, name, (lambda v: lambda: v)(value))
        orig = originals["max_speculative_num_draft_tokens"]
        if orig is not None and getattr(mod, "max_speculative_num_draft_tokens", None) is orig:
            mod.max_speculative_num_draft_tokens = lambda: drafts
        # Keep the replaced getters recognisable for the next case.
    for name, value in ctx.items():
        if originals.get(name) is not None:
            setattr(rc, f"_oracle_{name}", value)


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

    ctx = _context(case)
    _install_context(ctx, ctx["get_spec"].max_speculative_num_draft_tokens)
    runner = _runner(case)
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
    return {"bytes_per_full_token": configurator.bytes_per_full_token, **sizes}


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
