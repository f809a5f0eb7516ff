"""The sidecar image `make image-probe` built (docker/image.py; `make test` runs it before pytest),
run the way users run it:
read-only root, non-root (65532), every capability dropped, a tmpfs /tmp, against the simulated
SGLang running on this machine (host network). Scraped: /readyz ready, the contract metrics, the
over-commit the footprint model predicts for the simulator's default deployment (legacy
configurator, bf16 index-K: ~4.3 GiB per rank), and the image's own HEALTHCHECK healthy with
the port given as `--port`. The probe image's layer is built on a stand-in for SGLang's image
(a Debian base with python3-pip: SGLang's image cannot be pulled here). Labelled with the
version and the git revision, and tagged as the Kubernetes manifests reference it.

Nothing is built here: a cold build takes minutes (7.5 on a loaded machine), past the per-test
timeout. Needs podman and images that are this tree's (tests.support.require / unavailable: a
skip locally, a failure in CI)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

import exporter
from exporter.metrics.catalog import CATALOG
from exporter.sim.deployment import SimDeployment
from exporter.sim.settings import SimSettings
from exporter.units import GIB
from tests.deploy.conftest import DOCKER, SIDECAR_UID
from tests.support import free_port, require, sample_value, unavailable, wait_for

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
    """The images as `make image-probe` left them, when they are this tree's (image.py's own
    check: built from these inputs, at this revision, under both tags)."""
    require("podman")
    mod = _image_module()
    problems = mod.stale(probe=True)
    if problems:
        unavailable("; ".join(problems), "`make image-probe` builds them")
    size = int(mod.podman("image", "inspect", "--format", "{{.Size}}", mod.IMAGE).stdout.strip())
    result = {"image": mod.IMAGE, "base": mod.label(mod.IMAGE, mod.BASE_LABEL), "size": size}
    return mod, {**result, "probe_image": mod.PROBE_IMAGE}


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
    args += ["--env-file", str(env_file), "--env", f"DSV4_SIDECAR_SERVER_URL={simulator}"]
    args += ["--env", "DSV4_SIDECAR_GPU_BACKEND=fake", "--env", "DSV4_SIDECAR_CANARY=false"]
    # The image declares no fake GPU backend (a production install): the simulator's entry
    # registers it and runs the CLI, as docker/compose.yaml does.
    args += ["--entrypoint", '["python", "-m", "exporter.sim.sidecar"]']
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
    mod, result = image
    built, _ = mod.build(
        DOCKER / "Dockerfile",
        (mod.IMAGE, mod.release_image()),
        mod.sidecar_args(result["base"]),
        mod.wheelhouse(*mod.python_tags(result["base"])),
        mod.revision(),
    )
    assert built is False


def test_image_is_labelled_with_the_version_and_revision_under_the_manifests_tag(image):
    mod, result = image
    assert mod.label(result["image"], mod.VERSION_LABEL) == exporter.__version__
    revision = mod.label(result["image"], mod.REVISION_LABEL)
    assert revision == mod.revision() and re.fullmatch(r"[0-9a-f]{40}(-dirty)?", revision)
    # The reference docker/k8s* pull (tests/deploy/test_release.py) is this very image.
    assert mod.image_id(mod.release_image()) == mod.image_id(result["image"])
    assert mod.label(result["probe_image"], mod.VERSION_LABEL) == exporter.__version__
    assert mod.label(result["probe_image"], mod.REVISION_LABEL) == revision


def test_a_new_revision_is_stamped_without_a_rebuild(image):
    """What `make image` does after a commit that changed nothing the image holds: the same
    layers under a new revision label, the HEALTHCHECK and the inputs label kept."""
    mod, result = image
    scratch = f"localhost/dsv4-sidecar:stamp-test-{os.getpid()}"
    mod.podman("tag", result["image"], scratch)
    try:
        mod.stamp_revision(scratch, "0" * 40)
        assert mod.label(scratch, mod.REVISION_LABEL) == "0" * 40
        assert mod.label(scratch, mod.INPUTS_LABEL) == mod.label(result["image"], mod.INPUTS_LABEL)
        layers = "{{json .RootFS.Layers}}"
        inspect = ["image", "inspect", "--format"]
        assert (
            mod.podman(*inspect, layers, scratch).stdout
            == mod.podman(*inspect, layers, result["image"]).stdout
        )
        hc = json.loads(mod.podman(*inspect, "{{json .Config.Healthcheck}}", scratch).stdout)
        assert hc["Test"] == ["CMD", "python", "-I", "-m", "exporter.healthcheck"]
        assert mod.label(result["image"], mod.REVISION_LABEL) == mod.revision()  # untouched
    finally:
        mod.podman("rmi", scratch, check=False)


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
