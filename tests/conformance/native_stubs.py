"""Stand-ins for the native modules a released SGLang imports but the pool arithmetic never runs.

SGLang's ``pool_configurator.py`` and ``deepseek_v4_memory_pool.py`` import CUDA kernels,
triton, flashinfer, transformers and friends at module level. None of them takes part in
sizing: the configurator is arithmetic and the pool is built on torch's ``meta`` device. So a
meta-path finder answers those imports with permissive stand-in modules, and only those: the
released ``sglang`` sources, torch, numpy and msgspec are the real ones.

Which imports get a stand-in: any top-level module that is not installed (checked last, after
every real finder), plus ``sglang`` sub-packages that compile kernels at import time (the JIT
kernel loader, which looks for C++ sources a wheel's ``.py`` extract does not have) or build
pydantic request models from stand-in types (the OpenAI protocol, the tool-call parsers).
Imports made *by torch* are never stubbed: torch probes optional packages (triton, ck) and
must see them missing.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Iterator, Sequence
from typing import Any

# sglang sub-packages that do work at import time the sizing code never needs.
STUBBED_SGLANG_PACKAGES = (
    "sglang.kernels.jit",
    "sglang.jit_kernel",
    "sglang.srt.function_call",
    "sglang.srt.entrypoints",
)
# Installed for real but must not be: SGLang probes these to pick CUDA paths.
ALWAYS_STUBBED = ("triton", "sgl_kernel", "flashinfer", "tvm_ffi", "torch_memory_saver", "cuda")


class _Base:
    """Base class for classes that subclass a stand-in (``class X(PretrainedConfig)``)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        pass

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass


class Anything:
    """Any attribute of a stand-in module: callable, subscriptable, usable as a decorator."""

    def __init__(self, name: str) -> None:
        self._name = name
        self.__name__ = name.rsplit(".", 1)[-1]
        self.__qualname__ = self.__name__

    def __getattr__(self, key: str) -> Any:
        if key.startswith("__") and key.endswith("__"):
            raise AttributeError(key)
        return Anything(f"{self._name}.{key}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._name.endswith("get_current_target"):
            # triton's driver query: there is no GPU, so callers fall back to the CPU.
            raise RuntimeError("no GPU driver (stand-in triton)")
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]  # used as a bare decorator
        return Anything(f"{self._name}()")

    def __getitem__(self, key: Any) -> Any:
        return Anything(self._name)

    def __setitem__(self, key: Any, value: Any) -> None:
        pass

    def __contains__(self, key: Any) -> bool:
        return False

    def __iter__(self) -> Iterator[Any]:
        return iter(())

    def __len__(self) -> int:
        return 0

    def __bool__(self) -> bool:
        return False

    def __int__(self) -> int:
        return 0

    def __index__(self) -> int:
        return 0

    def __or__(self, other: Any) -> Any:
        return self

    def __ror__(self, other: Any) -> Any:
        return self

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> bool:
        return False

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        return (_Base,)


class StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return Anything(f"{self.__name__}.{name}")


class _StubLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        mod = StubModule(spec.name)
        mod.__path__ = []
        mod.__version__ = "3.4.0"  # torch reads triton.__version__
        return mod

    def exec_module(self, module: types.ModuleType) -> None:
        pass


_LOADER = _StubLoader()


def _spec(name: str) -> importlib.machinery.ModuleSpec:
    return importlib.machinery.ModuleSpec(name, _LOADER, is_package=True)


class _FirstFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, name: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        top = name.split(".")[0]
        if top in ALWAYS_STUBBED or name.startswith(STUBBED_SGLANG_PACKAGES):
            return _spec(name)
        return None


# Installed on the GPU machine's image but not in the CPU oracle's environment: SGLang's CUDA
# import branches reach them there (a newer transformers whose names moved, compressed_tensors,
# gguf, ...). Stubbed when SGLang imports them, so the release imports the same on both.
ABSENT_FROM_ORACLE = (
    "transformers",
    "huggingface_hub",
    "safetensors",
    "tokenizers",
    "sentencepiece",
    "tiktoken",
    "einops",
    "numba",
    "cupy",
    "jax",
    "timm",
    "peft",
    "accelerate",
    "pandas",
    "pyarrow",
    "psutil",
    "tqdm",
    "regex",
    "xxhash",
    "cv2",
    "compressed_tensors",
    "gguf",
    "datasets",
    "deep_gemm",
    "vllm",
)


def _caller_is_torch() -> bool:
    frame = sys._getframe(2)
    while frame is not None and (
        frame.f_code.co_filename.startswith("<frozen") or frame.f_code.co_filename == __file__
    ):
        frame = frame.f_back
    return frame is not None and "/torch/" in frame.f_code.co_filename


class _AbsentFinder(importlib.abc.MetaPathFinder):
    """Stubs :data:`ABSENT_FROM_ORACLE` for every importer but torch."""

    def find_spec(
        self, name: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name.split(".")[0] in ABSENT_FROM_ORACLE and not _caller_is_torch():
            return _spec(name)
        return None


class _LastFinder(importlib.abc.MetaPathFinder):
    """Answers imports no real finder could: a missing optional dependency of SGLang."""

    def find_spec(
        self, name: str, path: Sequence[str] | None, target: types.ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name.startswith("sglang"):
            return None
        frame = sys._getframe(1)
        while frame is not None and (
            frame.f_code.co_filename.startswith("<frozen") or frame.f_code.co_filename == __file__
        ):
            frame = frame.f_back
        if frame is not None and "/torch/" in frame.f_code.co_filename:
            return None
        return _spec(name)


def install(release_dir: str) -> None:
    """Make ``import sglang`` load the release at ``release_dir`` with native modules stubbed.

    torch is imported first (with the modules that probe for triton) so that it sees the
    machine as it is. ``sglang`` and ``sglang.srt`` are registered as bare packages: their
    ``__init__`` files start the whole serving stack, which sizing does not need.
    """
    import torch
    import torch._inductor.runtime.triton_compat
    import torch.utils.flop_counter  # noqa: F401

    sys.path.insert(0, release_dir)
    sys.meta_path.insert(0, _FirstFinder())
    sys.meta_path.insert(0, _AbsentFinder())
    sys.meta_path.append(_LastFinder())
    for name, sub in (("sglang", "sglang"), ("sglang.srt", "sglang/srt")):
        pkg = types.ModuleType(name)
        pkg.__path__ = [f"{release_dir}/{sub}"]
        sys.modules[name] = pkg
    # Kernel wrappers registered as torch custom ops need a real function signature.
    import sglang.srt.utils.custom_op as custom_op

    if hasattr(custom_op, "register_custom_op_from_extern"):
        custom_op.register_custom_op_from_extern = lambda fn, *a, **k: fn
