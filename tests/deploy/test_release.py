"""The release: one version (exporter/__init__.py) carried by the wheel, the image docker/image.py
tags and labels, and every Kubernetes manifest's image reference; the LICENSE and CHANGELOG; and
the artefacts of `make dist` (dist/: `make test` builds them before pytest), installed into a
clean venv and run: the CLI, and `serve` against `simulate`, scraped.

The clean venv gets the wheel with --no-deps and sees the dev venv's packages through a path
entry, not an index: offline and seconds, and the dependencies are not what this checks (the
image installs the hash-locked resolution of the same requirements, tests/deploy/test_image.py).
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
import tomllib
import yaml

import exporter
from exporter.sim.deployment import SimDeployment
from exporter.sim.settings import SimSettings
from tests.deploy.conftest import DOCKER, REPO, kustomize_build, venv_tool
from tests.support import sample_value, spawn_listening, unavailable, wait_for

DIST = REPO / "dist"
VERSION = exporter.__version__
MANIFEST_DIRS = (DOCKER / "k8s", DOCKER / "k8s-join", DOCKER / "k8s-multinode")
MIB = 1 << 20


def _image_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dsv4_image_release", DOCKER / "image.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


IMAGE = _image_module()


# --- one version ------------------------------------------------------------------------------


def test_the_version_is_set_once_and_read_by_the_build_and_the_image():
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    dynamic = project["tool"]["setuptools"]["dynamic"]["version"]
    assert dynamic == {"attr": "exporter.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", VERSION), VERSION
    assert IMAGE.version() == VERSION
    assert IMAGE.release_image() == f"ghcr.io/dsv4-sidecar/dsv4-sidecar:{VERSION}"
    # Neither Dockerfile restates it: its labels come from the build arguments image.py passes.
    for name in ("Dockerfile", "Dockerfile.sglang-probe"):
        args = re.findall(r"^ARG (VERSION|REVISION)=(\S+)$", (DOCKER / name).read_text(), re.M)
        assert dict(args) == {"VERSION": "unknown", "REVISION": "unknown"}, name


def _images(node: Any) -> list[str]:
    """Every ``image:`` string anywhere in a YAML document (containers, patches, lists)."""
    if isinstance(node, dict):
        found = [node["image"]] if isinstance(node.get("image"), str) else []
        return found + [i for v in node.values() for i in _images(v)]
    if isinstance(node, list):
        return [i for v in node for i in _images(v)]
    return []


def _sidecar(ref: str) -> bool:
    return ref.split("@")[0].rsplit(":", 1)[0].endswith("/dsv4-sidecar")


def test_every_manifest_names_the_image_make_image_tags():
    """The image every manifest pulls is the one `make image` tags (docker/image.py), so a pod
    does not go ImagePullBackOff on a tag nothing produces; kustomize's `images:` set the same."""
    wanted = IMAGE.release_image()
    refs: dict[str, list[str]] = {}
    for root in MANIFEST_DIRS:
        for path in sorted(root.rglob("*.yaml")):
            for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
                refs.setdefault(str(path.relative_to(REPO)), []).extend(
                    r for r in _images(doc) if _sidecar(r)
                )
                if path.name == "kustomization.yaml":
                    for entry in doc.get("images") or []:
                        if entry["name"] == IMAGE.REGISTRY_REPOSITORY:
                            assert entry == {"name": entry["name"], "newTag": VERSION}, path
    named = {path: sorted(set(r)) for path, r in refs.items() if r}
    # The packaged Deployment, the LeaderWorkerSet's two templates, the join Component's three
    # container patches: a manifest that dropped the sidecar would be caught elsewhere, one that
    # names another image here.
    assert named == {path: [wanted] for path in named}, named
    assert sum(len(r) for r in refs.values()) >= 6 and len(named) >= 5, named


@pytest.mark.parametrize("overlay", ["k8s", "k8s-multinode"])
def test_rendered_manifests_pull_the_image_make_image_tags(overlay):
    docs = kustomize_build(DOCKER / overlay)
    refs = {r for d in docs for r in _images(d) if _sidecar(r)}
    assert refs == {IMAGE.release_image()}


