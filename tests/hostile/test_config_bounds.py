"""Every value that could overflow downstream or contradicts another key stops `serve` at
start (issue 24 item 4): exit 2, a message naming the key, where it came from and the fix,
never a traceback and never a server that starts and fails later. Ports, intervals and
timeouts, sizes and counts, ratios, and the keys that contradict each other, each through
the real CLI."""

from __future__ import annotations

import subprocess
import sys

import pytest

from exporter.cli import main

SERVE = ["serve", "--gpu-backend", "fake", "--canary", "false", "--port", "0"]


@pytest.fixture(autouse=True)
def _never_serve(monkeypatch: pytest.MonkeyPatch) -> None:
    """A configuration that wrongly passes must fail the test, not start a server."""
    import uvicorn

    def refuse(*_a: object, **_k: object) -> None:
        raise AssertionError("the configuration was accepted and the server started")

    monkeypatch.setattr(uvicorn.Server, "run", refuse)
    monkeypatch.setattr(uvicorn.Config, "bind_socket", refuse)


CASES: list[tuple[list[str], str, str]] = [
    # (argv, key, a phrase of the reason)
    # intervals and timeouts: infinite, not a number, beyond what a sleep can take
    (["--sglang-poll-interval", "inf"], "sglang_poll_interval", "finite number"),
    (["--sglang-poll-interval", "nan"], "sglang_poll_interval", "finite number"),
    (["--nvml-poll-interval", "1e300"], "nvml_poll_interval", "less than or equal to 3600"),
    (["--nvml-timeout", "1e20"], "nvml_timeout", "less than or equal to 3600"),
    (["--sglang-timeout", "0"], "sglang_timeout", "greater than 0"),
    (["--canary-interval", "1e300"], "canary_interval", "less than or equal to 86400"),
    (["--canary-timeout", "-1"], "canary_timeout", "greater than 0"),
    (["--canary-long-interval", "inf"], "canary_long_interval", "finite number"),
    (["--probe-stale-after", "1e309"], "probe_stale_after", "finite number"),
    (["--tap-upstream-read-timeout", "1e9"], "tap_upstream_read_timeout", "86400"),
    # sizes and counts
    (["--ingest-max-bytes", str(10**23)], "ingest_max_bytes", "less than or equal to"),
    # below the batch `dsv4-sidecar tap` posts (4 MiB), every batch would be refused
    (["--ingest-max-bytes", str(1 << 20)], "ingest_max_bytes", "greater than or equal to 4194304"),
    (["--grading-queue-bytes", str(1 << 40)], "grading_queue_bytes", "less than or equal to"),
    (["--samples-max-bytes", str(1 << 40)], "samples_max_bytes", "less than or equal to"),
    (["--grading-queue", str(10**12)], "grading_queue", "less than or equal to"),
    (["--tap-queue", str(10**12)], "tap_queue", "less than or equal to"),
    (["--sample-text-cap", str(10**9)], "sample_text_cap", "less than or equal to"),
    (["--canary-max-tokens", str(10**12)], "canary_max_tokens", "less than or equal to"),
    (
        ["--canary-long-tokens-per-hour", str(10**15)],
        "canary_long_tokens_per_hour",
        "less than or equal to",
    ),
    (["--tap-sample-seed", "99999999999999999999"], "tap_sample_seed", "less than or equal"),
    # ports
    (["--port", "70000"], "port", "less than or equal to 65535"),
    (["--tap-port", "-1"], "tap_port", "greater than or equal to 0"),
    (["--port", "9400", "--tap-port", "9400"], "tap_port", "the sidecar's own port"),
    (
        ["--port", "9400", "--tap-port", "9400", "--tap-host", "127.0.0.1"],
        "tap_port",
        "the sidecar's own port",
    ),
    (["--tap-port", "9401", "--sglang-url", "https://sglang:30000"], "tap_port", "https://"),
    # ratios
    (["--tap-sample-rate", "1.5"], "tap_sample_rate", "less than or equal to 1"),
    (["--tap-sample-rate", "-0.1"], "tap_sample_rate", "greater than or equal to 0"),
    # ranks and nodes
    (["--node-rank", "3", "--nnodes", "2"], "node_rank", "not below nnodes 2"),
    (["--rank-map", "0,0"], "rank_map", "more than one rank"),
    (["--rank-map", "-1"], "rank_map", "must be in 0..1023"),
    (["--rank-map", "0,x"], "rank_map", "comma-separated list of GPU indices"),
    (["--nnodes", "0"], "nnodes", "greater than or equal to 1"),
]


@pytest.mark.parametrize(("argv", "key", "reason"), CASES, ids=[" ".join(c[0]) for c in CASES])
def test_refused_at_start_naming_key_and_fix(
    capsys: pytest.CaptureFixture[str], argv: list[str], key: str, reason: str
) -> None:
    try:
        rc = main(SERVE + argv)
    except SystemExit as exc:  # argparse's own errors
        rc = int(exc.code or 0)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert f"{key}:" in err and reason in err and "fix:" in err, err
    assert "flag --" in err, err  # where the value came from
    assert "Traceback" not in err


def test_contradiction_from_the_environment_names_the_variable(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DSV4_SIDECAR_NNODES", "2")
    monkeypatch.setenv("DSV4_SIDECAR_NODE_RANK", "2")
    assert main(SERVE) == 2
    err = capsys.readouterr().err
    assert "node_rank:" in err and "environment DSV4_SIDECAR_NODE_RANK" in err, err


def test_the_process_exits_2_without_a_traceback() -> None:
    """The same through a fresh interpreter: the installed entry point's process."""
    run = subprocess.run(
        [sys.executable, "-m", "exporter", *SERVE, "--sglang-poll-interval", "inf"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2, run.stderr
    assert "sglang_poll_interval" in run.stderr and "Traceback" not in run.stderr


SIM_CASES: list[tuple[list[str], str, str]] = [
    (["--available-gib", "inf"], "available_gib", "finite number"),
    (["--gpu-memory-gib", "1e308"], "gpu_memory_gib", "less than or equal to"),
    (["--itl-ms", "1e300"], "itl_ms", "less than or equal to"),
    (["--ttft-ms", "nan"], "ttft_ms", "finite number"),
    (["--seed", str(10**30)], "seed", "less than or equal to"),
    (["--max-running-requests", str(10**13)], "max_running_requests", "less than or equal to"),
    (["--port", "65536"], "port", "less than or equal to 65535"),
]


@pytest.mark.parametrize(
    ("argv", "key", "reason"), SIM_CASES, ids=[" ".join(c[0]) for c in SIM_CASES]
)
def test_simulator_refuses_at_start(
    capsys: pytest.CaptureFixture[str], argv: list[str], key: str, reason: str
) -> None:
    """The simulator's settings (`dsv4-sidecar simulate`, what `make demo` runs) too."""
    assert main(["simulate", "--port", "0", *argv]) == 2
    err = capsys.readouterr().err
    assert f"{key}:" in err and reason in err and "fix:" in err, err
    assert "Traceback" not in err
