"""``make gpu-bundle``: what a GPU machine without network needs for ``make gpu-check``.

The GPU machine has Python 3.12 with torch, nvidia-ml-py, prometheus-client and rich, and no
package index. Into ``.gpu-bundle/`` (ignored by git, carried to the machine):

* ``wheels/``: the sidecar's runtime dependencies (pyproject's ``dependencies``) and the two
  SGLang needs at import (``msgspec``, ``dill``), with their own dependencies, as CPython 3.12
  manylinux x86-64 wheels; torch and numpy are the machine's own and never carried;
* ``sglang-<version>.tar.xz``: each checked release's Python sources (``sglang/`` less the
  multimodal generator, tests and benchmarks, which the oracle never imports), from the same
  wheel cache the conformance tests use (tests/sglang_release.py).

``tests/gpu/unbundle.sh`` unpacks them there. The bundle is rebuilt only when missing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parents[2]
BUNDLE = REPO / ".gpu-bundle"
PLATFORMS = (
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux_2_28_x86_64",
    "manylinux_2_31_x86_64",
    "manylinux_2_34_x86_64",
    "manylinux1_x86_64",
)
NEVER_CARRIED = ("torch", "numpy", "nvidia")
EXTRA = ("msgspec", "dill")
SKIPPED_DIRS = ("sglang/multimodal_gen", "sglang/test", "sglang/benchmark")


def requirements() -> list[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return [*project["dependencies"], *EXTRA]


def download_wheels(dest: Path) -> list[str]:
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check"]
    cmd += ["--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp"]
    for tag in PLATFORMS:
        cmd += ["--platform", tag]
    subprocess.run([*cmd, "-d", str(dest), *requirements()], check=True, timeout=900)
    for wheel in dest.glob("*.whl"):
        if wheel.name.lower().startswith(NEVER_CARRIED):
            wheel.unlink()
    return sorted(w.name for w in dest.glob("*.whl"))


def pack_release(version: str, dest: Path) -> Path:
    from tests.sglang_release import release_dir

    src = release_dir(version)
    out = dest / f"sglang-{version}.tar.xz"
    if out.exists():
        return out
    excludes = [f"--exclude={d}" for d in SKIPPED_DIRS]
    subprocess.run(
        ["tar", "-C", str(src), "-I", "xz -T0 -6", *excludes, "-cf", str(out) + ".tmp", "sglang"],
        check=True,
        timeout=900,
    )
    Path(str(out) + ".tmp").rename(out)
    return out


def main() -> int:
    from tests.gpu.check import RELEASES

    sys.path.insert(0, str(REPO))
    BUNDLE.mkdir(exist_ok=True)
    manifest = BUNDLE / "MANIFEST.json"
    wheels = download_wheels(BUNDLE / "wheels")
    tars = [pack_release(v, BUNDLE).name for v in RELEASES]
    manifest.write_text(json.dumps({"wheels": wheels, "releases": tars}, indent=2))
    size = sum(f.stat().st_size for f in BUNDLE.rglob("*") if f.is_file())
    print(f"{BUNDLE}: {len(wheels)} wheels, {len(tars)} releases, {size / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
