"""The architecture's import rules, checked on the source and on a running import.

- The simulator attaches from outside: no production module imports ``exporter.sim`` except
  the command that runs it (``exporter/cli/simulate.py``); its GPUs come in through the
  ``dsv4_sidecar.gpu_backends`` entry point (``exporter/sources/gpu_backends.py``).
- The pure cores (``footprint/``, ``dsml/``) import no I/O and no other part of the sidecar.
- ``torch`` is in no module of the sidecar's import path (only the probe, which runs inside
  SGLang, may use it).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from exporter.sources import gpu_backends

PKG = Path(__file__).resolve().parents[2] / "exporter"
MAY_IMPORT_SIM = {"cli/simulate.py"}
PURE = ("footprint", "dsml")
IO = {"aiohttp", "httpx", "socket", "urllib", "requests", "fastapi", "uvicorn", "pynvml", "torch"}


def _imports(path: Path) -> set[str]:
    """Every module a file imports, absolute (relative imports resolved against its package)."""
    package = ".".join(("exporter", *path.relative_to(PKG).parent.parts))
    return _imports_in(path.read_text(encoding="utf-8"), package)


def _imports_in(source: str, package: str) -> set[str]:
    tree = ast.parse(source)
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                mod = f"{base}.{node.module}" if node.module else base
            else:
                mod = node.module or ""
            out.add(mod)
            out.update(f"{mod}.{a.name}" for a in node.names)
    return out


def _production_files() -> list[Path]:
    return [p for p in PKG.rglob("*.py") if p.relative_to(PKG).parts[0] != "sim"]


def test_imports_are_resolved_for_the_check():
    """The scanner itself: it sees absolute, relative and from-package imports of sim."""
    source = "from ..sim import gpus\nfrom exporter import sim\nimport exporter.sim.x\n"
    found = _imports_in(source, "exporter.sources")
    assert {"exporter.sim.gpus", "exporter.sim", "exporter.sim.x"} <= found


def test_no_production_module_imports_the_simulator():
    offenders = {
        str(p.relative_to(PKG)): sorted(
            m for m in _imports(p) if m == "exporter.sim" or m.startswith("exporter.sim.")
        )
        for p in _production_files()
        if str(p.relative_to(PKG)) not in MAY_IMPORT_SIM
    }
    assert {k: v for k, v in offenders.items() if v} == {}


@pytest.mark.parametrize("core", PURE)
def test_pure_cores_do_no_io(core: str):
    for path in (PKG / core).rglob("*.py"):
        mods = _imports(path)
        assert not {m.split(".")[0] for m in mods} & IO, path
        outside = {
            m
            for m in mods
            if m.startswith("exporter.")
            and not m.startswith(
                (f"exporter.{core}", "exporter.stats", "exporter.units", "exporter.versions")
            )
        }
        assert not outside, (path, outside)


def test_serving_with_real_nvml_loads_neither_simulator_nor_torch():
    code = (
        "import sys, json\n"
        "from exporter.app import create_app\n"
        "from exporter.config_loader import load_settings\n"
        "import exporter.cli.serve\n"
        "create_app(load_settings({'canary': False}), env={})\n"
        "print(json.dumps(sorted(m for m in sys.modules "
        "if m.startswith('exporter.sim') or m.split('.')[0] == 'torch')))\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads(run.stdout.strip().splitlines()[-1]) == []


def test_the_simulator_is_a_gpu_backend_plugin():
    assert gpu_backends.installed() == ["nvml", "fake"]
    from exporter.sim.gpus import backend

    assert gpu_backends.load("fake") is backend


def test_an_unknown_backend_says_what_is_installed():
    with pytest.raises(gpu_backends.GpuBackendError, match=r"'amd' is not installed.*nvml, fake"):
        gpu_backends.load("amd")