@pytest.mark.parametrize("kind", ["resources: [../k8s-multinode]", "components: [../k8s-join]"])
def test_an_overlay_pins_every_sidecar_container_by_digest(tmp_path, kind):
    """docs/deploy.md's recipe: one `images:` entry with newName and digest moves the packaged
    LeaderWorkerSet (and, through it, docker/k8s), and the join Component's patches of a
    Deployment and a LeaderWorkerSet, to the pushed image, by digest."""
    for name in ("k8s", "k8s-multinode", "k8s-join"):
        shutil.copytree(DOCKER / name, tmp_path / name)
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    join = REPO / "tests" / "deploy" / "join"
    workloads = ["deployment.yaml", "leaderworkerset.yaml"] if "join" in kind else []
    for name in workloads:
        shutil.copy(join / name, overlay / name)
    pushed = "registry.example.com/team/dsv4-sidecar@sha256:" + "1" * 64
    (overlay / "kustomization.yaml").write_text(
        f"{kind}\n"
        + (f"resources: {workloads}\n" if workloads else "")
        + "images:\n"
        + f"  - name: {IMAGE.REGISTRY_REPOSITORY}\n"
        + "    newName: registry.example.com/team/dsv4-sidecar\n"
        + f"    digest: sha256:{'1' * 64}\n"
    )
    docs = kustomize_build(overlay)
    refs = [(d["kind"], r) for d in docs for r in _images(d) if _sidecar(r)]
    assert {r for _, r in refs} == {pushed}
    kinds = sorted(k for k, _ in refs)
    assert kinds == (
        ["Deployment", "LeaderWorkerSet", "LeaderWorkerSet"]
        if workloads
        else ["LeaderWorkerSet", "LeaderWorkerSet"]
    ), kinds


def test_docs_name_the_image_at_this_version():
    """Documentation that spells out the image tag spells this version, or says `<version>` or
    `$VERSION` (set from exporter/__init__.py where the docs show a command)."""
    for path in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]:
        for tag in re.findall(
            r"ghcr\.io/dsv4-sidecar/dsv4-sidecar:([^\s`'\"@)]+)", path.read_text()
        ):
            assert tag == VERSION or tag in ("<version>", "$VERSION"), (path, tag)


def test_changelog_has_this_version_and_the_stability_policy():
    text = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    assert re.search(rf"^## {re.escape(VERSION)}\b", text, re.M), "no section for this version"
    policy = text.split("## Metric and label stability", 1)[1].split("\n## ", 1)[0]
    for needle in ("both", "DEPRECATED", "Deprecated", "Removed", "next minor"):
        assert needle in policy, needle


def test_license_is_the_apache_2_0_text_the_metadata_names():
    text = (REPO / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text and len(text) > 10_000
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert project["license"] == "Apache-2.0"
    assert 'org.opencontainers.image.licenses="Apache-2.0"' in (DOCKER / "Dockerfile").read_text()


# --- the image's labels and tags, without podman (the built image: test_image.py) ---------------


def _git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
    }
    env["GIT_COMMITTER_EMAIL"] = "t@t"
    res = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


def test_revision_is_head_and_dirty_only_for_what_the_image_holds(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    (repo / "exporter").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "exporter" / "x.py").write_text("a = 1\n")
    (repo / "tests" / "t.py").write_text("b = 1\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "one")
    head = _git(repo, "rev-parse", "HEAD")
    monkeypatch.setattr(IMAGE, "REPO", repo)
    assert IMAGE.revision() == head and re.fullmatch(r"[0-9a-f]{40}", head)
    (repo / "tests" / "t.py").write_text("b = 2\n")  # not in the image
    assert IMAGE.revision() == head
    (repo / "exporter" / "new.py").write_text("c = 1\n")  # untracked, but in the image
    assert IMAGE.revision() == f"{head}-dirty"
    monkeypatch.setattr(IMAGE, "REPO", tmp_path)  # not a checkout
    assert IMAGE.revision() == "unknown"


class FakePodman:
    """docker/image.py's podman calls, recorded; one image whose labels the test sets."""

    def __init__(self, labels: dict[str, str]) -> None:
        self.labels = labels
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, *args: str, check: bool = True, timeout: float = 0) -> Any:
        self.calls.append(args)
        return subprocess.CompletedProcess(args, 0, "", "")


@pytest.fixture
def fake(monkeypatch, tmp_path) -> FakePodman:
    podman = FakePodman({})
    monkeypatch.setattr(IMAGE, "podman", podman)
    monkeypatch.setattr(IMAGE, "image_id", lambda tag: "sha256:base")
    monkeypatch.setattr(IMAGE, "label", lambda tag, key: podman.labels.get(key))
    monkeypatch.setattr(IMAGE, "BUILD", tmp_path)
    return podman


def test_a_build_passes_version_and_revision_and_tags_the_manifests_name(fake, tmp_path):
    tags = (IMAGE.IMAGE, IMAGE.release_image())
    args = IMAGE.sidecar_args("localhost/base:x")
    built, _ = IMAGE.build(DOCKER / "Dockerfile", tags, args, tmp_path, "f" * 40)
    assert built
    (call,) = [c for c in fake.calls if c[0] == "build"]
    flags = list(itertools.pairwise(call))
    assert ("--build-arg", f"VERSION={VERSION}") in flags
    assert ("--build-arg", f"REVISION={'f' * 40}") in flags
    assert {v for k, v in flags if k == "--tag"} == set(tags)


