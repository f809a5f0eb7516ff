"""Which GPU backends an installation has: the built-in NVML and the plugins.

A leaf module (the standard library only). The settings (``exporter.config``) check a
configured ``gpu_backend`` against :func:`installed` and name :data:`ENTRY_POINT_GROUP` in
their help, while the backends themselves (``exporter.sources.gpu_backends``: the plugin
protocol, loading and creating one) are typed against those settings; kept here, neither of
the two imports the other for these names (no import cycle).

A plugin is an entry point of group :data:`ENTRY_POINT_GROUP` that an installed package
declares, or one :func:`register` adds to this process: how the simulator's ``fake`` backend
attaches to a production install, whose wheel declares no plugin (``python -m
exporter.sim.sidecar``; a development install declares it: setup.py).
"""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points

ENTRY_POINT_GROUP = "dsv4_sidecar.gpu_backends"
BUILTIN = "nvml"

_registered: dict[str, EntryPoint] = {}


def register(name: str, value: str) -> None:
    """Add backend ``name`` to this process, ``value`` an entry point's object reference
    (``module:attribute``, imported only when the backend is loaded)."""
    _registered[name] = EntryPoint(name=name, value=value, group=ENTRY_POINT_GROUP)


def plugins() -> list[EntryPoint]:
    """Every plugin: the installed packages' entry points, then this process's registrations
    of names no package declares."""
    declared = list(entry_points(group=ENTRY_POINT_GROUP))
    names = {ep.name for ep in declared}
    return [*declared, *(ep for name, ep in _registered.items() if name not in names)]


def installed() -> list[str]:
    """Names of every backend this installation has: the built-in one and the plugins."""
    return [BUILTIN, *sorted({ep.name for ep in plugins()})]
