"""Reproduce the HiCache index-K race on a real GPU and prove the probe counts it.

Run on a CUDA machine (about a minute; needs torch with CUDA, nothing else)::

    python tests/gpu/race_harness.py          # exit 0 = every check passed
    pytest tests/gpu -m gpu                   # the same, skipped without CUDA

The SGLang stand-ins (tests/probe/fake_sglang) run on torch.cuda here: a HiCacheController
copies each layer host-to-device on a side (load) stream after a GPU sleep and records a
LayerLoadingEvent per layer; a forward pass on another stream reads every c4 layer's index-K
buffer through DeepSeekV4TokenToKVPool (which waits on the layer's event) or through ForkPool
(whose index-K accessor lost the wait). The probe is attached through its real post-import
hook, with CUDA timing events and sampled verification at rate 1.0. Checks:

* gated pool: no stale read, ungated index-K reads = 0, no gap, checksums all match;
* fork pool: every index-K read stale, every one counted ungated, one gap each (> 0),
  checksum mismatches > 0, while the main KV accessors stay gated;
* the snapshot files, read back by the sidecar's ProbeFileSource, render those numbers;
* per-call overhead of the wrapped accessors against unwrapped classes (printed).

Results also go to $OUT (or DSV4_HARNESS_OUT) as harness.json and metrics.txt when set.
``--simulated`` runs the same flow on the CPU's simulated device (no torch; checksums, which
need CUDA, are skipped), so CI keeps the harness itself from rotting.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LOADS = 3


def _settle(probe, deadline_s: float = 10.0) -> None:
    """Resolve until every gap and verification is accounted for (events all fired)."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        probe.resolve()
        verifier = probe.verifier
        if not probe.pending_gaps and (verifier is None or not verifier.pending):
            return
        time.sleep(0.01)


class Backend:
    """Where the rig runs: torch.cuda, or the simulated device (``--simulated``)."""

    def __init__(self, torch) -> None:
        self.torch = torch
        self.name = "cuda" if torch is not None else "simulated"

    def ops(self, nbytes: int = 16 << 20, delay: bool = True):
        from tests.probe.rig import SimOps, TorchOps

        if self.torch is None:
            return SimOps()
        return TorchOps(self.torch, nbytes=nbytes, delay_cycles=40_000_000 if delay else 0)

    def synchronize(self) -> None:
        if self.torch is not None:
            self.torch.cuda.synchronize()
        else:
            from sglang.srt import fake_device

            fake_device.synchronize()


def run_case(backend: Backend, out_dir: Path, rank: str, fork: bool, verify: float):
    from exporter.probe.boot import attach
    from exporter.probe.config import ProbeConfig
    from exporter.probe.runtime import Probe
    from exporter.probe.writer import Reporter
    from tests.probe.rig import Rig, forget_standins, fork_pool_class, import_standins

    forget_standins()
    probe = Probe(ProbeConfig(directory=out_dir, rank=rank, verify_rate=verify))
    watcher = attach(probe)
    try:
        cc, dsv4 = import_standins()
        pool_cls = fork_pool_class(dsv4) if fork else dsv4.DeepSeekV4TokenToKVPool
        rig = Rig(cc, pool_cls, backend.ops())
        results = [rig.load_and_forward() for _ in range(LOADS)]
        backend.synchronize()
        _settle(probe)
        Reporter(probe).tick()
    finally:
        watcher.uninstall()
    return probe, rig, results


def time_calls(
    backend: Backend, patched: bool, fork: bool, bound: bool, calls: int = 3000
) -> float:
    """ns per index-K accessor call on the GPU rig, probe on or off."""
    from exporter.probe.boot import attach
    from exporter.probe.config import ProbeConfig
    from exporter.probe.runtime import Probe
    from tests.probe.rig import Rig, forget_standins, fork_pool_class, import_standins

    forget_standins()
    probe = Probe(ProbeConfig(directory=Path(tempfile.mkdtemp()), rank="9"))
    watcher = attach(probe) if patched else None
    try:
        cc, dsv4 = import_standins()
        pool_cls = fork_pool_class(dsv4) if fork else dsv4.DeepSeekV4TokenToKVPool
        rig = Rig(cc, pool_cls, backend.ops(nbytes=1 << 20, delay=False))
        rig.load_and_forward()
        rig.controller.load(None, None)
        producer = rig.controller.start_loading()
        rig.counter.set_consumer(producer if bound else -1)
        backend.synchronize()
        layers = [i for i, r in enumerate(rig.pool.compression_ratios) if r == 4]
        samples = []
        with rig.ops.stream(rig.forward_stream):
            for _ in range(5):
                start = time.perf_counter_ns()
                for i in range(calls):
                    rig.pool.get_index_k_with_scale_buffer(layers[i % len(layers)])
                samples.append((time.perf_counter_ns() - start) / calls)
                probe.pending_gaps.clear()
        backend.synchronize()
        return statistics.median(samples)
    finally:
        if watcher is not None:
            watcher.uninstall()


