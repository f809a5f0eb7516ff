"""Config errors from file, env and flag (issue 15, item 7): each exits 2 with a message that
names the key, where the value came from and the fix; none crashes or passes silently."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from exporter.cli import main
from exporter.config_loader import ConfigError, load_settings, unknown_env

SERVE = ["serve", "--gpu-backend", "fake", "--canary", "false", "--port", "0"]


@pytest.fixture(autouse=True)
def _never_serve(monkeypatch: pytest.MonkeyPatch) -> None:
    """A config that wrongly passes must fail the test, not start a server."""
    import uvicorn

    def refuse(*_a: object, **_k: object) -> None:
        raise AssertionError("the configuration was accepted and the server started")

    monkeypatch.setattr(uvicorn, "run", refuse)


def _fails(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """Run the real CLI in-process; it must exit 2 and say why on stderr."""
    try:
        rc = main(SERVE + argv)
    except SystemExit as exc:  # argparse errors
        rc = int(exc.code or 0)
    assert rc == 2
    return capsys.readouterr().err


def _assert_names(msg: str, *needles: str) -> None:
    for needle in needles:
        assert needle in msg, f"{needle!r} missing from: {msg}"
    assert "Traceback" not in msg


@pytest.mark.parametrize(
    ("argv", "needles"),
    [
        (["--log-level", "loud"], ["--log-level", "loud", "fix:", "debug"]),
        (
            ["--canary-prompts-file", "/nonexistent/prompts.json"],
            ["canary_prompts_file", "flag --canary-prompts-file", "No such file", "fix:"],
        ),
        (
            ["--model-preset", "nonsense"],
            ["model_preset", "flag --model-preset", "deepseek-v4-flash", "fix:"],
        ),
        (
            ["--samples-token-file", "/nonexistent/token"],
            ["samples_token_file", "flag --samples-token-file", "No such file", "fix:"],
        ),
        (["--redact-patterns", "secret[0-9"], ["redact_patterns", "not a valid regex", "fix:"]),
    ],
)
def test_bad_flags_exit_2_naming_key_origin_and_fix(capsys, argv, needles):
    _assert_names(_fails(capsys, argv), *needles)


def test_bad_fake_gpu_fault_script_is_the_plugins_own_setting(capsys, monkeypatch):
    """The fake backend's fault script is its own setting (DSV4_FAKE_GPU_FAULTS), not the
    sidecar's; a bad one still stops `serve` at start, naming the variable and the fix."""
    monkeypatch.setenv("DSV4_FAKE_GPU_FAULTS", "init=driver_not_loaded:x")
    msg = _fails(capsys, [])
    _assert_names(msg, "faults", "environment DSV4_FAKE_GPU_FAULTS", "fix:", "init=ERROR")


def test_invalid_prompts_file_content(capsys, tmp_path):
    bad = tmp_path / "prompts.json"
    bad.write_text('{"messages": "not a list"}\n[')
    msg = _fails(capsys, ["--canary-prompts-file", str(bad)])
    _assert_names(msg, "canary_prompts_file", str(bad), "fix:")


def test_empty_samples_token_file(capsys, tmp_path):
    empty = tmp_path / "token"
    empty.write_text("\n")
    _assert_names(
        _fails(capsys, ["--samples-token-file", str(empty)]), "samples_token_file", "empty"
    )


@pytest.mark.parametrize("key", ["INGEST_TOKEN", "SAMPLES_TOKEN"])
def test_empty_token_in_env_is_an_error_not_an_open_endpoint(capsys, monkeypatch, key):
    monkeypatch.setenv(f"DSV4_SIDECAR_{key}", "  ")
    msg = _fails(capsys, [])
    _assert_names(msg, key.lower(), f"environment DSV4_SIDECAR_{key}", "empty", "fix:")


def test_empty_token_in_file(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text('ingest_token: ""\n')
    with pytest.raises(ConfigError) as e:
        load_settings(None, f)
    _assert_names(str(e.value), "ingest_token", str(f), "fix:")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("secret[0-9]+", ["secret[0-9]+"]),  # the case: a traceback before
        ("[0-9]{16}", ["[0-9]{16}"]),  # starts like JSON, is a regex
        ('["a+", "b[0-9]"]', ["a+", "b[0-9]"]),
        ("one\ntwo", ["one", "two"]),
    ],
)
def test_redact_patterns_accept_a_plain_regex_or_a_list(monkeypatch, value, expected):
    monkeypatch.setenv("DSV4_SIDECAR_REDACT_PATTERNS", value)
    assert load_settings().redact_patterns == expected
    monkeypatch.delenv("DSV4_SIDECAR_REDACT_PATTERNS")
    assert load_settings({"redact_patterns": value}).redact_patterns == expected


