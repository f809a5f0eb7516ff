"""Reproduce the HiCache index-K race on a real GPU and prove the probe counts it.

Part of ``make gpu-check`` (tests/gpu/check.py); alone::

    python -m tests.gpu.race_harness [--simulated] [--release DIR ...]

How the race is made to happen every time, on any CPU: every host buffer of a load is pinned
before the load starts; the load stream's first operation is a device-side gate
(tests/gpu/cuda_gate.py); the forward pass enqueues all its reads on its own stream; the rig
holds the gate shut ``HOLD_S`` more, then opens it. An index-K read that skipped
``wait_layer_transfer`` therefore ran before its layer's copy (stale: ground truth is every byte
of the buffer it read), and the probe's gap for it is about the hold; a gated read queued behind
the layer's event and saw the copy. Nothing depends on how long the CPU takes.

Pools and counters, each case run gated (the pool's own accessor) and ungated (a subclass whose
index-K accessor lost the wait, as a fork would write it):

* the stand-ins (tests/probe/fake_sglang): SGLang's call shapes, no SGLang needed;
* per released SGLang given with ``--release``: the release's own ``LayerDoneCounter`` and
  ``LayerLoadingEvent`` (``cache_controller``) and its own ``DeepSeekV4TokenToKVPool`` built by
  its own configurator on CUDA (V4-Flash, 2 GiB budget), driven by the load loop of
  tests/probe/rig.py (HiCacheController.start_loading's call order; the releases' own
  start_loading needs their host pool and, from 0.5.23, the L2 transfer engine).

The probe is attached through its real post-import hook, CUDA timing events, verification at
rate 1.0. ``--simulated`` runs the stand-ins on the simulated device and the releases on
torch's meta device (counts only: no bytes to compare, no gaps), so CI keeps it from rotting.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
LOADS = 3
HOLD_S = 0.05  # how long the gate stays shut after the reads are queued
FLASH_CONFIG = REPO / "tests" / "fixtures" / "deepseek-v4-flash.config.json"
# A small pool (copied whole on every load): 8 requests keep the per-request state small.
RACE_BUDGET = 1 << 30
RACE_ARGV = ["--max-running-requests", "8"]

Check = Callable[[str, bool, object], None]


def _settle(probe: Any, deadline_s: float = 30.0) -> None:
    """Resolve until every gap and verification is accounted for (all events have fired: the
    rig synchronised the device first, so this ends at once unless the probe is broken)."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        probe.resolve()
        verifier = probe.verifier
        if not probe.pending_gaps and (verifier is None or not verifier.pending):
            return
        time.sleep(0.01)


class MetaOps:
    """A release's pool on the meta device (CPU mode): reads and copies are no-ops, so only the
    probe's counts are checked, on the release's real counter and accessors."""

    name = "meta"
    gate_mechanism = "none (meta device)"
    last_hold_s = 0.0

    def __init__(self, torch: Any) -> None:
        self.torch = torch

    def new_stream(self) -> Any:
        return self.torch.cpu.Stream()

    def stream(self, s: Any) -> Any:
        return self.torch.cpu.stream(s)

    def prepare(self, generation: int, buffers: list[tuple[int, Any]]) -> None:
        return None

    def before_load(self) -> None:
        return None

    def copy_layer(self, dst: Any, generation: int, layer: int) -> None:
        return None

    def release(self) -> None:
        return None

    def read(self, buf: Any) -> Any:
        return buf

    def stale(self, handle: Any, expected: int) -> bool:
        return False

    def synchronize(self) -> None:
        return None


def _probe(out_dir: Path, rank: str, verify: float) -> Any:
    from exporter.probe.config import ProbeConfig
    from exporter.probe.runtime import Probe

    return Probe(ProbeConfig(directory=out_dir, rank=rank, verify_rate=verify))


def _standin_rig(make_ops: Callable[[], Any], fork: bool) -> Any:
    from tests.probe.rig import Rig, fork_pool_class, import_standins

    cc, dsv4 = import_standins()  # first: the simulated device lives among the stand-ins
    pool_cls = fork_pool_class(dsv4) if fork else dsv4.DeepSeekV4TokenToKVPool
    return Rig(cc, pool_cls, make_ops())


