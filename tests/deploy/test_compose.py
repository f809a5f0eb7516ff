"""docker/compose.yaml (simulated SGLang) and docker/compose.real-sglang.yaml: the compose-spec
JSON schema bundled with check-jsonschema, a real compose implementation's `config` (Docker's
compose plugin, else Debian's docker-compose), and the properties the stacks rely on."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from tests.deploy.conftest import (
    COMPOSE_FILES,
    DOCKER,
    METRICS_PORT,
    PROBE_DIR,
    SGLANG_PORT,
    SIDECAR_UID,
    TAP_METRICS_PORT,
    TAP_PORT,
    compose,
    k8s_objects,
    run,
    venv_tool,
)
from tests.support import find, require

SIM = DOCKER / "compose.yaml"
REAL = DOCKER / "compose.real-sglang.yaml"
# The real variant requires the model's config.json path (a `${VAR:?}` interpolation).
REAL_ENV = {"DSV4_MODEL_CONFIG": "/models/DeepSeek-V4-Flash/config.json"}


# --- schema ----------------------------------------------------------------------------------


def test_compose_files_match_the_compose_spec_schema():
    res = run(
        [
            venv_tool("check-jsonschema"),
            "--builtin-schema",
            "vendor.compose-spec",
            *map(str, COMPOSE_FILES),
        ]
    )
    assert res.returncode == 0, res.stdout + res.stderr


def test_schema_check_rejects_an_unknown_key(tmp_path):
    """Negative control: the bundled schema is strict about service keys."""
    bad = tmp_path / "compose.yaml"
    bad.write_text("services:\n  a:\n    image: x:1\n    read_onyl: true\n", encoding="utf-8")
    res = run([venv_tool("check-jsonschema"), "--builtin-schema", "vendor.compose-spec", str(bad)])
    assert res.returncode != 0 and "read_onyl" in res.stdout + res.stderr


# --- a compose implementation's own validation -----------------------------------------------


def _compose_cli() -> tuple[str, list[str]]:
    docker = find("docker")
    if docker:
        probe = subprocess.run(
            [docker, "compose", "version"], capture_output=True, timeout=30, check=False
        )
        if probe.returncode == 0:
            return "v2", [docker, "compose"]
    # No plugin: Debian's docker-compose (tests.support.require: a skip locally, CI fails).
    return "v1", [require("docker-compose")]


@pytest.fixture(scope="module")
def compose_config():
    """Run `<compose> -f FILE config` the way a user would; returns a function of (file, env)
    giving the CompletedProcess."""
    _kind, cli = _compose_cli()

    def config(path: Path, extra_env: dict[str, str] | None = None):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DSV4_", "SGLANG_"))}
        env.update(extra_env or {})
        return run([*cli, "-f", path.name, "config"], cwd=DOCKER, env=env)

    return config


@pytest.mark.parametrize(("path", "env"), [(SIM, {}), (REAL, REAL_ENV)], ids=["sim", "real"])
def test_compose_implementation_accepts_the_files(compose_config, path, env):
    res = compose_config(path, env)
    assert res.returncode == 0, res.stdout + res.stderr
    services = yaml.safe_load(res.stdout)["services"]
    assert {"sidecar", "tap", "ingest-token", "prometheus", "grafana"} <= set(services)
    # compose.real-sglang.yaml extends Prometheus and Grafana from compose.yaml: the resolved
    # services carry the base's mounts.
    assert any(
        "/etc/prometheus/prometheus.yml" in str(v) for v in services["prometheus"]["volumes"]
    )
    assert any("/etc/grafana/provisioning" in str(v) for v in services["grafana"]["volumes"])


def test_no_top_level_name():
    """Debian's docker-compose 1.29 (what `make deb-test` installs without Docker's plugin)
    fails on a top-level `name:`; the files ship without one and users pass -p."""
    for path in COMPOSE_FILES:
        assert "name" not in compose(path), path
        assert " -p dsv4-sidecar" in path.read_text(encoding="utf-8"), path


def test_real_variant_demands_the_model_config(compose_config):
    res = compose_config(REAL)
    assert res.returncode != 0
    assert "DSV4_MODEL_CONFIG" in res.stdout + res.stderr


# --- what the stacks rely on ---------------------------------------------------------------


def _env(service: dict[str, Any]) -> dict[str, str]:
    env = dict(service.get("environment") or {})
    for name in [service["env_file"]] if isinstance(service.get("env_file"), str) else []:
        for line in (DOCKER / name).read_text(encoding="utf-8").splitlines():
            if line.strip() and not line.startswith("#"):
                key, _, value = line.partition("=")
                env.setdefault(key.strip(), value.strip())
    return {k: str(v) for k, v in env.items()}


def _ours(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Services that run the sidecar image (the sidecar, and the simulator)."""
    return {n: s for n, s in doc["services"].items() if str(s.get("image", "")).startswith("dsv4-")}