def test_bad_redact_pattern_from_env_names_the_variable(monkeypatch):
    monkeypatch.setenv("DSV4_SIDECAR_REDACT_PATTERNS", "secret[0-9")
    with pytest.raises(ConfigError) as e:
        load_settings()
    _assert_names(str(e.value), "redact_patterns", "environment DSV4_SIDECAR_REDACT_PATTERNS")


def test_unknown_prefixed_variables_are_warned_with_the_closest_name(monkeypatch, caplog):
    monkeypatch.setenv("DSV4_SIDECAR_INGEST_TOKN", "x")
    monkeypatch.setenv("DSV4_SIDECAR_CACHE", "/tmp")  # not a setting, known not to be one
    with caplog.at_level(logging.WARNING, logger="exporter.config_loader"):
        load_settings()
    warned = [r.getMessage() for r in caplog.records]
    assert any("DSV4_SIDECAR_INGEST_TOKN" in w and "DSV4_SIDECAR_INGEST_TOKEN" in w for w in warned)
    assert not any("DSV4_SIDECAR_CACHE" in w for w in warned)
    from exporter.config import SidecarSettings

    assert unknown_env(SidecarSettings, {"DSV4_SIDECAR_PORT": "1", "OTHER": "2"}) == []


def test_help_shows_real_defaults(capsys):
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    out = capsys.readouterr().out
    assert "PydanticUndefined" not in out
    assert "DSV4_SIDECAR_REDACT_PATTERNS; default none" in " ".join(out.split())


def test_console_script_exit_code_and_no_traceback(tmp_path):
    """The same through a real process: exit status 2, one line, no traceback."""
    proc = subprocess.run(
        [sys.executable, "-m", "exporter", *SERVE, "--model-preset", "nonsense"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "DSV4_SIDECAR_REDACT_PATTERNS": "secret[0-9]+"},
        cwd=tmp_path,
    )
    assert proc.returncode == 2, proc.stderr
    _assert_names(proc.stderr, "model_preset", "fix:")


@pytest.mark.parametrize(
    ("argv", "needles"),
    [
        (
            ["--tap-port", "0", "--tap-sample-seed", "99999999999999999999"],
            ["tap_sample_seed", "flag --tap-sample-seed", "9223372036854775807", "fix:"],
        ),
        (
            ["--tap-port", "0", "--sglang-url", "https://127.0.0.1:30000"],
            ["tap_port", "plain HTTP", "http://", "fix:"],
        ),
        (["--ingest-token", "a b"], ["ingest_token", "b64token", "openssl rand", "fix:"]),
        (["--ingest-token", "tök"], ["ingest_token", "b64token", "fix:"]),
    ],
)
def test_values_that_would_crash_or_never_authenticate_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], needles: list[str]
) -> None:
    """Issue 24: an overflowing seed and an https SGLang behind the tap raised tracebacks; a
    token no client can send started a sidecar that answered 401 forever."""
    _assert_names(_fails(capsys, argv), *needles)


def test_a_token_with_surrounding_whitespace_is_stripped(monkeypatch: pytest.MonkeyPatch) -> None:
    """The usual result of `echo token > secret`: the trailing newline is not part of it."""
    monkeypatch.setenv("DSV4_SIDECAR_INGEST_TOKEN", "  s3cr3t-token\n")
    settings = load_settings()
    assert settings.ingest_token is not None
    assert settings.ingest_token.get_secret_value() == "s3cr3t-token"


def test_demo_refuses_a_tp_size_the_simulator_cannot_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 24: it raised RuntimeError('simulator exited with 2:') with a traceback; the
    simulator's own message (its settings hold the bound) now reaches the operator."""
    assert main(["demo", "--tp-size", "0", "--no-prometheus"]) == 2
    _assert_names(capsys.readouterr().err, "simulator exited", "tp_size", "--tp-size", "fix:")
