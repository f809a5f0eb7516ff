"""Runs in a child started with multiprocessing spawn from a venv that has only the probe's
``.pth`` hook: reports whether the probe activated there, and drives the stand-ins if it did.
Imports nothing but the standard library and the repository (no pytest in that venv)."""

from __future__ import annotations

import sys


def report(queue) -> None:
    boot = sys.modules.get("exporter.probe.boot")
    probe = boot.active() if boot is not None else None
    result = {"boot_imported": boot is not None, "active": probe is not None}
    if probe is not None:
        from tests.probe.rig import Rig, SimOps, fork_pool_class, import_standins

        cc, dsv4 = import_standins()
        Rig(cc, fork_pool_class(dsv4), SimOps()).load_and_forward()
        probe.resolve()
        result["hooks"] = sorted(k for k, v in probe.counters.hooks.items() if v)
        result["ungated"] = probe.counters.totals()["index_k_ungated"]
        result["written"] = str(probe.reporter.tick())
    queue.put(result)
