"""Which library the NVML source reads GPUs through: the real NVML, or a backend plugged in.

The sidecar itself knows one backend, ``nvml`` (nvidia-ml-py, imported by the NVML source).
Any other backend is a plugin that the sidecar never imports by name: a package declares an
entry point in the group :data:`ENTRY_POINT_GROUP`, named after the backend, that resolves to
an object with the :class:`GpuBackend` shape (or registers one in-process:
``exporter.gpu_plugins.register``). This repository's simulator provides ``fake``
(``exporter.sim.gpus``: the simulated SGLang's GPUs): a development install declares it
(setup.py), the production wheel does not, where ``python -m exporter.sim.sidecar`` registers
it. So the simulator attaches from outside the production composition root, and a host could
add, say, an AMD backend the same way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

# What the settings also need (they validate gpu_backend) lives in a leaf module: the
# settings do not import this one, which is typed against them.
from exporter.gpu_plugins import BUILTIN, ENTRY_POINT_GROUP, installed, plugins

if TYPE_CHECKING:
    from exporter.config import SidecarSettings
    from exporter.sources.nvml import NvmlLibrary


class GpuBackendError(ValueError):
    """A backend that is not installed, or that rejects its options."""


class GpuBackend(Protocol):
    """What a GPU backend plugin provides."""

    def check_settings(self) -> None:
        """Validate the backend's own settings (read from its own environment variables, not
        the sidecar's) at start-up; raise ``ValueError`` naming the variable and the fix. The
        loader calls it when present (``exporter.config_loader``), so a plugin may omit it."""

    def create(self, settings: SidecarSettings) -> NvmlLibrary:
        """An object with the pynvml functions the NVML source calls (``NvmlLibrary``),
        raising ``pynvml.NVMLError`` as the real library does."""


def load(name: str) -> GpuBackend:
    """The plugin ``name``; :class:`GpuBackendError` saying what is installed if absent."""
    found = [ep for ep in plugins() if ep.name == name]
    if not found:
        raise GpuBackendError(
            f"GPU backend {name!r} is not installed (installed: {', '.join(installed())}); "
            f"a backend is a package with an entry point in group {ENTRY_POINT_GROUP!r}"
        )
    try:
        backend: GpuBackend = found[0].load()
    except Exception as exc:  # a broken plugin package: name it instead of a traceback
        raise GpuBackendError(
            f"GPU backend {name!r} is installed but does not import "
            f"({found[0].value}: {type(exc).__name__}: {exc}); reinstall or fix that package"
        ) from exc
    return backend


def create(settings: SidecarSettings) -> NvmlLibrary | None:
    """The NVML library for ``settings.gpu_backend``: None for the built-in NVML (the source
    imports pynvml itself), else the plugin's instance."""
    if settings.gpu_backend == BUILTIN:
        return None
    return load(settings.gpu_backend).create(settings)