def test_an_unchanged_image_is_restamped_with_the_revision_not_rebuilt(fake, tmp_path):
    tags = (IMAGE.IMAGE, IMAGE.release_image())
    args = IMAGE.sidecar_args("localhost/base:x")
    # The revision is not an input: the same inputs under a new commit reuse the image...
    fake.labels[IMAGE.INPUTS_LABEL] = IMAGE.inputs_of(DOCKER / "Dockerfile", args)
    fake.labels[IMAGE.REVISION_LABEL] = "a" * 40
    built, _ = IMAGE.build(DOCKER / "Dockerfile", tags, args, tmp_path, "b" * 40)
    assert not built
    # ...and only its label is set, by a build of FROM and LABEL, then the registry tag moved.
    (stamp,) = [c for c in fake.calls if c[0] == "build"]
    assert "--network" in stamp and stamp[stamp.index("--network") + 1] == "none"
    containerfile = Path(stamp[stamp.index("--file") + 1]).read_text()
    assert containerfile == f'FROM sha256:base\nLABEL {IMAGE.REVISION_LABEL}="{"b" * 40}"\n'
    assert ("tag", IMAGE.IMAGE, IMAGE.release_image()) in fake.calls
    # Same revision: nothing built at all.
    fake.calls.clear()
    fake.labels[IMAGE.REVISION_LABEL] = "b" * 40
    assert IMAGE.build(DOCKER / "Dockerfile", tags, args, tmp_path, "b" * 40) == (False, 0.0)
    assert not [c for c in fake.calls if c[0] == "build"]


# --- dist/: what `make dist` built --------------------------------------------------------------


def _tree_modules() -> dict[str, bytes]:
    return {
        str(p.relative_to(REPO)): p.read_bytes()
        for p in (REPO / "exporter").rglob("*.py")
        if "__pycache__" not in p.parts
    }


@pytest.fixture(scope="module")
def dist() -> tuple[Path, Path]:
    """dist/'s wheel and sdist, when they are this tree's (`make test` runs `make dist` first)."""
    wheels = sorted(DIST.glob("dsv4_sidecar-*.whl"))
    sdists = sorted(DIST.glob("dsv4_sidecar-*.tar.gz"))
    how = "`make dist` builds them"
    if len(wheels) != 1 or len(sdists) != 1:
        unavailable(f"dist/ holds {len(wheels)} wheels and {len(sdists)} sdists, not one each", how)
    with zipfile.ZipFile(wheels[0]) as zf:
        shipped = {
            n: zf.read(n) for n in zf.namelist() if n.startswith("exporter/") and n.endswith(".py")
        }
    if shipped != _tree_modules():
        unavailable("dist/ was built from another tree than this one", how)
    return wheels[0], sdists[0]


def test_dist_holds_a_pure_wheel_and_an_sdist_that_twine_accepts(dist):
    wheel, sdist = dist
    assert wheel.name == f"dsv4_sidecar-{VERSION}-py3-none-any.whl"
    assert sdist.name == f"dsv4_sidecar-{VERSION}.tar.gz"
    res = subprocess.run(
        [venv_tool("twine"), "check", "--strict", str(wheel), str(sdist)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        meta = zf.read(f"dsv4_sidecar-{VERSION}.dist-info/METADATA").decode()
        entry_points = zf.read(f"dsv4_sidecar-{VERSION}.dist-info/entry_points.txt").decode()
    assert f"dsv4_sidecar-{VERSION}.dist-info/licenses/LICENSE" in names
    assert "dsv4_sidecar_probe.pth" in names  # the probe's hook, at the top of site-packages
    assert f"\nVersion: {VERSION}\n" in meta and "\nLicense-Expression: Apache-2.0\n" in meta
    assert "Description-Content-Type: text/markdown" in meta
    # The command, and no GPU backend plugin: the simulator's `fake` is the development
    # install's only (setup.py); the dev venv declares it (tests/obs/test_layering.py).
    assert entry_points.split() == ["[console_scripts]", "dsv4-sidecar", "=", "exporter.cli:main"]
    with tarfile.open(sdist) as tf:
        members = {m.name.split("/", 1)[1] for m in tf.getmembers() if "/" in m.name}
    # What a build from the sdist needs, the C modules' sources included.
    assert {
        "LICENSE",
        "pyproject.toml",
        "setup.py",
        "exporter/dsml/_textscan.c",
        "exporter/samplers/tap/_relay.c",
    } <= members


@pytest.fixture(scope="module")
def installed(dist, tmp_path_factory) -> Path:
    """A venv of its own with the wheel installed; its bin directory. The dependencies come from
    the dev venv through a path entry appended after the venv's own site-packages (path entries
    in it are not processed, so the dev venv's editable exporter stays out)."""
    wheel, _ = dist
    venv = tmp_path_factory.mktemp("clean") / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    python = venv / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps",
         "--no-index", "--disable-pip-version-check", str(wheel)],
        check=True, capture_output=True, timeout=240,
    )  # fmt: skip
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True, timeout=60,
    ).stdout.strip()  # fmt: skip
    (Path(purelib) / "zz_dev_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv / "bin"


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("DSV4_", "SGLANG_", "PYTHON"))}