def main(argv: list[str] | None = None) -> int:
    simulated = "--simulated" in (sys.argv[1:] if argv is None else argv)
    torch = None
    if not simulated:
        try:
            import torch
        except ImportError:
            print("SKIP: torch is not installed")
            return 0
        if not torch.cuda.is_available():
            print("SKIP: CUDA is not available")
            return 0
        os.environ["FAKE_SGLANG_DEVICE"] = "cuda"
    backend = Backend(torch)
    sys.path.insert(0, str(REPO))
    from exporter.sources.probe_files import ProbeFileSource
    from tests.probe.rig import RATIOS

    c4 = sum(1 for r in RATIOS if r == 4)
    expected_reads = LOADS * c4
    out_env = os.environ.get("OUT") or os.environ.get("DSV4_HARNESS_OUT")
    out_dir = Path(out_env) if out_env else Path(tempfile.mkdtemp(prefix="dsv4-harness-"))
    snap_dir = Path(tempfile.mkdtemp(prefix="dsv4-probe-"))
    failures: list[str] = []
    report: dict = {
        "device": torch.cuda.get_device_name() if torch is not None else "simulated",
        "torch": torch.__version__ if torch is not None else None,
    }

    def check(name: str, ok: bool, detail: object) -> None:
        print(f"[{'ok' if ok else 'FAIL'}] {name}: {detail}")
        if not ok:
            failures.append(name)

    t0 = time.monotonic()
    for label, rank, fork in (("gated", "0", False), ("ungated", "1", True)):
        probe, _rig, results = run_case(backend, snap_dir, rank, fork, verify=1.0)
        totals = probe.counters.totals()
        gap = probe.counters.gap
        stale = sum(len(r.stale_reads) for r in results)
        c = probe.counters
        report[label] = {
            "totals": totals,
            "stale_reads": stale,
            "gap": gap.as_dict(),
            "checks": c.checks,
            "mismatches": c.mismatches,
            "gap_source": c.gap_source,
            "errors": c.errors,
        }
        check(f"{label}: gap clock", c.gap_source == "device_events", c.gap_source)
        check(f"{label}: probe errors", c.errors == 0, c.errors)
        check(
            f"{label}: loads completed",
            totals["loads_completed"] == totals["loads_started"],
            (totals["loads_started"], totals["loads_completed"]),
        )
        check(f"{label}: main KV reads gated", totals["kv_ungated"] == 0, totals["kv_ungated"])
        if torch is not None:
            check(f"{label}: checksums ran", c.checks > 0, c.checks)
        if fork:
            check("ungated: every index-K read stale", stale == expected_reads, stale)
            check(
                "ungated: counted ungated",
                totals["index_k_ungated"] == expected_reads,
                totals["index_k_ungated"],
            )
            check("ungated: one gap per read", gap.count == expected_reads, gap.count)
            check("ungated: every gap > 0", gap.counts[0] == 0, gap.counts)
            if torch is not None:
                check("ungated: checksum mismatches", c.mismatches > 0, (c.mismatches, c.checks))
        else:
            check("gated: no stale read", stale == 0, stale)
            check("gated: no ungated read", totals["index_k_ungated"] == 0, totals)
            check(
                "gated: all reads gated",
                totals["index_k_gated"] == expected_reads,
                totals["index_k_gated"],
            )
            check("gated: no gap", gap.count == 0, gap.count)
            if torch is not None:
                check("gated: checksums match", c.mismatches == 0, (c.mismatches, c.checks))

    source = ProbeFileSource(snap_dir)
    source.poll_once()
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry()
    registry.register(source)
    text = generate_latest(registry).decode()
    line_ungated = f'dsv4_hicache_index_k_reads_total{{gated="false",rank="1"}} {expected_reads}.0'
    line_gated = 'dsv4_hicache_index_k_reads_total{gated="false",rank="0"} 0.0'
    check("metrics: ungated path visible", line_ungated in text, line_ungated)
    check("metrics: gated path zero", line_gated in text, line_gated)
    check(
        "metrics: gap histogram",
        f'dsv4_hicache_transfer_gap_seconds_count{{rank="1"}} {expected_reads}.0' in text,
        "count line",
    )

    overhead = {}
    for name, fork, bound in (
        ("decode (no load bound)", False, False),
        ("gated read, load bound", False, True),
        ("ungated read, load bound (+CUDA event)", True, True),
    ):
        base = time_calls(backend, False, fork, bound)
        wrapped = time_calls(backend, True, fork, bound)
        overhead[name] = {
            "unwrapped_ns": base,
            "wrapped_ns": wrapped,
            "overhead_us": (wrapped - base) / 1000,
        }
        print(
            f"overhead {name}: {base:.0f} -> {wrapped:.0f} ns/call "
            f"(+{(wrapped - base) / 1000:.2f} µs)"
        )
    report["overhead"] = overhead
    report["seconds"] = round(time.monotonic() - t0, 1)
    report["failures"] = failures
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "harness.json").write_text(json.dumps(report, indent=2))
    (out_dir / "metrics.txt").write_text(text)
    print(f"{'PASS' if not failures else 'FAIL'}: {len(failures)} failed; results in {out_dir}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