def _resolved(path: Path) -> dict[str, dict[str, Any]]:
    """The services of ``path`` with ``extends`` applied (one level, as the files use it)."""
    services = compose(path)["services"]
    out = {}
    for name, svc in services.items():
        ext = svc.get("extends")
        if ext:
            svc = {**compose(DOCKER / ext["file"])["services"][ext["service"]], **svc}
            del svc["extends"]
        out[name] = svc
    return out


def _one_shot(svc: dict[str, Any]) -> bool:
    """A container that runs to completion (the token writer): no restart policy, no probe."""
    return svc.get("healthcheck") == {"disable": True}


def _volume_mounts(svc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """target -> {source, read_only} of a service's named-volume mounts (both syntaxes)."""
    out = {}
    for vol in svc.get("volumes", []):
        if isinstance(vol, dict):
            if vol["type"] == "volume":
                out[vol["target"]] = {"source": vol["source"], "read_only": vol["read_only"]}
        elif not vol.startswith((".", "/", "$")):
            source, target, *mode = vol.split(":")
            out[target] = {"source": source, "read_only": mode == ["ro"]}
    return out


@pytest.mark.parametrize("path", COMPOSE_FILES, ids=lambda p: p.name)
def test_our_containers_are_locked_down(path):
    ours = _ours({"services": _resolved(path)})
    assert {"sidecar", "tap", "ingest-token"} <= set(ours)
    for name, svc in ours.items():
        assert svc["user"] == f"{SIDECAR_UID}:{SIDECAR_UID}", name
        assert svc["read_only"] is True, name
        assert svc["cap_drop"] == ["ALL"], name
        assert "no-new-privileges:true" in svc["security_opt"], name
        assert svc["build"] == {"context": "..", "dockerfile": "docker/Dockerfile"}, name
        if _one_shot(svc):
            # its one writable place is the token volume, mounted where the image has /tmp
            assert _volume_mounts(svc) == {"/tmp": {"source": "ingest-token", "read_only": False}}
            assert "restart" not in svc and svc["network_mode"] == "none", name
            continue
        assert "/tmp" in svc["tmpfs"], f"{name}: the image's only writable path"
        assert svc["healthcheck"]["test"][0] == "CMD", name
        assert svc["restart"] == "unless-stopped", name
        # the token volume is written by the one-shot only
        assert all(m["read_only"] for m in _volume_mounts(svc).values()), name


@pytest.mark.parametrize("path", COMPOSE_FILES, ids=lambda p: p.name)
def test_no_service_is_privileged_or_exposed_beyond_loopback(path):
    for name, svc in compose(path)["services"].items():
        assert not svc.get("privileged"), name
        assert svc.get("network_mode") != "host" and svc.get("pid") != "host", name
        uid = str(svc.get("user", "")).split(":")[0]
        if "extends" not in svc:
            assert uid and uid not in ("0", "root"), f"{name} runs as a non-root user"
        for port in svc.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name}: {port} (no auth in this stack)"


def test_sim_stack_wiring():
    services = compose(SIM)["services"]
    sim, sidecar = services["sglang-sim"], services["sidecar"]
    cmd = sim["command"]
    assert cmd[0] == "simulate"
    flags = dict(zip(cmd[1::2], cmd[2::2], strict=True))
    assert flags["--host"] == "0.0.0.0" and flags["--port"] == str(SGLANG_PORT)
    # The deployment the sidecar is built to catch: bf16 index-K, HiCache, legacy configurator.
    assert flags["--index-k-dtype"] == "bf16"
    assert flags["--hicache"] == "on" and flags["--configurator"] == "legacy"
    env = _env(sidecar)
    assert env["DSV4_SIDECAR_SERVER_URL"] == f"http://sglang-sim:{SGLANG_PORT}"
    assert env["DSV4_SIDECAR_GPU_BACKEND"] == "fake"
    # The switch a real pod shares with SGLang agrees with the simulated deployment.
    assert env["SGLANG_DSV4_BF16_INDEX_K"] == "1"
    assert sidecar["command"] == ["serve"]
    # the image declares no fake GPU backend: the simulator's entry registers it
    assert sidecar["entrypoint"] == ["python", "-m", "exporter.sim.sidecar"]
    assert sidecar["depends_on"]["sglang-sim"]["condition"] == "service_healthy"
    assert sidecar["ports"] == [f"127.0.0.1:{METRICS_PORT}:{METRICS_PORT}"]
    assert "/health" in " ".join(sim["healthcheck"]["test"])
    assert "/healthz" in " ".join(sidecar["healthcheck"]["test"])
    tap = services["tap"]
    assert _env(tap)["DSV4_SIDECAR_SERVER_URL"] == f"http://sglang-sim:{SGLANG_PORT}"
    assert tap["depends_on"]["sglang-sim"]["condition"] == "service_healthy"