def _release_rig(ops: Any, fork: bool, device: str) -> Any:
    """The release's own pool (its configurator's sizes, on ``device``) and counter."""
    import sglang.srt.managers.cache_controller as cc
    import sglang.srt.mem_cache.deepseek_v4_memory_pool as mp

    from tests.conformance.oracle import run_case
    from tests.probe.rig import Rig, fork_pool_class

    kept: list[Any] = []
    case = {
        "config": json.loads(FLASH_CONFIG.read_text()),
        "argv": RACE_ARGV,
        "env": {},
        "available_bytes": RACE_BUDGET,
        "device": device,
    }
    run_case(case, _release_version(), keep=kept)
    pool = kept[0]
    if fork:
        pool.__class__ = fork_pool_class(mp)  # registering the counter wraps its override
    return Rig.over(pool, cc.LayerDoneCounter, cc.device_module, ops)


def _release_version() -> tuple[int, ...]:
    import sglang.srt.mem_cache.deepseek_v4_memory_pool as mp

    parts = Path(mp.__file__).resolve().parents[3].name.split(".")[:3]
    return tuple(int(p) for p in parts)


def run_case(
    make_rig: Callable[[], Any], out_dir: Path, rank: str, verify: float, probe: Any = None
) -> dict:
    """Attach a probe (before the SGLang modules are imported) and run LOADS load-backs; or,
    given one already attached (a release's modules import once per process), zero its counts
    the way a forked SGLang worker does and run on it."""
    from exporter.probe.boot import attach
    from exporter.probe.writer import Reporter

    if probe is None:
        probe = _probe(out_dir, rank, verify)
        watcher = attach(probe)
    else:
        probe.reset_after_fork()
        watcher = None
    try:
        rig = make_rig()
        results = [rig.load_and_forward() for _ in range(LOADS)]
        rig.ops.synchronize()
        _settle(probe)
        Reporter(probe).tick()
    finally:
        if watcher is not None:
            watcher.uninstall()
    c = probe.counters
    return {
        "probe": probe,
        "reads": sum(r.index_k_reads for r in results),
        "stale": sum(len(r.stale_reads) for r in results),
        "totals": c.totals(),
        "gap": c.gap,
        "checks": c.checks,
        "mismatches": c.mismatches,
        "gap_source": c.gap_source,
        "errors": c.errors,
        "holds": rig.holds,
        "gate": rig.ops.gate_mechanism,
        "watchdog": getattr(rig.ops, "watchdog_opened", 0),
    }


def judge(label: str, r: dict, fork: bool, device: str, check: Check) -> dict:
    """The checks of one case; returns its JSON record."""
    t, gap, reads = r["totals"], r["gap"], r["reads"]
    timed = device == "cuda"
    check(f"{label}: reads made", reads > 0, reads)
    check(f"{label}: gate opened by the rig, not its watchdog", r["watchdog"] == 0, r["watchdog"])
    check(f"{label}: probe errors", r["errors"] == 0, r["errors"])
    check(f"{label}: main KV reads gated", t["kv_ungated"] == 0, t["kv_ungated"])
    if device != "meta":
        check(
            f"{label}: loads completed",
            t["loads_completed"] == t["loads_started"],
            (t["loads_started"], t["loads_completed"]),
        )
        check(f"{label}: gap clock", r["gap_source"] == "device_events", r["gap_source"])
    if timed:
        check(f"{label}: checksums ran", r["checks"] > 0, r["checks"])
    if fork:
        if device != "meta":
            check(f"{label}: every index-K read stale (all bytes)", r["stale"] == reads, r["stale"])
            check(f"{label}: one gap per read", gap.count == reads, gap.count)
            check(f"{label}: every gap > 0", gap.counts[0] == 0, gap.counts)
        check(f"{label}: counted ungated", t["index_k_ungated"] == reads, t["index_k_ungated"])
        if timed:
            check(
                f"{label}: checksum mismatch on every read",
                r["mismatches"] == r["checks"] == reads,
                (r["mismatches"], r["checks"]),
            )
            hold = min(r["holds"])
            mean_gap = gap.sum / gap.count if gap.count else 0.0
            check(
                f"{label}: gap ~ the hold (0.5x-20x)",
                0.5 * hold <= mean_gap <= 20 * max(r["holds"]),
                f"mean gap {mean_gap * 1e3:.1f} ms, hold {hold * 1e3:.1f} ms",
            )
    else:
        check(f"{label}: no stale read", r["stale"] == 0, r["stale"])
        check(f"{label}: no ungated read", t["index_k_ungated"] == 0, t["index_k_ungated"])
        check(f"{label}: all reads gated", t["index_k_gated"] == reads, t["index_k_gated"])
        check(f"{label}: no gap", gap.count == 0, gap.count)
        if timed:
            check(f"{label}: checksums match", r["mismatches"] == 0, (r["mismatches"], r["checks"]))
    return {
        "reads": reads,
        "stale": r["stale"],
        "index_k_gated": t["index_k_gated"],
        "index_k_ungated": t["index_k_ungated"],
        "gaps": gap.count,
        "gap_mean_ms": round(gap.sum / gap.count * 1e3, 3) if gap.count else None,
        "hold_ms": [round(h * 1e3, 2) for h in r["holds"]],
        "checks": r["checks"],
        "mismatches": r["mismatches"],
        "gap_source": r["gap_source"],
        "gate": r["gate"],
    }


