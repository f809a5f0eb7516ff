"""`dsv4-sidecar plan` end to end through the console entry point."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from exporter.cli import main
from exporter.footprint import NEWEST_RELEASE, RULES
from exporter.footprint.pools import BASE_POOLS
from exporter.units import GIB

REQUIRED = {
    "model",
    "index_k_dtype",
    "configurator",
    "bytes_per_full_token",
    "full_tokens",
    "pools",
    "planned_bytes",
    "allocated_bytes",
    "overcommit_bytes",
    "correct_full_tokens",
}


def _json(capsys, *argv):
    assert main(["plan", "--json", *argv]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1  # exactly one JSON object
    return json.loads(out)


def test_json_contract(capsys):
    # The README's deployment (bf16 fork, legacy pricing, 50 GiB) on the 0.5.15-0.5.20 rules.
    d = _json(capsys, "--sglang-version", "0.5.20", "--index-k-dtype", "bf16")
    assert d.keys() >= REQUIRED
    assert set(d["pools"]) == set(BASE_POOLS)  # the pools every release and stage has
    for p in d["pools"].values():
        assert {"tokens", "planned_bytes", "allocated_bytes"} <= p.keys()
    assert d["bytes_per_full_token"] == {"legacy": 7705.45, "fixed": 8356.45}
    assert d["full_tokens"] == 6_614_784 and d["correct_full_tokens"] == 6_099_456
    assert d["overcommit_bytes"] == d["allocated_bytes"] - d["planned_bytes"]
    assert sum(p["allocated_bytes"] for p in d["pools"].values()) == d["allocated_bytes"]
    assert d["rules"] == "0.5.15-0.5.20" and d["rules_verified"] is True
    assert round(d["overcommit_bytes"] / GIB, 2) == 4.34


def test_default_is_the_newest_release(capsys):
    d = _json(capsys, "--index-k-dtype", "fp8")
    assert (d["sglang_version"], d["rules"]) == (NEWEST_RELEASE, RULES[-1].name)
    assert d == _json(capsys, "--index-k-dtype", "fp8", "--sglang-version", NEWEST_RELEASE)


def test_newest_release_plan(capsys):
    d = _json(capsys, "--index-k-dtype", "fp8", "--sglang-version", "0.5.23")
    # SGLang 0.5.23's own plan for this deployment (tests/conformance checks it against the code).
    assert d["full_tokens"] == 7_192_320
    assert d["bytes_per_full_token"]["legacy"] == 7086.75


def test_fp4_on_nvidia_shows_reclaimable_bytes(capsys):
    d = _json(capsys, "--index-k-dtype", "fp4")
    assert round(d["planned_bytes"] / 1e9, 2) == 53.69
    assert round(d["allocated_bytes"] / 1e9, 2) == 51.28
    assert d["reclaimable_bytes"] == d["planned_bytes"] - d["allocated_bytes"]
    assert main(["plan", "--index-k-dtype", "fp4"]) == 0
    assert "UNDER-COMMIT" in capsys.readouterr().out


def test_newer_release_is_computed_and_marked_unverified(capsys):
    major, minor, _ = RULES[-1].last
    newer = f"{major}.{minor + 1}.2"
    d = _json(capsys, "--sglang-version", newer)
    assert d["rules"] == RULES[-1].name and d["rules_verified"] is False
    assert main(["plan", "--sglang-version", newer]) == 0
    assert "UNVERIFIED" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "switch"),
    [
        (["--hisparse-ratio", "2"], "hisparse"),
        (["--not-modelled", "trtllm-layout"], "trtllm-layout"),
        (["--not-modelled", "pd-decode-slots"], "pd-decode-slots"),
    ],
)
def test_not_modelled_switch_prints_no_number(capsys, argv, switch):
    assert main(["plan", *argv]) == 3
    out = capsys.readouterr().out
    assert f"not modelled: {switch}" in out and "GiB" not in out
    assert main(["plan", "--json", *argv]) == 3
    d = json.loads(capsys.readouterr().out)
    assert d["not_modelled"] == [switch] and "pools" not in d


@pytest.mark.parametrize("model", ["deepseek-v4-flash", "deepseek-v4-pro"])
@pytest.mark.parametrize("dtype", ["fp8", "bf16", "fp4"])
@pytest.mark.parametrize("spec", [[], ["--speculative"]])
def test_every_model_dtype_and_speculation(capsys, model, dtype, spec):
    legacy = _json(capsys, "--model", model, "--index-k-dtype", dtype, *spec)
    fixed = _json(
        capsys, "--model", model, "--index-k-dtype", dtype, "--configurator", "fixed", *spec
    )
    assert fixed["full_tokens"] == legacy["correct_full_tokens"]
    if dtype == "bf16":
        assert legacy["overcommit_bytes"] - fixed["overcommit_bytes"] > 1 * GIB
    if dtype == "fp8":
        assert legacy["full_tokens"] == fixed["full_tokens"]


def test_budget_from_gpu_memory(capsys):
    d = _json(
        capsys, "--gpu-memory-gib", "141", "--weights-gib", "80", "--mem-fraction-static", "0.88"
    )
    assert d["available_bytes"] == int(141 * GIB - 80 * GIB - 141 * GIB * 0.12)
    assert d["reserve_bytes"] == int(141 * GIB * 0.12)


@pytest.mark.parametrize(
    "argv",
    [
        ["--available-gib", "50", "--gpu-memory-gib", "80"],
        ["--gpu-memory-gib", "80"],
        ["--available-gib", "50", "--available-bytes", "10"],
        ["--available-gib", "-1"],
        ["--layer-range", "5"],
        ["--layer-range", "0:10", "--pp-size", "2"],
        ["--pp-size", "2", "--pp-rank", "2"],
        ["--model", "llama"],
        ["--mem-fraction-static", "0.8"],
        ["--", "--mem-fraction-static", "0.8", "--tp", "8"],
        ["--available-gib", "40", "--weights-gib", "20"],
        ["--swa-full-tokens-ratio", "1.5"],
        ["--sglang-version", "0.5.9"],
        ["--sglang-version", "latest"],
    ],
)
def test_invalid_combinations_exit_2_with_one_line(capsys, argv):
    assert main(["plan", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dsv4-sidecar plan: error:") and err.count("\n") == 1


def test_human_output_via_console_script():
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "exporter",
            "plan",
            "--sglang-version",
            "0.5.20",
            "--index-k-dtype",
            "bf16",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={"COLUMNS": "120", "PATH": ""},
    )
    assert r.returncode == 0, r.stderr
    assert "c4_index_k" in r.stdout and "OVER-COMMIT" in r.stdout and "6,099,456" in r.stdout
    assert "rules 0.5.15-0.5.20" in r.stdout


def test_fixed_verdict_is_ok(capsys):
    assert main(["plan", "--configurator", "fixed"]) == 0
    assert "OK: only the page-padding remainder" in capsys.readouterr().out


# --- SGLang's own vocabulary -----------------------------------------------------------------
DOCS_LAUNCH = [
    "python3",
    "-m",
    "sglang.launch_server",
    "--model-path",
    "deepseek-ai/DeepSeek-V4-Flash",
    "--tp",
    "8",
    "--dp",
    "8",
    "--enable-dp-attention",
    "--speculative-algorithm",
    "EAGLE",
    "--speculative-num-steps",
    "3",
    "--speculative-eagle-topk",
    "1",
    "--speculative-num-draft-tokens",
    "4",
    "--max-running-requests",
    "1024",
]


def test_launch_command_after_dashdash_is_resolved_as_sglang_does(capsys):
    d = _json(capsys, "--index-k-dtype", "fp8", "--", *DOCS_LAUNCH)
    r = d["resolved"]
    assert (r["attn_dp_size"], r["max_running_requests_per_worker"]) == (8, 1024 // 8)
    assert r["num_draft_tokens"] == 4 and d["settings"]["speculative"] is True
    # the same deployment in plan's own flags gives the same numbers
    flags = ["--tp", "8", "--dp", "8", "--enable-dp-attention", "--max-running-requests", "1024"]
    same = _json(capsys, "--index-k-dtype", "fp8", *flags, "--speculative-algorithm", "EAGLE")
    assert same["full_tokens"] == d["full_tokens"] and same["pools"] == d["pools"]


def test_page_size_is_forced_to_256_with_a_note(capsys):
    d = _json(capsys, "--page-size", "128")
    assert d["settings"]["page_size"] == 256
    assert any("--page-size 128 -> 256" in n for n in d["resolved"]["notes"])


def test_env_switches_change_the_footprint(capsys):
    plain = _json(capsys, "--speculative-algorithm", "EAGLE")
    online = _json(
        capsys,
        "--speculative-algorithm",
        "EAGLE",
        "--env",
        "SGLANG_OPT_USE_ONLINE_COMPRESS=1",
        "--env",
        "SGLANG_EXPERIMENTAL_ONLINE_C128_MTP=1",
    )
    assert online["settings"]["online_compress"] and not plain["settings"]["online_compress"]
    assert (
        online["pools"]["c128_state"]["allocated_bytes"]
        < plain["pools"]["c128_state"]["allocated_bytes"]
    )
    assert "c128_mtp_pending_lens" in online["pools"]


@pytest.mark.parametrize(
    ("argv", "check"),
    [
        (
            ["--speculative-algorithm", "EAGLE", "--speculative-num-draft-tokens", "11"],
            "_assert_ring_serves_draft_tokens",
        ),
        (
            ["--speculative", "--env", "SGLANG_OPT_USE_ONLINE_COMPRESS=1"],
            "DSV4PoolConfigurator.__init__",
        ),
        (["--swa-full-tokens-ratio", "0.0001", "--available-gib", "20"], "validate_swa_pool_size"),
        (["--sglang-version", "0.5.12", "--enable-deepseek-v4-fp4-indexer"], "add_cli_args"),
        (["--available-gib", "1"], "not enough memory"),
        (["--max-total-tokens", "100"], "not enough memory"),
    ],
)
def test_sglang_refusals_exit_4_naming_the_check(capsys, argv, check):
    """SGLang refusing the deployment is exit 4, apart from plan's own bad arguments (2)."""
    assert main(["plan", *argv]) == 4
    err = capsys.readouterr().err
    assert check in err and err.count("\n") == 1
    assert main(["plan", "--json", *argv]) == 4
    assert check in json.loads(capsys.readouterr().out)["refused"]["check"]


