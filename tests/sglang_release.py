"""SGLang's (and vLLM's) released code as a test oracle: fetch a release's wheel once, keep its
Python sources.

The sidecar's footprint model and DSML grader restate what SGLang does; agreeing with our own
simulator proves little, so conformance tests run SGLang's *released* pure-Python code. This
module only fetches and unpacks: ``pip download --no-deps sglang==X`` (the registry the machine
is set up with), then the ``sglang/`` package's ``.py`` files are extracted into
``~/.cache/dsv4-sidecar/sglang/<version>/`` (``DSV4_SIDECAR_CACHE`` overrides the root). Native
modules are never loaded from it: callers stub what they need in ``sys.modules`` and import
the released modules with the returned directory on ``sys.path`` (one release per process;
run several releases in subprocesses). vLLM's wheels are fetched the same way
(``package="vllm"``, cached under ``.../dsv4-sidecar/vllm/<version>/``): only their ``.py``
files are kept, its compiled extensions never leave the wheel.

A failed download fails the test with pip's message: the oracle is part of ``make test``, and
a skipped oracle would let a wrong model pass silently.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# The wheels are built per CPython version and platform, but only their Python sources are used.
# Pinning the tags lets any interpreter or architecture fetch the same files.
_WHEEL_TAGS = [
    "--only-binary=:all:",
    "--python-version",
    "3.11",
    "--implementation",
    "cp",
    "--platform",
    "manylinux_2_34_x86_64",
]
# vLLM publishes abi3 wheels tagged manylinux_2_28 (older: manylinux1); pip needs each tag named.
_PLATFORM_TAGS = {
    "vllm": ["--platform", "manylinux_2_28_x86_64", "--platform", "manylinux1_x86_64"]
}


def cache_root(package: str = "sglang") -> Path:
    root = os.environ.get("DSV4_SIDECAR_CACHE")
    base = Path(root) if root else Path.home() / ".cache" / "dsv4-sidecar"
    return base / package


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Serialise fetches of one release across processes (pytest workers, parallel runs)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _download(version: str, dest: Path, package: str) -> Path:
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--disable-pip-version-check",
        "-q",
        *_WHEEL_TAGS,
        *_PLATFORM_TAGS.get(package, []),
        "-d",
        str(dest),
        f"{package}=={version}",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    wheels = sorted(dest.glob(f"{package}-*.whl"))
    if proc.returncode != 0 or not wheels:
        raise RuntimeError(
            f"could not download {package}=={version} ({' '.join(cmd)}): "
            f"{proc.stderr.strip()[-2000:] or 'no wheel produced'}"
        )
    return wheels[0]


def _extract_sources(wheel: Path, dest: Path, package: str) -> None:
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            if name.startswith(f"{package}/") and name.endswith(".py"):
                zf.extract(name, dest)


def release_dir(version: str, package: str = "sglang") -> Path:
    """The directory to put on ``sys.path`` so ``import <package>`` finds release ``version``.

    Idempotent and safe under concurrency: a complete tree is marked by ``.complete`` and
    built in a temporary directory that is renamed into place.
    """
    root = cache_root(package)
    target = root / version
    if (target / ".complete").exists():
        return target
    with _locked(root / f".{version}.lock"):
        if (target / ".complete").exists():
            return target
        with tempfile.TemporaryDirectory(dir=root) as tmp:
            tmp_path = Path(tmp)
            wheel = _download(version, tmp_path / "dl", package)
            tree = tmp_path / "tree"
            _extract_sources(wheel, tree, package)
            (tree / ".complete").write_text(wheel.name + "\n")
            if target.exists():
                shutil.rmtree(target)
            tree.rename(target)
    return target


def source_file(version: str, relpath: str) -> Path:
    """One released source file, e.g. ``sglang/srt/mem_cache/deepseek_v4_memory_pool.py``."""
    path = release_dir(version) / relpath
    if not path.exists():
        raise FileNotFoundError(f"sglang {version} has no {relpath}")
    return path


def run_in_release(
    module: str, version: str, payload: object, timeout: float, drop_env: tuple[str, ...] = ()
) -> list[dict[str, Any]]:
    """Run ``python -m <module> <release_dir>`` with ``payload`` as JSON on stdin and return
    its JSON answer: one release per process, as SGLang's modules can be imported only once.
    A failing child fails the test with the end of its stderr."""
    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(repo), "SGLANG_LOGGING_LEVEL": "ERROR"}
    for name in drop_env:
        env.pop(name, None)
    proc = subprocess.run(
        [sys.executable, "-m", module, str(release_dir(version))],
        input=json.dumps(payload),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=repo,
        env=env,
    )
    assert proc.returncode == 0, f"{module} on sglang {version} failed:\n{proc.stderr[-4000:]}"
    return list(json.loads(proc.stdout))
