"""Start-up entry point: the ``.pth`` hook calls :func:`activate` in every Python process.

With ``DSV4_PROBE`` unset (or not 1/true/yes/on) this returns at once and nothing else of the
probe is imported. With it set, it installs the post-import hook for the SGLang modules the
probe wraps and nothing more: SGLang is not imported, torch is not imported, no thread starts
until a wrapped method is first called. Nothing here may raise into the interpreter's start-up.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from exporter.probe import config

logger = logging.getLogger("exporter.probe")

_active = None


def activate(environ: Mapping[str, str] | None = None):
    """Install the probe in this process once; returns the Probe, or None when off/failed."""
    global _active
    if _active is not None:
        return _active
    if not config.enabled(environ):
        return None
    try:
        _active = _install(config.ProbeConfig.from_env(environ))
    except Exception:
        logger.warning("dsv4-probe: not activated", exc_info=True)
        return None
    return _active


def _install(cfg: config.ProbeConfig):
    from exporter.probe.runtime import Probe
    from exporter.probe.writer import Reporter

    probe = Probe(cfg)
    reporter = Reporter(probe)
    probe.on_engage = reporter.start
    probe.reporter = reporter
    if hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=reporter.after_fork_in_child)
    attach(probe)
    return probe


def attach(probe):
    """Watch the SGLang target modules and patch them for ``probe`` when they are imported
    (or at once, if already imported). Returns the installed ImportWatcher."""
    from exporter.probe.hooks import ImportWatcher
    from exporter.probe.targets import TARGETS, patch_module

    watcher = ImportWatcher()
    for module_name in TARGETS:
        watcher.watch(module_name, lambda module: patch_module(probe, module))
    watcher.install()
    probe.watcher = watcher
    return watcher


def active():
    """The Probe of this process, or None when the probe is off."""
    return _active