def _cuda_ops(torch: Any, gate: Any) -> Any:
    from tests.probe.rig import TorchOps

    return TorchOps(torch, gate, hold_s=HOLD_S)


def standin_cases(torch: Any, gate: Any, snap_dir: Path, check: Check) -> dict:
    """The stand-in pools, gated (rank 0) and ungated (rank 1); files read back by the sidecar."""
    from tests.probe.rig import SimOps, forget_standins

    device = "cuda" if torch is not None else "simulated"
    if torch is not None:
        os.environ["FAKE_SGLANG_DEVICE"] = "cuda"
    out: dict[str, Any] = {}
    for label, rank, fork in (("gated", "0", False), ("ungated", "1", True)):
        forget_standins()

        def make(fork: bool = fork) -> Any:
            if torch is not None:
                return _standin_rig(lambda: _cuda_ops(torch, gate), fork)
            return _standin_rig(SimOps, fork)

        result = run_case(make, snap_dir, rank, verify=1.0)
        out[label] = judge(f"stand-ins {label}", result, fork, device, check)
    forget_standins()
    out["metrics"] = _sidecar_view(snap_dir, out, check)
    return out


def _sidecar_view(snap_dir: Path, cases: dict, check: Check) -> str:
    """The snapshot files as the sidecar's ProbeFileSource exports them."""
    from prometheus_client import CollectorRegistry, generate_latest

    from exporter.sources.probe_files import ProbeFileSource

    source = ProbeFileSource(snap_dir)
    asyncio.run(source.poll_once())
    registry = CollectorRegistry()
    registry.register(source)
    text = generate_latest(registry).decode()
    ungated = cases["ungated"]["reads"]
    line = f'dsv4_hicache_index_k_reads_total{{gated="false",rank="1"}} {ungated}.0'
    check("sidecar: ungated reads exported", line in text, line)
    line = 'dsv4_hicache_index_k_reads_total{gated="false",rank="0"} 0.0'
    check("sidecar: gated pool exports zero ungated", line in text, line)
    line = f'dsv4_hicache_transfer_gap_seconds_count{{rank="1"}} {ungated}.0'
    check("sidecar: gap histogram count", line in text, line)
    return text


def release_cases(release: Path, torch: Any, gate: Any, snap_dir: Path, check: Check) -> dict:
    """One release's own classes (call once per process: a release imports once)."""
    from exporter.probe.boot import attach
    from tests.conformance.native_stubs import install

    install(str(release))
    device = "cuda" if torch is not None and torch.cuda.is_available() else "meta"
    out: dict[str, Any] = {"device": device}
    probe = _probe(snap_dir, "10", 1.0 if device == "cuda" else 0.0)
    attach(probe)  # before the release's modules are imported, as the .pth hook does
    for label, rank, fork in (("gated", "10", False), ("ungated", "11", True)):

        def make(fork: bool = fork) -> Any:
            import torch as t

            ops = _cuda_ops(t, gate) if device == "cuda" else MetaOps(t)
            return _release_rig(ops, fork, device)

        result = run_case(make, snap_dir, rank, verify=probe.config.verify_rate, probe=probe)
        out[label] = judge(f"sglang {release.name} {label}", result, fork, device, check)
    return out


