"""``pip install dsv4-sidecar[probe]`` must put the probe's hook at the top of site-packages:
build the wheel from a copy of the sources and look inside."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from exporter.probe.install import PTH_NAME, pth_text
from tests.dsml.compiler import c_compiler

REPO = Path(__file__).resolve().parents[2]


def _build_wheel(tmp_path: Path, env: dict[str, str] | None = None) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(REPO / name, src / name)
    shutil.copytree(
        REPO / "exporter", src / "exporter", ignore=shutil.ignore_patterns("__pycache__", "*.so")
    )
    out = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(src)],
        check=True,
        capture_output=True,
        timeout=240,
        env={**os.environ, **(env or {})},
    )
    (wheel,) = out.glob("dsv4_sidecar-*.whl")
    return wheel


def test_wheel_ships_the_pth_at_its_root(tmp_path):
    wheel = _build_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        assert PTH_NAME in names  # top level: site.py only reads .pth files there
        assert zf.read(PTH_NAME).decode() == pth_text()
        record = next(n for n in names if n.endswith(".dist-info/RECORD"))
        assert any(
            line.startswith(f"{PTH_NAME},") for line in zf.read(record).decode().splitlines()
        )
        metadata = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "Provides-Extra: probe" in metadata
    assert "exporter/probe/boot.py" in names
    assert f"exporter/probe/{PTH_NAME}" in names  # what `python -m exporter.probe.install` copies
    # the DSML accelerator, built where there is a C compiler, and its type stub
    for module in ("_textscan",):
        assert f"exporter/dsml/{module}.pyi" in names
        if c_compiler():
            assert any(re.fullmatch(rf"exporter/dsml/{module}\..*\.so", n) for n in names), names


def test_probe_wheel_is_pure_python(tmp_path):
    """The probe image's wheel (DSV4_SIDECAR_NO_NATIVE=1) installs into any Python SGLang runs:
    no compiled module, tagged py3-none-any."""
    wheel = _build_wheel(tmp_path, {"DSV4_SIDECAR_NO_NATIVE": "1"})
    assert wheel.name.endswith("-py3-none-any.whl"), wheel.name
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
    assert PTH_NAME in names
    assert not [n for n in names if n.endswith(".so")], names


def test_sidecar_and_probe_start_up_never_import_torch_or_sglang():
    """The sidecar's import path and an activated probe (before SGLang imports its modules)
    must not pull torch or SGLang in: a finder that refuses both proves it."""
    code = """
import os, sys
class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "sglang"):
            raise ImportError("refused " + name)
sys.meta_path.insert(0, Refuse())
import exporter.metrics.catalog, exporter.sources.probe_files
from exporter.probe import boot
assert boot.activate({"DSV4_PROBE": "1"}) is not None
assert not [m for m in sys.modules if m.split(".")[0] in ("torch", "sglang")]
print("clean")
"""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert done.returncode == 0 and "clean" in done.stdout, done.stderr
