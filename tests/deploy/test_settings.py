"""The settings the artefacts hand the program are ones it accepts: every DSV4_SIDECAR_* variable
in compose and Kubernetes names a real setting and validates, and the simulator's compose
command parses with the real CLI. Catches a renamed setting or a typo before a pod does."""

from __future__ import annotations

import os
import re

import pytest

from exporter.cli import build_parser
from exporter.config import ENV_PREFIX, RENAMED, SidecarSettings
from exporter.config_loader import load_settings, settings_from_args
from exporter.sim.settings import SimSettings
from tests.deploy.conftest import COMPOSE_FILES, DOCKER, compose, k8s_objects

# Settings the artefacts pass for features still landing on other branches (none now: every
# variable the artefacts set must name a real setting).
PENDING: dict[str, str] = {}


def _interpolate(value: str) -> str:
    """Compose's ${VAR:-default} with VAR unset, as in the tests' environment."""
    return re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", value)


def _sidecar_envs() -> dict[str, dict[str, str]]:
    envs = {}
    for path in COMPOSE_FILES:
        svc = compose(path)["services"]["sidecar"]
        envs[path.name] = {k: _interpolate(str(v)) for k, v in svc["environment"].items()}
    for _, obj in k8s_objects():
        if obj["kind"] == "Deployment":
            for c in obj["spec"]["template"]["spec"]["containers"]:
                if c["name"] == "dsv4-sidecar":
                    # a value from a Secret stands in as a placeholder of the right kind
                    envs["k8s"] = {e["name"]: e.get("value", "from-secret") for e in c["env"]}
    assert len(envs) == 3
    return envs


@pytest.mark.parametrize("source", ["compose.yaml", "compose.real-sglang.yaml", "k8s"])
def test_sidecar_env_names_real_settings_and_validates(source, monkeypatch):
    env = _sidecar_envs()[source]
    ours = {k[len(ENV_PREFIX) :].lower(): v for k, v in env.items() if k.startswith(ENV_PREFIX)}
    assert ours, source
    # a former name of a renamed setting (exporter.config.RENAMED) is still a setting
    unknown = set(ours) - set(SidecarSettings.model_fields) - set(PENDING) - set(RENAMED)
    assert not unknown, f"{source}: no such setting: {sorted(unknown)}"
    for name in list(os.environ):
        if name.startswith(ENV_PREFIX):
            monkeypatch.delenv(name)
    for key, value in ours.items():
        if key in SidecarSettings.model_fields or key in RENAMED:
            monkeypatch.setenv(ENV_PREFIX + key.upper(), value)
    settings = load_settings()
    assert settings.port == 9400 and settings.server_url.startswith("http")


def test_simulator_command_parses_with_the_real_cli():
    cmd = compose(DOCKER / "compose.yaml")["services"]["sglang-sim"]["command"]
    args = build_parser().parse_args([str(c) for c in cmd])
    sim = settings_from_args(args, SimSettings)
    assert (sim.host, sim.port, sim.index_k_dtype, sim.hicache, sim.configurator) == (
        "0.0.0.0",
        30000,
        "bf16",
        "on",
        "legacy",
    )


def test_sidecar_command_parses_with_the_real_cli():
    for path in COMPOSE_FILES:
        cmd = compose(path)["services"]["sidecar"]["command"]
        assert build_parser().parse_args([str(c) for c in cmd]).command == "serve"


def _tap_containers() -> dict[str, tuple[list[str], dict[str, str]]]:
    """source -> (arguments, environment) of the tap's own container in each artefact."""
    out = {}
    for path in COMPOSE_FILES:
        svc = compose(path)["services"]["tap"]
        env = {k: _interpolate(str(v)) for k, v in svc["environment"].items()}
        out[path.name] = ([str(c) for c in svc["command"]], env)
    (tap,) = [
        c
        for _, obj in k8s_objects()
        if obj["kind"] == "Deployment"
        for c in obj["spec"]["template"]["spec"]["containers"]
        if c["name"] == "dsv4-tap"
    ]
    out["k8s"] = (tap["args"], {e["name"]: e["value"] for e in tap["env"]})
    return out


@pytest.mark.parametrize("source", ["compose.yaml", "compose.real-sglang.yaml", "k8s"])
def test_tap_container_env_is_what_dsv4_sidecar_tap_accepts(source, monkeypatch):
    """The tap's own container (`dsv4-sidecar tap`): every variable names one of its settings,
    and together they load (its command parses with the real CLI too)."""
    from exporter.tap_settings import TapSettings

    args, env = _tap_containers()[source]
    assert build_parser().parse_args(args).command == "tap"
    for name in list(os.environ):
        if name.startswith(ENV_PREFIX):
            monkeypatch.delenv(name)
    for key, value in env.items():
        assert key[len(ENV_PREFIX) :].lower() in TapSettings.model_fields, f"no such: {key}"
        monkeypatch.setenv(key, value)
    settings = load_settings(cls=TapSettings)
    assert settings.port == 9401 and settings.metrics_port == 9402
    host = "127.0.0.1" if source == "k8s" else "sidecar"
    assert settings.sidecar_url == f"http://{host}:9400"
