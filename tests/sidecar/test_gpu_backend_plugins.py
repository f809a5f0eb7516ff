"""`gpu_backend` is validated against the installed entry points, not a fixed list: a package
that declares a backend (here a real dist-info directory put on ``sys.path``, as pip would
install it) is selectable by name, its GPUs reach the NVML source, and an unknown name stops
the real CLI with exit 2 naming the key, the installed choices and the fix."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.cli import main
from exporter.config_loader import ConfigError, load_settings
from exporter.sources import gpu_backends
from exporter.sources.nvml import NvmlSource

PLUGIN = '''
"""A third-party GPU backend: three GPUs of the fake NVML library."""
from exporter.sim.fake_nvml import FakeNvml


class Backend:
    def check_settings(self):
        import os
        if os.environ.get("ACME_GPU_BROKEN"):
            raise ValueError("ACME_GPU_BROKEN is set")

    def create(self, settings):
        return FakeNvml(count=3)


backend = Backend()
'''


@pytest.fixture
def acme(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Install the backend ``acme`` the way an installed wheel would: a module plus a
    ``.dist-info`` with its entry point, on ``sys.path``."""
    (tmp_path / "acme_gpu.py").write_text(textwrap.dedent(PLUGIN))
    dist = tmp_path / "acme_gpu-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-gpu\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        f"[{gpu_backends.ENTRY_POINT_GROUP}]\nacme = acme_gpu:backend\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "acme"
    sys.modules.pop("acme_gpu", None)


def test_an_installed_plugin_is_selectable_and_its_gpus_are_read(acme: str) -> None:
    assert acme in gpu_backends.installed()
    settings = load_settings({"gpu_backend": acme, "canary": False})
    assert settings.gpu_backend == acme
    snap = NvmlSource(nvml=gpu_backends.create(settings))._cycle()
    assert len(snap.gpus) == 3


def test_a_plugins_own_settings_are_checked_at_start(
    acme: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ACME_GPU_BROKEN", "1")
    with pytest.raises(ConfigError, match=r"gpu_backend 'acme'.*ACME_GPU_BROKEN is set"):
        load_settings({"gpu_backend": acme})


def test_an_uninstalled_backend_stops_the_real_cli(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["serve", "--gpu-backend", "acme", "--canary", "false", "--port", "0"])
    err = capsys.readouterr().err
    assert rc == 2
    for needle in ("gpu_backend", "'acme' is not installed", "installed: nvml, fake", "fix:"):
        assert needle in err, err
    assert "Traceback" not in err


def test_the_uninstalled_choice_names_the_plugin_once_installed(
    acme: str, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(["serve", "--gpu-backend", "amd", "--canary", "false", "--port", "0"])
    assert rc == 2
    assert "installed: nvml, acme, fake" in capsys.readouterr().err


def test_a_plugin_that_does_not_import_stops_the_real_cli(
    acme: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A broken plugin package (its module raises on import) is named with the fix, exit 2,
    never a traceback."""
    sys.modules.pop("acme_gpu", None)
    (tmp_path / "acme_gpu.py").write_text("import acme_gpu_native_lib_that_is_missing\n")
    rc = main(["serve", "--gpu-backend", acme, "--canary", "false", "--port", "0"])
    err = capsys.readouterr().err
    assert rc == 2, err
    for needle in ("gpu_backend 'acme'", "does not import", "ModuleNotFoundError", "reinstall"):
        assert needle in err, err
    assert "Traceback" not in err
