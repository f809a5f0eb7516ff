"""A released SGLang's own DeepSeek-V4 pool allocated on the GPU, against ``plan``'s model.

Usage (one release per process, as SGLang's modules import once)::

    python -m tests.gpu.pool_check <release_dir> [--simulated]  > result.json

Each launch is raw (flags, environment, config.json, budget) and goes to the release's own
argument parser, configurator and ``DeepSeekV4TokenToKVPool`` (tests/conformance/oracle.py),
built on ``cuda`` (``--simulated``: on ``meta``). The model gets the same raw launch through
``plan``'s path (tests/conformance/model_side.py). Compared per launch:

* tensor bytes per sub-pool: the release's against the model's, exactly;
* device bytes: ``torch.cuda.memory_allocated`` / ``memory_reserved`` growth while the pool is
  built, against ``exporter.footprint.device_bytes`` replaying PyTorch's caching allocator over
  the model's tensors (and over the release's own tensor list, to tell a wrong tensor split
  from a wrong allocator model); NVML's used-memory growth beside it, measured, not modelled.

The bf16 fork is the release's pool with its indexer pool pricing index-K at 2 bytes per dim
(256 B per token at head dim 128, no scales), as the production forks store it; the model is
told ``--index-k-dtype bf16``, the one fact a launch does not carry.
"""

from __future__ import annotations

import contextlib
import gc
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from exporter.units import GIB

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
BUDGET = 50 * GIB
# (name, model, argv, env, bf16 fork): SGLang's vocabulary only.
LAUNCHES: tuple[tuple[str, str, list[str], dict[str, str], bool], ...] = (
    ("flash fp8", "flash", [], {}, False),
    ("flash fp4", "flash", ["--enable-deepseek-v4-fp4-indexer"], {}, False),
    ("flash bf16 fork", "flash", [], {}, True),
    ("flash MTP", "flash", ["--speculative-algorithm", "EAGLE"], {}, False),
    ("pro fp8", "pro", [], {}, False),
)


class NotApplicable(Exception):
    """A launch this release cannot express (reported, not failed)."""


def _config(model: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"deepseek-v4-{model}.config.json").read_text())


@contextlib.contextmanager
def bf16_fork(enabled: bool) -> Iterator[None]:
    """The release's indexer pool storing bf16 index-K (the forks' dtype) while a pool builds."""
    if not enabled:
        yield
        return
    import sglang.srt.mem_cache.deepseek_v4_memory_pool as mp

    cls = mp.DeepSeekV4IndexerPool
    original = cls.__dict__.get("get_bytes_per_token")
    if original is None:  # 0.5.12-0.5.1x compute the page size inline: nothing to re-price
        raise NotApplicable("this release's indexer pool has no per-token price to re-price")

    def bf16_bytes_per_token(self: Any) -> int:
        return int(self.index_head_dim) * 2

    cls.get_bytes_per_token = bf16_bytes_per_token
    try:
        yield
    finally:
        cls.get_bytes_per_token = original


def tensor_sizes(pool: Any) -> list[int]:
    """Every distinct tensor storage the pool holds, in attribute-walk order."""
    import torch

    sizes: list[int] = []
    seen: set[int] = set()
    storages: set[int] = set()

    def walk(obj: Any, depth: int) -> None:
        if id(obj) in seen or depth > 6:
            return
        seen.add(id(obj))
        if isinstance(obj, torch.Tensor):
            key = obj.untyped_storage().data_ptr() if obj.device.type != "meta" else id(obj)
            if key not in storages:
                storages.add(key)
                sizes.append(obj.untyped_storage().nbytes())
            return
        if isinstance(obj, (list, tuple)):
            for item in obj:
                walk(item, depth + 1)
        elif isinstance(obj, dict):
            for item in obj.values():
                walk(item, depth + 1)
        elif hasattr(obj, "__dict__") and type(obj).__module__.startswith("sglang"):
            for item in vars(obj).values():
                walk(item, depth + 1)

    walk(pool, 0)
    return sizes