@pytest.mark.parametrize("path", COMPOSE_FILES, ids=lambda p: p.name)
def test_tap_is_its_own_service_sharing_a_token_file_with_the_sidecar(path):
    """Issue 31: the request path runs as `dsv4-sidecar tap` in a container of its own (as the
    Kubernetes pod's dsv4-tap), limited on its own, posting samples to the sidecar's ingest
    with a token both read from a file on a volume the one-shot ingest-token service writes;
    no token value in any environment."""
    services = _resolved(path)
    sidecar, tap, init = services["sidecar"], services["tap"], services["ingest-token"]
    e, se = _env(tap), _env(sidecar)
    assert tap["command"] == ["tap"] and "entrypoint" not in tap
    assert "DSV4_SIDECAR_TAP_PORT" not in se, "no second tap in the sidecar's process"
    assert e["DSV4_SIDECAR_PORT"] == str(TAP_PORT)
    assert e["DSV4_SIDECAR_METRICS_PORT"] == str(TAP_METRICS_PORT)
    assert e["DSV4_SIDECAR_SIDECAR_URL"] == f"http://sidecar:{METRICS_PORT}"
    assert e["DSV4_SIDECAR_SERVER_URL"] == se["DSV4_SIDECAR_SERVER_URL"]
    assert tap["ports"] == [
        f"127.0.0.1:{TAP_PORT}:{TAP_PORT}",
        f"127.0.0.1:{TAP_METRICS_PORT}:{TAP_METRICS_PORT}",
    ]
    assert f":{TAP_METRICS_PORT}/metrics" in " ".join(tap["healthcheck"]["test"])
    # one token file, on the volume the one-shot writes, read-only in both readers
    token = PurePosixPath(e["DSV4_SIDECAR_INGEST_TOKEN_FILE"])
    assert str(token) == se["DSV4_SIDECAR_INGEST_TOKEN_FILE"]
    for reader in (tap, sidecar):
        assert _volume_mounts(reader)[str(token.parent)] == {
            "source": "ingest-token",
            "read_only": True,
        }
        assert reader["depends_on"]["ingest-token"]["condition"] == (
            "service_completed_successfully"
        )
    assert init["entrypoint"] == ["python", "-I", "-m", "exporter.tokenfile"]
    (written,) = init["command"]
    (volume_at,) = _volume_mounts(init)
    assert PurePosixPath(written) == PurePosixPath(volume_at) / token.name
    assert "ingest-token" in compose(path)["volumes"]
    for name, svc in services.items():
        assert not any("INGEST_TOKEN" in k and "FILE" not in k for k in _env(svc)), name
    # limited as the Kubernetes containers are
    for svc, container in ((tap, "dsv4-tap"), (sidecar, "dsv4-sidecar")):
        res = _k8s_resources(container)
        assert float(svc["cpus"]) == _cpu(res["limits"]["cpu"]), container
        assert _bytes(svc["mem_limit"]) == _bytes(res["limits"]["memory"]), container
        assert _bytes(svc["mem_reservation"]) == _bytes(res["requests"]["memory"]), container


def _k8s_resources(name: str) -> dict[str, dict[str, str]]:
    (c,) = [
        c
        for _, obj in k8s_objects()
        if obj["kind"] == "Deployment"
        for c in obj["spec"]["template"]["spec"]["containers"]
        if c["name"] == name
    ]
    return c["resources"]


def _cpu(quantity: str) -> float:
    return float(quantity[:-1]) / 1000 if quantity.endswith("m") else float(quantity)


def _bytes(quantity: str) -> int:
    """A Kubernetes binary quantity (64Mi, 1Gi) or a compose size (64m, 1g: binary too)."""
    for suffix, shift in (("Ki", 10), ("Mi", 20), ("Gi", 30), ("k", 10), ("m", 20), ("g", 30)):
        if quantity.endswith(suffix):
            return int(quantity[: -len(suffix)]) << shift
    return int(quantity)


def test_real_stack_wiring():
    services = compose(REAL)["services"]
    assert "sglang-sim" not in services
    sidecar = services["sidecar"]
    env = _env(sidecar)
    assert env["DSV4_SIDECAR_GPU_BACKEND"] == "nvml"
    assert env["DSV4_SIDECAR_SERVER_URL"].startswith("${SGLANG_URL:-http")
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
    assert env["DSV4_SIDECAR_PROBE_DIR"] == PROBE_DIR
    (gpus,) = sidecar["deploy"]["resources"]["reservations"]["devices"]
    assert gpus["driver"] == "nvidia" and "utility" in gpus["capabilities"]
    mounts = sidecar["volumes"]
    model = next(m for m in mounts if isinstance(m, dict))
    assert model["target"] == env["DSV4_SIDECAR_MODEL_CONFIG_PATH"] and model["read_only"]
    assert f"{PROBE_DIR}:ro" in " ".join(m for m in mounts if isinstance(m, str))
    for name in ("prometheus", "grafana"):
        assert services[name]["extends"] == {"file": "compose.yaml", "service": name}


def test_env_file_exists_and_only_holds_sglang_switches():
    for path in COMPOSE_FILES:
        for name, svc in compose(path)["services"].items():
            if "env_file" in svc:
                assert (DOCKER / svc["env_file"]).is_file(), name
    env = _env({"env_file": "deployment.env"})
    assert env and all(k.startswith("SGLANG_") for k in env), env
