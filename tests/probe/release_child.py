"""One released SGLang with the probe installed into its real classes (one release per process).

Usage: ``python -m tests.probe.release_child <release_dir> < case.json > result.json``

The probe is attached before SGLang's modules are imported, exactly as the ``.pth`` hook does
in a pod; then the release's own ``DSV4PoolConfigurator`` sizes the pools and its own
``DeepSeekV4TokenToKVPool`` is built on torch's meta device (the conformance oracle,
tests/conformance/oracle.py, does both, and also sums the pool's tensors its own way). The
child then drives the real ``LayerDoneCounter`` from the release's ``cache_controller``
(torch's CPU device module: real CPU events and streams) and the pool's real accessors:
outside a load (must not count), inside a bound load through the release's own gated
accessors, and inside a load with the pool's ``wait_layer_transfer`` removed on the instance
(a build that lost the gate: must count ungated). It reports what the probe recorded and
what the driving expected.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.conformance.native_stubs import install
from tests.conformance.oracle import run_case

# accessor -> extra positional arguments after layer_id (None: built per pool below)
EXTRA_ARGS: dict[str, str] = {
    "get_index_k_scale_buffer": "seq",
    "get_low_ratio_index_k_dequant": "slots",
    "get_low_ratio_index_k_fp4": "slots",
}


def _args(name: str, torch: Any) -> tuple[Any, ...]:
    kind = EXTRA_ARGS.get(name)
    if kind == "slots":
        return (torch.zeros(4, dtype=torch.int64, device="meta"),)
    if kind == "seq":
        seq = torch.ones(1, dtype=torch.int32, device="meta")
        pages = torch.zeros(1, 1, dtype=torch.int32, device="meta")
        return (seq, pages, 1, 1)
    return ()


def _drive(pool: Any, probe: Any, cc: Any, torch: Any) -> dict[str, Any]:
    from exporter.probe.snapshot import INDEX_K_HOOKS
    from exporter.probe.targets import POOL_METHODS

    start = pool.start_layer
    ratios = list(pool.compression_ratios)
    c4_layers = [i for i in range(start, pool.end_layer) if ratios[i] == 4]
    layer = c4_layers[0]
    n_local = pool.end_layer - start
    counter = cc.LayerDoneCounter(n_local)
    pool.register_layer_transfer_counter(counter)

    def call_all() -> dict[str, bool]:
        done = {}
        for m in POOL_METHODS:
            fn = getattr(pool, m.name, None)
            if fn is None:
                continue
            try:
                fn(layer, *_args(m.name, torch))
                done[m.hook] = True
            except Exception as exc:  # an accessor that needs a GPU kernel or another layout
                done[m.hook] = False
                done.setdefault("_errors", {})[m.name] = f"{type(exc).__name__}: {exc}"[:200]
        return done

    def totals() -> dict[str, int]:
        return probe.counters.totals()

    before = totals()
    outside = call_all()  # no load bound: nothing may count
    after_outside = totals()

    slot = counter.update_producer()
    for i in range(n_local):
        counter.events[slot].complete(i)
    counter.set_consumer(slot)
    gated_calls = call_all()
    after_gated = totals()

    counter.set_consumer(slot)  # a new forward pass bound to the load: no wait seen yet
    pool.wait_layer_transfer = lambda layer_id: None  # a build that lost the gate
    ungated_calls = call_all()
    after_ungated = totals()
    del pool.wait_layer_transfer
    counter.reset()

    def expected(calls: dict[str, Any]) -> dict[str, int]:
        ok = [h for h, v in calls.items() if v is True]
        return {
            "index_k": sum(1 for h in ok if h in INDEX_K_HOOKS),
            "kv": sum(1 for h in ok if h not in INDEX_K_HOOKS),
        }

    return {
        "layer": layer,
        "before": before,
        "after_outside": after_outside,
        "after_gated": after_gated,
        "after_ungated": after_ungated,
        "outside_calls": outside,
        "gated_calls": gated_calls,
        "ungated_calls": ungated_calls,
        "expected_gated": expected(gated_calls),
        "expected_ungated": expected(ungated_calls),
        "load_ops": probe.counters.load_ops,
        "layer_loads": probe.counters.totals()["loads_started"],
        "n_local": n_local,
    }


def main() -> None:
    release_dir = sys.argv[1]
    cases = json.load(sys.stdin)
    install(release_dir)

    from exporter.probe.boot import attach
    from exporter.probe.config import ProbeConfig
    from exporter.probe.runtime import Probe

    directory = Path(tempfile.mkdtemp(prefix="dsv4-probe-release-"))
    probe = Probe(ProbeConfig(directory=directory, rank="0", gap_mode="host"))
    built: list[Any] = []
    measure = probe.on_pool_built

    def keep(pool: Any) -> None:
        built.append(pool)
        measure(pool)

    probe.on_pool_built = keep  # type: ignore[method-assign]
    attach(probe)  # before SGLang's modules are imported, as the .pth hook does
    json.dump([run(case, probe, built, directory) for case in cases], sys.stdout)


def run(case: dict[str, Any], probe: Any, built: list[Any], directory: Path) -> dict[str, Any]:
    """One deployment: fresh counts (the wrappers stay; they read ``probe.counters``)."""
    import sglang.srt.managers.cache_controller as cc
    import torch

    from exporter.probe.snapshot import ProbeCounters, read_snapshot, write_snapshot

    probe.counters = ProbeCounters(hooks=dict(probe.counters.hooks))
    probe.states.clear()
    built.clear()
    version = tuple(int(x) for x in Path(sys.argv[1]).name.split(".")[:3])
    oracle = run_case(case, version)  # type: ignore[arg-type]
    path = write_snapshot(directory, "0", probe.counters)
    snap = read_snapshot(path)
    drive = _drive(built[0], probe, cc, torch) if built else None
    conf = snap.memory.configurator
    ik = snap.memory.index_k()
    out = {
        "oracle": oracle,
        "hooks": probe.counters.hooks,
        "errors": probe.counters.errors,
        "pools": [dict(p.bytes) for p in snap.memory.pools],
        "other_paths": [],
        "configurator": None
        if conf is None
        else {
            "available_bytes": conf.available_bytes,
            "page_size": conf.page_size,
            "bytes_per_full_token": conf.bytes_per_full_token,
            "fixed_bytes": dict(conf.fixed_bytes),
            "sizes": dict(conf.sizes),
        },
        "overcommit_bytes": snap.memory.overcommit_bytes,
        "index_k": None if ik is None else {"dtype": ik.dtype, "layout": ik.layout},
        "drive": drive,
    }
    return out


if __name__ == "__main__":
    os.environ.setdefault("SGLANG_LOGGING_LEVEL", "ERROR")
    main()