@pytest.mark.parametrize(
    "argv",
    [
        ["--env", "NOEQUALS"],
        ["--", "--pp", "2"],
        ["--speculative-algorithm", "MEDUSA"],
        ["--tp", "8", "--dp", "3", "--enable-dp-attention"],
    ],
)
def test_bad_launch_input_is_one_line_exit_2(capsys, argv):
    assert main(["plan", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("dsv4-sidecar plan: error:") and err.count("\n") == 1


# --- issue 33: upstream by default, every stage, the user cap, the budget ---------------------
def test_default_index_k_is_upstreams_fp8_with_no_false_over_commit(capsys):
    """Without flags plan prices upstream SGLang: fp8 index-K, only page padding unplanned.
    The bf16 fork is priced only when named (--index-k-dtype bf16 or its switch)."""
    d = _json(capsys, "--", "python3", "-m", "sglang.launch_server", "--tp", "8")
    assert d["index_k_dtype"] == "fp8"
    assert 0 <= d["overcommit_bytes"] < 0.05 * GIB
    fork = _json(capsys, "--env", "SGLANG_DSV4_BF16_INDEX_K=1")
    assert fork["index_k_dtype"] == "bf16" and fork["overcommit_bytes"] > 4 * GIB
    assert main(["plan", "--"]) == 0 and "OVER-COMMIT" not in capsys.readouterr().out


def test_every_pp_stage_is_sized_and_synced_to_the_smallest(capsys):
    """0.5.21 V4-Flash PP 4 at 37.7 GiB (issue 33): rank 0 alone holds 27,410,176 tokens;
    SGLang all-reduces the MIN (20,465,920, the figure its own code gives: tests/conformance)
    and re-sizes every stage to it. The human output prints every stage and the sync."""
    argv = ["--sglang-version", "0.5.21", "--available-gib", "37.7", "--pp-size", "4"]
    d = _json(capsys, *argv)
    assert d["pipeline"]["own_full_tokens"][0] == 27_410_176
    assert d["pipeline"]["full_tokens"] == min(d["pipeline"]["own_full_tokens"]) == 20_465_920
    assert [s["full_tokens"] for s in d["stages"]] == [20_465_920] * 4
    assert [s["stage"]["layers"] for s in d["stages"]] == [[0, 10], [10, 21], [21, 32], [32, 43]]
    assert d["full_tokens"] == 20_465_920 and d["stage"]["pp_rank"] == 0
    assert _json(capsys, *argv, "--pp-rank", "2")["stage"]["layers"] == [21, 32]
    assert main(["plan", *argv]) == 0
    out = capsys.readouterr().out
    assert out.count("PP ") >= 4 and "-> 20,465,920 on every stage" in out


def test_max_total_tokens_caps_every_pool(capsys):
    """40 GiB V4-Flash capped at 1M (issue 33): SGLang's 999,936 (page-aligned), not 5.7M."""
    d = _json(capsys, "--available-gib", "40", "--", "--max-total-tokens", "1000000")
    assert d["full_tokens"] == 999_936 and d["pipeline"]["own_full_tokens"] == [5_677_312]
    assert d["pools"]["c4_kv"]["tokens"] == 999_936 // 4
    assert d["allocated_bytes"] < 0.25 * d["available_bytes"]  # the cap leaves most unused


def test_mem_fraction_static_composes_with_an_explicit_budget(capsys):
    """A pasted launch's --mem-fraction-static with an explicit budget: the budget wins, and
    with --gpu-memory-gib the fraction gives the reserve; alone it derives the budget."""
    launch = ["--", "--mem-fraction-static", "0.85", "--tp", "8"]
    d = _json(capsys, "--available-gib", "50", "--gpu-memory-gib", "141", *launch)
    assert d["available_bytes"] == 50 * GIB
    assert d["reserve_bytes"] == int(141 * GIB * (1 - 0.85))
    d = _json(capsys, "--gpu-memory-gib", "141", "--weights-gib", "40", *launch)
    assert d["available_bytes"] == int(141 * GIB - 40 * GIB - 141 * GIB * 0.15)


@pytest.mark.parametrize(
    ("mrr", "version", "per_worker"), [("4", "0.5.22", 0), ("4", "0.5.23", 1), ("16", "0.5.16", 2)]
)
def test_requests_below_the_attention_dp_size_by_release(capsys, mrr, version, per_worker):
    flags = ["--tp", "8", "--dp", "8", "--enable-dp-attention", "--max-running-requests", mrr]
    d = _json(capsys, "--sglang-version", version, *flags)
    assert d["resolved"]["max_running_requests_per_worker"] == per_worker


def test_device_bytes_are_labelled_next_to_the_tensor_bytes(capsys):
    d = _json(capsys, "--index-k-dtype", "bf16")
    dev = d["device_bytes"]
    assert dev["tensors"] == d["allocated_bytes"]
    assert dev["tensors"] < dev["pytorch_allocated"] <= dev["pytorch_reserved"]
    assert dev["overcommit_reserved_bytes"] == dev["pytorch_reserved"] - d["planned_bytes"]
    assert main(["plan", "--index-k-dtype", "bf16"]) == 0
    out = capsys.readouterr().out
    assert "PyTorch's caching allocator" in out and "over-commit on reserved" in out


def test_a_model_path_is_matched_exactly_or_refused(capsys):
    d = _json(capsys, "--", "--model-path", "sgl-project/DeepSeek-V4-Flash-FP8")
    assert d["model"] == "deepseek-v4-flash"
    assert main(["plan", "--", "--model-path", "/home/prod/my-model"]) == 2
    assert "give --model" in capsys.readouterr().err


def test_v41_with_eagle_is_refused_not_left_unmodelled(capsys):
    """SGLang 0.5.21+ refuses DeepSeek-V4.1 with EAGLE (validate_deepseek_v41_features): plan
    says so (exit 4) rather than "not modelled: swa-cap-mode" (exit 3)."""
    from pathlib import Path

    cfg = Path(__file__).parent.parent / "fixtures" / "deepseek-v41-shaped.config.json"
    argv = ["plan", "--model", str(cfg), "--sglang-version", "0.5.23", "--speculative"]
    assert main(argv) == 4
    assert "validate_deepseek_v41_features" in capsys.readouterr().err
