"""Post-import hooks: run a callback right after a named module finishes importing.

The probe must patch SGLang classes without editing SGLang files and without importing SGLang
itself (that would slow every Python process down and change import order). A meta-path finder
sees the import of a watched name, lets the normal finders locate it, and wraps only that
module's loader so the callback runs after the module body executed. The original loader is put
back on the module afterwards. A callback that fails is logged; the import still succeeds.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import logging
import sys
import threading
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

logger = logging.getLogger("exporter.probe")

Callback = Callable[[ModuleType], None]


class _PatchingLoader(importlib.abc.Loader):
    """Delegates to the real loader; runs the callbacks after ``exec_module``."""

    def __init__(self, loader: Any, callbacks: Sequence[Callback]) -> None:
        self._loader = loader
        self._callbacks = callbacks

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        spec = getattr(module, "__spec__", None)
        if spec is not None and spec.loader is self:
            spec.loader = self._loader
        if getattr(module, "__loader__", None) is self:
            module.__loader__ = self._loader
        _run(self._callbacks, module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


def _run(callbacks: Sequence[Callback], module: ModuleType) -> None:
    for callback in callbacks:
        try:
            callback(module)
        except Exception:
            logger.warning(
                "dsv4-probe: patching %s failed; left as is", module.__name__, exc_info=True
            )


class ImportWatcher(importlib.abc.MetaPathFinder):
    """``watch(name, callback)`` then ``install()``; ``uninstall()`` removes the finder."""

    def __init__(self) -> None:
        self._callbacks: dict[str, list[Callback]] = {}
        self._busy = threading.local()

    def watch(self, name: str, callback: Callback) -> None:
        self._callbacks.setdefault(name, []).append(callback)
        module = sys.modules.get(name)
        if module is not None:  # imported before we were: patch it now
            _run([callback], module)

    def install(self) -> None:
        if self not in sys.meta_path:
            sys.meta_path.insert(0, self)

    def uninstall(self) -> None:
        while self in sys.meta_path:
            sys.meta_path.remove(self)

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        callbacks = self._callbacks.get(fullname)
        if not callbacks:
            return None
        busy = self._busy.__dict__.setdefault("names", set())
        if fullname in busy:
            return None
        busy.add(fullname)
        try:
            spec = _find_with_others(self, fullname, path, target)
        finally:
            busy.discard(fullname)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _PatchingLoader(spec.loader, callbacks)
        return spec


def _find_with_others(
    me: ImportWatcher, fullname: str, path: Sequence[str] | None, target: ModuleType | None
) -> importlib.machinery.ModuleSpec | None:
    for finder in list(sys.meta_path):
        if finder is me:
            continue
        find_spec = getattr(finder, "find_spec", None)
        if find_spec is None:
            continue
        spec = find_spec(fullname, path, target)
        if spec is not None:
            return spec
    return None
