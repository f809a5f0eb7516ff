"""docker/requirements.lock, the sidecar image's Python packages: made from pyproject.toml's
current requirements, every requirement pinned and satisfied, every pin hashed, runtime extras
trimmed to what the sidecar uses, and the image installing exactly it."""

from __future__ import annotations

import importlib.util
import re
from types import ModuleType

import pytest

from tests.deploy.conftest import DOCKER, REPO


@pytest.fixture(scope="module")
def lock() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dsv4_lock", DOCKER / "lock.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def text(lock) -> str:
    return lock.LOCK.read_text(encoding="utf-8")


def test_lock_fits_pyproject(lock, text):
    assert lock.problems(text, lock.requirements()) == []
    assert lock.main(["--check"]) == 0


def test_every_runtime_dependency_and_the_build_backend_is_pinned(lock, text):
    pinned = lock.pins(text)
    for name in ("fastapi", "uvicorn", "uvloop", "httptools", "pydantic", "setuptools", "wheel"):
        assert name in pinned, name
    assert all(n >= 1 for _, n in pinned.values())
    # Hashes of every file of a pinned version: the same lock serves cp311 (Debian's python3)
    # and cp312 (the upstream base).
    assert pinned["pydantic-core"][1] > 10


def test_extras_trimmed_to_what_the_sidecar_uses(lock, text):
    reqs = lock.requirements()
    assert not [r for r in reqs if "[" in r.split(";")[0]], reqs
    pinned = lock.pins(text)
    for unused in ("watchfiles", "websockets", "torch"):
        assert unused not in pinned, unused


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda reqs, text: ([*reqs, "attrs>=1"], text), "other requirements"),
        (
            lambda reqs, text: (reqs, re.sub(r"^uvicorn==\S+", "uvicorn==0.1", text, flags=re.M)),
            "uvicorn==0.1 does not satisfy",
        ),
        (lambda reqs, text: ([*reqs, "not-locked>=1"], text), "not-locked: not in the lock"),
        (lambda reqs, text: ([*reqs, "uvicorn[standard]>=0.29"], text), "extras are not locked"),
        (lambda reqs, text: (reqs, text + "\nstray==1.0\n"), "stray==1.0: no hashes"),
    ],
    ids=["digest", "unsatisfied", "missing", "extras", "unhashed"],
)
def test_check_catches_a_stale_lock(lock, text, change, message):
    reqs, changed = change(lock.requirements(), text)
    assert any(message in p for p in lock.problems(changed, reqs)), lock.problems(changed, reqs)


def test_image_installs_exactly_the_lock():
    dockerfile = (DOCKER / "Dockerfile").read_text(encoding="utf-8")
    assert re.search(
        r"pip install --require-hashes --no-deps --only-binary :all:\s*\\\s*-r "
        r"/src/docker/requirements\.lock",
        dockerfile,
    ), "the lock, hash-checked, nothing resolved at build time"
    assert "--no-build-isolation" in dockerfile, "the wheel builds with the locked backend"
    assert "pip check" in dockerfile
    assert "!docker/requirements.lock" in (REPO / ".dockerignore").read_text(encoding="utf-8")
