"""`make demo` installs only what the demo runs: the package and its runtime dependencies, in
a venv of its own (the Makefile's `demo-venv`), not the test toolchain (torch, scipy). Checked
two ways: make's own plan for `make demo` on a fresh machine, and every module each process
of a real demo run imported (the demo, the simulator, the sidecar, the rules generator),
which must come from the standard library, this repository, or a distribution that the
package's runtime requirements pull in."""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.support import optional

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[1]
OWN = {"exporter", "alerts"}

# Written into a directory put first on PYTHONPATH: every Python process of the demo notes
# each top-level module this repository's code imports, as it imports it (a finder first on
# sys.meta_path that finds nothing), so the record is whole however the process ends (uvicorn
# re-raises SIGTERM). Imports made by installed libraries are theirs: a library's optional
# import (FastAPI's of orjson) finds the module here, in the test venv, and does without it in
# the demo's.
SITECUSTOMIZE = """
import json, os, sys

_out = os.environ["DSV4_TEST_MODULES_DIR"]
_repo = os.environ["DSV4_TEST_REPO"] + os.sep
_seen = set()


class _Recorder:
    @staticmethod
    def find_spec(name, path=None, target=None):
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename.startswith("<frozen"):
            frame = frame.f_back
        importer = frame.f_code.co_filename if frame is not None else ""
        top = name.partition(".")[0]
        if importer.startswith(_repo) and "site-packages" not in importer and top not in _seen:
            _seen.add(top)
            with open(os.path.join(_out, f"{os.getpid()}.txt"), "a") as f:
                f.write(top + "\\n")
        return None


with open(os.path.join(_out, f"{os.getpid()}.argv"), "w") as f:
    json.dump(sys.argv, f)
open(os.path.join(_out, f"{os.getpid()}.txt"), "a").close()
sys.meta_path.insert(0, _Recorder)
"""


def _records(directory: Path) -> list[tuple[list[str], set[str]]]:
    """(argv, top-level modules this repository's code imported) of every hooked process."""
    out = []
    for argv in directory.glob("*.argv"):
        names = argv.with_suffix(".txt").read_text(encoding="utf-8").split()
        out.append((json.loads(argv.read_text(encoding="utf-8")), set(names)))
    return out


def runtime_distributions() -> set[str]:
    """dsv4-sidecar's runtime requirements and theirs, transitively (no extras), as installed
    here: the distributions a plain `pip install dsv4-sidecar` brings."""
    seen: set[str] = set()
    todo = ["dsv4-sidecar"]
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        for spec in md.requires(name) or []:
            req = Requirement(spec)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return seen


def test_make_demo_installs_the_package_without_extras(tmp_path):
    """What make would run for `make demo` in a checkout without venvs: the demo's venv gets
    `pip install -e .` (runtime dependencies only) and the test venv is not made."""
    make = shutil.which("make")
    if make is None:
        pytest.skip("make not installed")
    plan = subprocess.run(
        [make, "-n", "demo", f"DEMO_VENV={tmp_path / 'demo'}", f"VENV={tmp_path / 'dev'}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert plan.returncode == 0, plan.stderr
    installs = [line for line in plan.stdout.splitlines() if "pip install" in line]
    assert any(line.endswith("pip install -q -e .") for line in installs), plan.stdout
    assert not [line for line in installs if "[" in line], installs  # no extras
    assert str(tmp_path / "dev") not in plan.stdout, "make demo must not build the test venv"
    assert f"{tmp_path / 'demo'}/bin/dsv4-sidecar demo" in plan.stdout


def test_demo_processes_import_only_runtime_dependencies(tmp_path):
    hook, modules = tmp_path / "hook", tmp_path / "modules"
    hook.mkdir()
    modules.mkdir()
    (hook / "sitecustomize.py").write_text(SITECUSTOMIZE, encoding="utf-8")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(hook), os.environ.get("PYTHONPATH", "")]),
        "DSV4_TEST_MODULES_DIR": str(modules),
        "DSV4_TEST_REPO": str(REPO),
    }
    argv = [sys.executable, "-m", "exporter", "demo", "--duration", "6", "--tp-size", "1"]
    argv += ["--levels", "1", "--level-seconds", "3"]
    with_prometheus = optional("prometheus") is not None
    if not with_prometheus:
        argv.append("--no-prometheus")
    run = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]

    records = _records(modules)
    roles = {
        "demo": lambda argv, mods: "demo" in argv,
        "simulate": lambda argv, mods: "simulate" in argv,
        "serve": lambda argv, mods: "serve" in argv,
    }
    if with_prometheus:
        roles["alerts.generate"] = lambda argv, mods: "alerts" in mods and "demo" not in argv
    for role, match in roles.items():
        assert [r for r in records if match(*r)], f"no module record of the {role} process"

    allowed = runtime_distributions()
    dists = md.packages_distributions()
    stdlib = set(sys.stdlib_module_names)
    foreign: dict[str, set[str]] = {}
    for argv, mods in records:
        for top in mods:
            if top in stdlib or top in OWN:
                continue
            owners = {canonicalize_name(d) for d in dists.get(top, [])}
            if not owners & allowed:
                foreign.setdefault(top, set()).add(" ".join(argv[:2]))
    assert not foreign, f"imported outside the runtime dependencies: {foreign}"


def test_runtime_dependencies_leave_out_the_test_toolchain():
    """The closure the check above allows is the light one (what the demo's venv installs)."""
    allowed = runtime_distributions()
    assert {"fastapi", "rich", "aiohttp", "prometheus-client"} <= allowed
    assert not allowed & {"torch", "scipy", "matplotlib", "pytest", "mypy"}, allowed