class Meter:
    """Allocator and NVML readings around one pool build (CUDA), or nothing (meta)."""

    def __init__(self, cuda: bool) -> None:
        self.cuda = cuda
        self.nvml: Any = None
        if cuda:
            import pynvml

            pynvml.nvmlInit()
            self.nvml = pynvml
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(0)

    def read(self) -> dict[str, int] | None:
        if not self.cuda:
            return None
        import torch

        torch.cuda.synchronize()
        used = int(self.nvml.nvmlDeviceGetMemoryInfo(self.handle).used)
        return {
            "allocated": int(torch.cuda.memory_allocated()),
            "reserved": int(torch.cuda.memory_reserved()),
            "nvml_used": used,
        }


def run_launch(version: str, launch: tuple, meter: Meter) -> dict[str, Any]:
    import torch

    from exporter.footprint.device_bytes import pool_tensor_sizes, simulate
    from tests.conformance.model_side import model_for_case
    from tests.conformance.oracle import run_case

    name, model, argv, env, fork = launch
    case = {
        "config": _config(model),
        "argv": argv,
        "env": env,
        "pp_rank": 0,
        "available_bytes": BUDGET,
        "device": "cuda" if meter.cuda else "meta",
    }
    out: dict[str, Any] = {"launch": name, "argv": argv, "fork_bf16": fork}
    expected = model_for_case(version, case, index_k_dtype="bf16" if fork else None)
    kept: list[Any] = []
    before = meter.read()
    version_tuple = tuple(int(p) for p in version.split(".")[:3])
    try:
        with bf16_fork(fork):
            real = run_case(case, version_tuple, keep=kept)  # type: ignore[arg-type]
    except NotApplicable as exc:
        out["not_applicable"] = str(exc)
        return out
    except (ValueError, AssertionError, SystemExit) as exc:
        out["refused"] = f"{type(exc).__name__}: {exc}"[:300]
        out["model"] = {k: v for k, v in expected.items() if k in ("refused", "not_modelled")}
        return out
    after = meter.read()
    real_sizes = tensor_sizes(kept[0])
    out["full_tokens"] = {
        "release": real["full_max_total_num_tokens"],
        "model": expected.get("full"),
    }
    out["pools"] = {
        pool: {"release": b, "model": (expected.get("pools") or {}).get(pool)}
        for pool, b in sorted(real["pool_tensors"].items())
    }
    out["tensor_bytes"] = {"release": sum(real["pool_tensors"].values())}
    if "pools" in expected:
        out["tensor_bytes"]["model"] = sum(expected["pools"].values())
        modelled = simulate(pool_tensor_sizes(expected["tensors"]))
        out["device_model"] = {
            "allocated": modelled.allocated,
            "reserved": modelled.reserved,
            "segments": modelled.segments,
        }
    else:
        out["model_error"] = {k: v for k, v in expected.items() if k != "tensors"}
    on_real = simulate(real_sizes)
    out["device_model_on_release_tensors"] = {
        "allocated": on_real.allocated,
        "reserved": on_real.reserved,
        "tensors": len(real_sizes),
    }
    if before is not None and after is not None:
        out["measured"] = {k: after[k] - before[k] for k in before}
    del kept[:]
    gc.collect()
    if meter.cuda:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    return out


def main() -> None:
    release = Path(sys.argv[1])
    simulated = "--simulated" in sys.argv[2:]
    from tests.conformance.native_stubs import install

    install(str(release))
    import torch

    cuda = not simulated and torch.cuda.is_available()
    meter = Meter(cuda)
    results = []
    for launch in LAUNCHES:
        try:
            results.append(run_launch(release.name, launch, meter))
        except Exception as exc:  # one launch failing must not hide the others
            import traceback

            traceback.print_exc()
            results.append({"launch": launch[0], "error": f"{type(exc).__name__}: {exc}"[:500]})
    json.dump(
        {"release": release.name, "device": "cuda" if cuda else "meta", "launches": results},
        sys.stdout,
    )


if __name__ == "__main__":
    main()
