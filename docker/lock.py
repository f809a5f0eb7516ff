"""docker/requirements.lock: the exact Python packages of the sidecar image.

    python docker/lock.py            # re-resolve (needs the package index): `make lock`
    python docker/lock.py --check    # offline: exit 1 when the lock no longer fits pyproject

The lock is pip-compile's (pip-tools) resolution of pyproject.toml's runtime dependencies and
build backend (``--all-build-deps``: setuptools and wheel, so the image builds its wheel with
no fetch), every file of every pinned version hashed (``--generate-hashes``), so the same lock
installs on the Debian base's Python 3.11 and the upstream image's 3.12 alike. pip-compile runs
in a venv of its own (``build/lock-venv``, pip-tools pinned below) with this machine's pip
configuration switched off, so local wheel mirrors never leak into the lock.

``--check`` cannot re-resolve (offline, and a new upstream release is not staleness): it checks
that the lock was made from the current requirements (their digest, recorded in the lock's
header), that every requirement is satisfied by a pin, and that every pin carries hashes.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]
LOCK = REPO / "docker" / "requirements.lock"
LOCK_VENV = REPO / "build" / "lock-venv"
PIP_TOOLS = "pip-tools==7.6.2"
INDEX = "https://pypi.org/simple"
DIGEST_LINE = "# requirements-sha256: "
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")


def requirements(pyproject: Path = REPO / "pyproject.toml") -> list[str]:
    """What the lock is made from: the runtime dependencies, then the build backend."""
    data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    return [*data["project"]["dependencies"], *data["build-system"]["requires"]]


def digest(reqs: list[str]) -> str:
    return hashlib.sha256("\n".join(reqs).encode()).hexdigest()


def pins(text: str) -> dict[str, tuple[str, int]]:
    """{canonical name: (version, number of hashes)} of a pip-compile lock."""
    out: dict[str, tuple[str, int]] = {}
    name = ""
    for line in text.splitlines():
        m = PIN.match(line)
        if m:
            name = canonicalize_name(m.group(1))
            out[name] = (m.group(2), 0)
        elif name and line.strip().startswith("--hash=sha256:"):
            version, n = out[name]
            out[name] = (version, n + 1)
        elif not line.startswith(" "):
            name = ""
    return out


def problems(text: str, reqs: list[str]) -> list[str]:
    """Why a lock does not fit ``reqs`` (empty: it fits)."""
    out = []
    recorded = next(
        (ln[len(DIGEST_LINE) :] for ln in text.splitlines() if ln.startswith(DIGEST_LINE)), None
    )
    if recorded != digest(reqs):
        out.append("made from other requirements than pyproject.toml's now (run `make lock`)")
    locked = pins(text)
    for spec in reqs:
        req = Requirement(spec)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        pin = locked.get(canonicalize_name(req.name))
        if pin is None:
            out.append(f"{req.name}: not in the lock")
        elif not req.specifier.contains(pin[0], prereleases=True):
            out.append(f"{req.name}=={pin[0]} does not satisfy {spec!r}")
        if req.extras:
            out.append(f"{spec!r}: extras are not locked (name what is used)")
    out += [f"{name}=={v}: no hashes" for name, (v, n) in locked.items() if n == 0]
    return out


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull  # no machine-wide index, find-links or constraints
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    for name in ("PIP_CERT", "PIP_DEFAULT_TIMEOUT"):  # how to reach the index, not what is in it
        if name in os.environ:
            env[name] = os.environ[name]
    return env


def compile_lock() -> None:
    env = _clean_env()
    tool = LOCK_VENV / "bin" / "pip-compile"
    if not tool.exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(LOCK_VENV)], check=True)
        pip = [str(LOCK_VENV / "bin" / "python"), "-m", "pip", "install", "-q"]
        subprocess.run([*pip, "--index-url", INDEX, PIP_TOOLS], check=True, env=env)
    subprocess.run(
        [str(tool), "-q", "--generate-hashes", "--allow-unsafe", "--strip-extras",
         "--all-build-deps", "--no-emit-index-url", "--index-url", INDEX, "--upgrade",
         "--output-file", str(LOCK.relative_to(REPO)), "pyproject.toml"],
        cwd=REPO, check=True, env={**env, "CUSTOM_COMPILE_COMMAND": "make lock"},
    )  # fmt: skip
    text = LOCK.read_text(encoding="utf-8")
    header = f"{DIGEST_LINE}{digest(requirements())}\n"
    LOCK.write_text(header + text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--check", action="store_true", help="offline: exit 1 if the lock is stale")
    args = ap.parse_args(argv)
    if not args.check:
        compile_lock()
    if not LOCK.is_file():
        print(f"{LOCK.relative_to(REPO)}: missing (run `make lock`)", file=sys.stderr)
        return 1
    found = problems(LOCK.read_text(encoding="utf-8"), requirements())
    for p in found:
        print(f"{LOCK.relative_to(REPO)}: {p}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