def time_calls(torch: Any, patched: bool, fork: bool, bound: bool, calls: int = 3000) -> float:
    """ns per index-K accessor call on the stand-in rig on the GPU, probe on or off."""
    from exporter.probe.boot import attach
    from tests.probe.rig import TorchOps, forget_standins

    forget_standins()
    probe = _probe(Path(tempfile.mkdtemp()), "9", 0.0)
    watcher = attach(probe) if patched else None
    try:
        rig = _standin_rig(lambda: TorchOps(torch, None, nbytes=1 << 20), fork)
        rig.load_and_forward()
        rig.controller.load(None, None)
        producer = rig.controller.start_loading()
        rig.counter.set_consumer(producer if bound else -1)
        torch.cuda.synchronize()
        layers = [i for i, r in rig.layers() if r == 4]
        samples = []
        with rig.ops.stream(rig.forward_stream):
            for _ in range(5):
                start = time.perf_counter_ns()
                for i in range(calls):
                    rig.pool.get_index_k_with_scale_buffer(layers[i % len(layers)])
                samples.append((time.perf_counter_ns() - start) / calls)
                probe.pending_gaps.clear()
        torch.cuda.synchronize()
        return statistics.median(samples)
    finally:
        if watcher is not None:
            watcher.uninstall()
        forget_standins()


OVERHEAD_MODES = (
    ("decode", False, False),  # no load bound: every decode step
    ("gated_load", False, True),  # a prefill reading a loaded prefix, gated
    ("ungated_load", True, True),  # the failure path: a CUDA event per read
)


def overhead(torch: Any) -> dict[str, dict[str, float]]:
    """Per accessor call, probe off and on, in each mode (stand-in pool, real CUDA tensors)."""
    os.environ["FAKE_SGLANG_DEVICE"] = "cuda"
    out = {}
    for name, fork, bound in OVERHEAD_MODES:
        base = time_calls(torch, False, fork, bound)
        wrapped = time_calls(torch, True, fork, bound)
        out[name] = {
            "unwrapped_ns": base,
            "wrapped_ns": wrapped,
            "overhead_us": (wrapped - base) / 1e3,
        }
    return out


def main(argv: list[str] | None = None) -> int:
    """Run one part and write its checks and figures as JSON (``--json``; check.py reads it)."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--simulated", action="store_true")
    parser.add_argument("--release", type=Path, help="a released SGLang's source tree")
    parser.add_argument("--overhead", action="store_true", help="time the wrapped accessors")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO))
    torch = gate = None
    if not args.simulated:
        import torch

        if not args.overhead:
            from tests.gpu.cuda_gate import Gate

            gate = Gate(torch)
    checks: list[dict[str, Any]] = []

    def check(name: str, ok: bool, detail: object) -> None:
        print(f"[{'ok' if ok else 'FAIL'}] {name}: {detail}", file=sys.stderr)
        checks.append({"name": name, "ok": bool(ok), "detail": str(detail)})

    snap = Path(tempfile.mkdtemp(prefix="dsv4-probe-"))
    report: dict[str, Any]
    if args.overhead:
        report = {"overhead": overhead(torch)}
    elif args.release is not None:
        report = {
            "release": args.release.name,
            **release_cases(args.release, torch, gate, snap, check),
        }
    else:
        report = standin_cases(torch, gate, snap, check)
        report.pop("metrics")
    result = {"checks": checks, "report": report, "gate": gate.mechanism if gate else None}
    text = json.dumps(result, indent=2, default=str)
    if args.json is not None:
        args.json.write_text(text)
    else:
        print(text)
    failed = [c["name"] for c in checks if not c["ok"]]
    print(f"{'PASS' if not failed else 'FAIL'}: {len(failed)} failed", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
