"""Fixtures of the deployment-artefact tests: offline validation (no registry, no cluster); the
one test that builds and runs the image is tests/deploy/test_image.py."""

from __future__ import annotations

import functools
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from tests.support import require

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
K8S = DOCKER / "k8s"
COMPOSE_FILES = (DOCKER / "compose.yaml", DOCKER / "compose.real-sglang.yaml")
# The sidecar's in-container paths, shared by compose, Kubernetes and the probe image.
PROBE_DIR = "/var/run/dsv4-probe"
SIDECAR_UID = 65532
# Alert rules and dashboards select this scrape job (alerts/config.py `selector`).
SCRAPE_JOB = "dsv4-sidecar"
# Everything written to /metrics and the API; the tap's port.
METRICS_PORT, TAP_PORT, SGLANG_PORT = 9400, 9401, 30000
TAP_METRICS_PORT = 9402


def venv_tool(name: str) -> str:
    """A console script installed by the `dev` extra, next to this interpreter."""
    path = Path(sys.executable).parent / name
    if path.exists():
        return str(path)
    found = shutil.which(name)
    if found:
        return found
    pytest.fail(f"{name} is not installed: run `make venv` (it is in the dev extra)")


def run(args: list[str], cwd: Path | None = None, env: dict[str, str] | None = None):
    return subprocess.run(
        args, capture_output=True, text=True, timeout=60, cwd=cwd, env=env, check=False
    )


def kustomize_build(path: Path) -> list[dict[str, Any]]:
    """Render a kustomization with a real kustomize: PyPI's pykustomize (kustomize's Go API,
    installed by `make kustomize`), else `kubectl kustomize` where kubectl is on PATH. Missing
    both: tests.support.require's rule (a skip locally, a failure in CI)."""
    try:
        import asyncio

        import pykustomize
    except ImportError:
        res = run([require("kubectl"), "kustomize", str(path)])
        assert res.returncode == 0, res.stderr
        text = res.stdout
    else:
        text = asyncio.run(pykustomize.build(str(path))).yaml
    return [d for d in yaml.safe_load_all(text) if d]


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def load_yaml_all(path: Path) -> list[Any]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]


def load_generator() -> ModuleType:
    """docker/k8s/generate.py (a script, not a package module)."""
    spec = importlib.util.spec_from_file_location("dsv4_k8s_generate", K8S / "generate.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def k8s_manifest_files() -> list[Path]:
    """Every Kubernetes object file under docker/k8s (hand-written and generated)."""
    return sorted(p for p in K8S.rglob("*.yaml") if p.name != "kustomization.yaml")


@functools.cache
def k8s_objects() -> list[tuple[Path, dict[str, Any]]]:
    """(file, object) for every object, v1 Lists expanded. Cached: treat as read-only."""
    out = []
    for path in k8s_manifest_files():
        for doc in load_yaml_all(path):
            if doc.get("kind") == "List":
                out += [(path, item) for item in doc.get("items") or []]
            else:
                out.append((path, doc))
    return out


def compose(path: Path) -> dict[str, Any]:
    return load_yaml(path)


@pytest.fixture(scope="session")
def promtool() -> str:
    return require("promtool")


@pytest.fixture(scope="session")
def generator() -> ModuleType:
    return load_generator()
