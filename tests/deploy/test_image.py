"""The sidecar image, built (docker/image.py, cached on its inputs) and run the way users run it:
read-only root, non-root (65532), every capability dropped, a tmpfs /tmp, against the simulated
SGLang running on this machine (host network). Scraped: /readyz ready, the contract metrics, the
over-commit the footprint model predicts for the simulator's default deployment (legacy
configurator, bf16 index-K: ~4.3 GiB per rank), and the image's own HEALTHCHECK healthy with
the port given as `--port`. The probe image's layer is built on a stand-in for SGLang's image
(a Debian base with python3-pip: SGLang's image cannot be pulled here).

Needs podman (`make deb-image`); skipped without it locally, a failure in CI."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.metrics.catalog import CATALOG
from exporter.sim.deployment import SimDeployment
from exporter.sim.settings import SimSettings
from exporter.units import GIB
from tests.deploy.conftest import DOCKER, SIDECAR_UID
from tests.support import free_port, require, sample_value, wait_for

pytestmark = pytest.mark.e2e
MIB = 1 << 20
CLI = str(Path(sys.executable).parent / "dsv4-sidecar")


def _image_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dsv4_image", DOCKER / "image.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def image() -> tuple[ModuleType, dict]:
    require("podman")
    mod = _image_module()
    try:
        result = mod.build_all(os.environ.get("DSV4_IMAGE_BASE", "auto"), probe=True)
    except mod.ImageError as exc:
        pytest.fail(f"the image does not build: {exc}")
    return mod, result


@pytest.fixture(scope="module")
def simulator():
    port = free_port()
    proc = subprocess.Popen(
        [CLI, "simulate", "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: httpx.get(url + "/health", timeout=2).status_code == 200, timeout=60)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture(scope="module")
def container(image, simulator):
    mod, result = image
    port = free_port()
    name = f"dsv4-test-{os.getpid()}-{port}"
    env_file = DOCKER / "deployment.env"
    args = ["run", "--detach", "--name", name, "--network", "host", *mod.limits()]
    args += ["--read-only", "--user", f"{SIDECAR_UID}:{SIDECAR_UID}", "--cap-drop", "ALL"]
    args += ["--security-opt", "no-new-privileges", "--tmpfs", "/tmp:rw,size=16m,mode=1777"]
    args += ["--env-file", str(env_file), "--env", f"DSV4_SIDECAR_SGLANG_URL={simulator}"]
    args += ["--env", "DSV4_SIDECAR_GPU_BACKEND=fake", "--env", "DSV4_SIDECAR_CANARY=false"]
    # The port as an argument, not DSV4_SIDECAR_PORT: the HEALTHCHECK must follow it.
    args += [str(result["image"]), "serve", "--host", "127.0.0.1", "--port", str(port)]
    mod.podman(*args)
    url = f"http://127.0.0.1:{port}"
    try:
        yield mod, name, url
    finally:
        logs = mod.podman("logs", name, check=False)
        mod.podman("rm", "--force", "--time", "5", name, check=False)
        print(logs.stdout[-3000:], logs.stderr[-3000:])


def _truth() -> float:
    """The over-commit of the simulator's default deployment on rank 0, from the model."""
    return SimDeployment(SimSettings()).true_footprint(0).overcommit_bytes


def test_image_is_small_and_carries_the_inputs_label(image):
    mod, result = image
    assert result["size"] < 400 * 10**6, result
    assert mod.label(result["image"], mod.INPUTS_LABEL), "the cache key"
    hc = json.loads(
        mod.podman(
            "image", "inspect", "--format", "{{json .Config.Healthcheck}}", result["image"]
        ).stdout
    )
    assert hc["Test"] == ["CMD", "python", "-I", "-m", "exporter.healthcheck"]


def test_a_second_build_is_cached(image):
    mod, _ = image
    built, _ = mod.build(
        DOCKER / "Dockerfile",
        mod.IMAGE,
        {"BASE_IMAGE": image[1]["base"]},
        mod.wheelhouse(*mod.python_tags(image[1]["base"])),
    )
    assert built is False


def test_container_runs_locked_down_and_reports_the_overcommit(container):
    mod, name, url = container
    wait_for(lambda: httpx.get(url + "/readyz", timeout=2).status_code == 200, timeout=90)

    def overcommit() -> str | None:
        text = httpx.get(url + "/metrics", timeout=5).text
        return text if sample_value(text, "dsv4_kv_pool_overcommit_bytes", rank="0") else None

    text = wait_for(overcommit, timeout=90)
    families = {f.name for f in text_string_to_metric_families(text)}
    contract = {s.family_name for s in CATALOG.values()} & families
    assert len(contract) >= 18, sorted(contract)
    truth = _truth()
    assert 4.2 * GIB < truth < 4.5 * GIB
    measured = sample_value(text, "dsv4_kv_pool_overcommit_bytes", rank="0")
    assert measured is not None and abs(measured - truth) < 16 * MIB, (measured, truth)
    # As run: uid 65532, nothing writable but /tmp, no capabilities.
    ident = mod.podman("exec", name, "python", "-c", "import os; print(os.getuid())").stdout
    assert ident.strip() == str(SIDECAR_UID)
    ro = mod.podman("exec", name, "python", "-c", "open('/opt/x', 'w')", check=False)
    assert ro.returncode != 0 and "Read-only file system" in ro.stderr
    caps = mod.podman("exec", name, "grep", "CapEff", "/proc/self/status").stdout
    assert caps.split()[-1] == "0000000000000000", caps
    # Nothing of uvicorn[standard] the sidecar does not use; no pip in the final image.
    unused = "('watchfiles', 'websockets', 'pip')"
    code = f"import importlib.util as u; print([m for m in {unused} if u.find_spec(m)])"
    assert mod.podman("exec", name, "python", "-c", code).stdout.strip() == "[]"


def test_container_is_healthy_on_the_port_given_as_an_argument(container):
    mod, name, url = container
    wait_for(lambda: httpx.get(url + "/healthz", timeout=2).status_code == 200, timeout=90)
    # No systemd here to schedule the checks: run the image's HEALTHCHECK once, as it would.
    res = mod.podman("healthcheck", "run", name, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    state = mod.podman("inspect", "--format", "{{.State.Health.Status}}", name).stdout.strip()
    assert state == "healthy"


def test_probe_layer_installs_the_hook_into_the_stand_in(image):
    mod, result = image
    code = (
        "import os, sysconfig, exporter.probe.boot; "
        "print(os.path.isfile(os.path.join(sysconfig.get_paths()['purelib'], "
        "'dsv4_sidecar_probe.pth')), os.environ['DSV4_PROBE'])"
    )
    out = mod.podman("run", "--rm", *mod.limits(), "--network", "none", str(result["probe_image"]),
                     "python3", "-c", code).stdout  # fmt: skip
    assert out.split() == ["True", "1"]