def _cli(bindir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(bindir / "dsv4-sidecar"), *args],
        capture_output=True, text=True, timeout=120, check=False, env=_clean_env(),
        cwd=bindir.parent,
    )  # fmt: skip


def test_installed_wheel_runs_the_cli_from_itself(installed):
    code = "import exporter, exporter.dsml as d; print(exporter.__file__, d.KERNEL)"
    where = subprocess.run(
        [str(installed / "python"), "-c", code],
        capture_output=True, text=True, timeout=60, check=True, env=_clean_env(),
        cwd=installed.parent,
    ).stdout.split()  # fmt: skip
    assert where[0].startswith(str(installed.parent / "lib")), where  # the wheel, not the tree
    assert where[1] == "python"  # a pure wheel: the reference grader
    version = _cli(installed, "--version")
    assert version.returncode == 0 and version.stdout.strip() == f"dsv4-sidecar {VERSION}"
    helped = _cli(installed, "--help")
    assert helped.returncode == 0 and "serve" in helped.stdout and "plan" in helped.stdout
    # the bf16 fork (plan prices upstream's fp8 unless the fork is named): ~4.3 GiB over-commit
    plan = _cli(installed, "plan", "--json", "--index-k-dtype", "bf16")
    assert plan.returncode == 0, plan.stderr
    # The same answer as the source tree's: the wheel carries the footprint rules' data files.
    tree = subprocess.run(
        [sys.executable, "-m", "exporter", "plan", "--json", "--index-k-dtype", "bf16"],
        capture_output=True, text=True, timeout=120, check=True, cwd=REPO, env=_clean_env(),
    )  # fmt: skip
    assert json.loads(plan.stdout) == json.loads(tree.stdout)
    assert json.loads(plan.stdout)["overcommit_bytes"] > 4 * 1024 * MIB


def test_installed_wheel_serves_the_simulated_sglang(installed):
    env = {**_clean_env(), "DSV4_SIDECAR_GPU_BACKEND": "fake", "DSV4_SIDECAR_CANARY": "false"}
    cli = str(installed / "dsv4-sidecar")

    def simulate(port: int) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [cli, "simulate", "--host", "127.0.0.1", "--port", str(port)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_clean_env(),
        )  # fmt: skip

    def health(port: int) -> bool:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200

    # The wheel declares no fake GPU backend: selecting it is refused, naming what is there;
    # the simulator's entry registers it for its one process.
    refused = _cli(
        installed, "serve", "--gpu-backend", "fake", "--sglang-url", "http://127.0.0.1:9"
    )
    assert refused.returncode != 0 and "'fake' is not installed (installed: nvml)" in refused.stderr
    sim, (sim_port,) = spawn_listening(simulate, health, timeout=90)

    def serve(port: int) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [str(installed / "python"), "-m", "exporter.sim.sidecar", "serve", "--host",
             "127.0.0.1", "--port", str(port), "--sglang-url", f"http://127.0.0.1:{sim_port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
            cwd=installed.parent,  # `-m` puts the working directory first: not this checkout
        )  # fmt: skip

    def ready(port: int) -> bool:
        return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200

    try:
        sidecar, (port,) = spawn_listening(serve, ready, timeout=90)
    except BaseException:
        sim.terminate()
        sim.wait(timeout=30)
        raise
    url = f"http://127.0.0.1:{port}"
    try:

        def overcommit() -> str | None:
            text = httpx.get(url + "/metrics", timeout=5).text
            return text if sample_value(text, "dsv4_kv_pool_overcommit_bytes", rank="0") else None

        text = wait_for(overcommit, timeout=90)
    finally:
        for proc in (sidecar, sim):
            proc.terminate()
            proc.wait(timeout=30)
    info = sample_value(text, "dsv4_sidecar_build_info", version=VERSION, dsml_kernel="python")
    assert info == 1, "the build-info metric says the wheel's version and kernel"
    truth = SimDeployment(SimSettings()).true_footprint(0).overcommit_bytes
    measured = sample_value(text, "dsv4_kv_pool_overcommit_bytes", rank="0")
    assert measured is not None and abs(measured - truth) < 16 * MIB, (measured, truth)
