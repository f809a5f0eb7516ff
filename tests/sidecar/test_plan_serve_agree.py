"""`plan` and `serve` cannot disagree (issue 33): the same deployment pasted after `plan --` and
read by the sidecar from SGLang's /server_info (with SGLang's own token count: plan's) gives the
same model, settings, pools and device bytes on every stage, because both go through
``launch.resolve`` (one translation from what SGLang was told to pool settings)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from exporter.cli import main
from exporter.config_loader import load_settings
from exporter.sources.footprint import FootprintView
from exporter.sources.sglang import parse_server_info
from exporter.units import GIB

FIX = Path(__file__).parent.parent / "fixtures"

# (SGLang's server args as /server_info reports them, the SGLANG_* environment), each also
# written as the launch command an operator would paste.
DEPLOYMENTS = [
    ({"model_path": "deepseek-ai/DeepSeek-V4-Flash", "tp_size": 8}, {}),
    # The cookbook's quantised Flash: "pro" in "sgl-project" once made the sidecar price V4-Pro.
    ({"model_path": "sgl-project/DeepSeek-V4-Flash-FP8", "tp_size": 4}, {}),
    (
        {
            "model_path": "deepseek-ai/DeepSeek-V4-Flash",
            "tp_size": 8,
            "dp_size": 8,
            "enable_dp_attention": True,
            "max_running_requests": 1024,
            "speculative_algorithm": "EAGLE",
            "speculative_num_draft_tokens": 4,
        },
        {},
    ),
    (
        {
            "model_path": "deepseek-ai/DeepSeek-V4-Pro",
            "tp_size": 4,
            "pp_size": 2,
            "max_running_requests": 300,
            "speculative_algorithm": "EAGLE",
            "speculative_num_draft_tokens": 3,
        },
        {
            "SGLANG_PP_LAYER_PARTITION": "20,41",
            "SGLANG_OPT_USE_ONLINE_COMPRESS": "1",
            "SGLANG_EXPERIMENTAL_ONLINE_C128_MTP": "1",
        },
    ),
    (
        {
            "model_path": "deepseek-ai/DeepSeek-V4-Flash",
            "tp_size": 8,
            "enable_deepseek_v4_fp4_indexer": True,
        },
        {"SGLANG_DSV4_COMPRESS_STATE_DTYPE": "bfloat16"},
    ),
]


def _launch(args: dict[str, object], env: dict[str, str]) -> list[str]:
    argv = [f"{k}={v}" for k, v in sorted(env.items())]
    argv += ["python3", "-m", "sglang.launch_server"]
    for key, value in args.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            argv.append(flag)
        else:
            argv += [flag, str(value)]
    return argv


@pytest.mark.parametrize("version", ["0.5.16", "0.5.23"])
@pytest.mark.parametrize(("args", "env"), DEPLOYMENTS)
def test_plan_and_serve_give_the_same_footprint(capsys, version, args, env):
    budget = 48 * GIB + 4321
    code = main(
        [
            "plan",
            "--json",
            "--sglang-version",
            version,
            "--available-bytes",
            str(budget),
            "--",
            *_launch(args, env),
        ]
    )
    assert code == 0, capsys.readouterr().err
    planned = json.loads(capsys.readouterr().out)
    raw = json.loads((FIX / "sglang" / "server_info_v0.5.json").read_text())
    raw.update(args, version=version, max_total_num_tokens=planned["full_tokens"])
    raw["served_model_name"] = args["model_path"]
    view = FootprintView(load_settings({}), env=env)
    view.refresh(parse_server_info(raw), {}, {})
    assert view.status == "ok", view.detail
    assert view.geometry is not None and view.geometry.name == planned["model"]
    by_stage = {s["stage"]["pp_rank"]: s for s in planned["stages"]}
    assert {r.footprint.stage.pp_rank for r in view.ranks} == set(by_stage)
    for r in view.ranks:
        served = r.footprint.to_json()
        want = by_stage[r.footprint.stage.pp_rank]
        for key in ("model", "index_k_dtype", "full_tokens", "stage", "settings", "pools"):
            assert served[key] == want[key], key
        assert served["device_bytes"] == want["device_bytes"]


def _device_series(dtype: str | None) -> dict[str, float]:
    """The view's device-bytes series for rank 0, rendered as /metrics renders them."""
    from prometheus_client import CollectorRegistry, generate_latest

    from tests.support import sample_value

    raw = json.loads((FIX / "sglang" / "server_info_v0.5.json").read_text())
    raw.update(
        DEPLOYMENTS[0][0], version="0.5.23", served_model_name=DEPLOYMENTS[0][0]["model_path"]
    )
    view = FootprintView(load_settings({"index_k_dtype": dtype} if dtype else {}), env={})
    view.refresh(parse_server_info(raw), {}, {})
    assert view.status == "ok", view.detail
    registry = CollectorRegistry()
    registry.register(view)
    text = generate_latest(registry).decode()
    out = {}
    for measure in ("pytorch_allocated", "pytorch_reserved"):
        out[measure] = sample_value(text, "dsv4_kv_pool_device_bytes", rank="0", measure=measure)
    out["device_over"] = sample_value(text, "dsv4_kv_pool_device_overcommit_bytes", rank="0")
    out["tensor_over"] = sample_value(text, "dsv4_kv_pool_overcommit_bytes", rank="0")
    out["planned"] = view.ranks[0].footprint.planned_bytes
    out["tensors"] = sum(p.allocated_bytes for p in view.ranks[0].footprint.pools.values())
    return out


def test_device_bytes_series_follow_the_deployment():
    """dsv4_kv_pool_device_bytes sits above the tensors (the allocator's rounding), its
    over-commit is reserved minus planned, and both move with the index-K dtype: the bf16 fork
    adds ~4 GiB per rank that fp8 does not."""
    fp8, fork = _device_series(None), _device_series("bf16")
    for s in (fp8, fork):
        assert s["tensors"] < s["pytorch_allocated"] <= s["pytorch_reserved"]
        assert s["pytorch_reserved"] < s["tensors"] * 1.01  # rounding, not a pool
        assert s["device_over"] == s["pytorch_reserved"] - s["planned"]
        assert s["device_over"] > s["tensor_over"]
    assert fork["device_over"] - fp8["device_over"] > 3 * GIB
