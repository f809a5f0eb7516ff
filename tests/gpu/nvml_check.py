"""The sidecar's NVML source against ``nvidia-smi`` through a known allocation and its release.

Usage: ``python -m tests.gpu.nvml_check [--simulated]`` prints one JSON object.

Three moments: idle (CUDA context up), holding ``ALLOC_GIB`` GiB allocated by this process, and
after releasing them. At each, the sidecar's own ``NvmlSource`` polls (its worker thread, its
timeout) and its ``collect()`` is rendered to exposition text as ``/metrics`` would serve it;
``nvidia-smi`` is asked the same in MiB. Every figure must agree to the MiB, the per-process
memory included, and the used memory must move by the allocation.

``--simulated`` puts the fake NVML (exporter/sim/fake_nvml.py) behind the source and answers the
``nvidia-smi`` side from the same fake: it proves the comparison code runs, nothing about a GPU.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from typing import Any

from exporter.units import GIB, MIB

ALLOC_GIB = 20
FIELDS = ("total", "used", "free", "reserved")


def sidecar_view(nvml: Any = None) -> dict[str, Any]:
    """One poll of the sidecar's NVML source, read back from its exposition text."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from exporter.sources.nvml import NvmlSource

    source = NvmlSource(nvml=nvml, per_process=True, timeout=10.0)
    try:
        asyncio.run(source.poll_once())
        registry = CollectorRegistry()
        registry.register(source)
        text = generate_latest(registry).decode()
    finally:
        source.close()
    out: dict[str, Any] = {"processes": {}, "up": source.health.up}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("gpu") != "0":
                continue
            for field in FIELDS:
                if sample.name == f"dsv4_gpu_memory_{field}_bytes":
                    out[field] = int(sample.value)
            if sample.name == "dsv4_gpu_process_memory_used_bytes":
                out["processes"][sample.labels["pid"]] = int(sample.value)
    return out


def smi_view() -> dict[str, Any]:
    """nvidia-smi's figures for GPU 0, in bytes (it prints MiB)."""
    query = "memory.total,memory.used,memory.free,memory.reserved"
    row = subprocess.run(
        ["nvidia-smi", "-i", "0", f"--query-gpu={query}", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout.strip()
    values = [v.strip() for v in row.split(",")]
    out: dict[str, Any] = {"processes": {}}
    for field, value in zip(FIELDS, values, strict=False):
        if value.isdigit():
            out[field] = int(value) * MIB
    apps = subprocess.run(
        [
            "nvidia-smi",
            "-i",
            "0",
            "--query-compute-apps=pid,used_memory",
            "--format=csv,noheader,nounits",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout
    for line in apps.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
            out["processes"][parts[0]] = int(parts[1]) * MIB
    return out


def compare(moment: str, side: dict[str, Any], smi: dict[str, Any]) -> list[dict[str, Any]]:
    """Each figure to the MiB (nvidia-smi rounds down to whole MiB)."""
    rows = []
    for field in FIELDS:
        if field not in smi:
            rows.append({"moment": moment, "field": field, "ok": None, "detail": "smi: n/a"})
            continue
        got = side.get(field)
        ok = got is not None and abs(got // MIB - smi[field] // MIB) <= 1
        rows.append({"moment": moment, "field": field, "ok": ok, "sidecar": got, "smi": smi[field]})
    pids = set(side["processes"]) | set(smi["processes"])
    for pid in sorted(pids):
        a, b = side["processes"].get(pid), smi["processes"].get(pid)
        ok = a is not None and b is not None and abs(a // MIB - b // MIB) <= 1
        rows.append({"moment": moment, "field": f"process {pid}", "ok": ok, "sidecar": a, "smi": b})
    return rows


def run_cuda() -> dict[str, Any]:
    import torch

    torch.zeros(1, device="cuda")  # the CUDA context exists before the idle reading
    torch.cuda.synchronize()
    views: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    for moment in ("idle", "holding", "released"):
        if moment == "holding":
            block = torch.ones(ALLOC_GIB * GIB, dtype=torch.uint8, device="cuda")
            torch.cuda.synchronize()
        if moment == "released":
            del block
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        side, smi = sidecar_view(), smi_view()
        views[moment] = {"sidecar": side, "smi": smi}
        rows += compare(moment, side, smi)
    return {"rows": rows, "views": views, "pid": os.getpid()}


def run_simulated() -> dict[str, Any]:
    from exporter.sim.fake_nvml import FakeNvml

    held = [0]
    fake = FakeNvml(count=1, workload=lambda _i: (held[0], 0))

    def smi() -> dict[str, Any]:
        fake.nvmlInit()
        mem = fake.nvmlDeviceGetMemoryInfo(
            fake.nvmlDeviceGetHandleByIndex(0), version=fake.nvmlMemory_v2
        )
        return {
            "total": int(mem.total) // MIB * MIB,
            "used": int(mem.used) // MIB * MIB,
            "free": int(mem.free) // MIB * MIB,
            "reserved": int(mem.reserved) // MIB * MIB,
            "processes": {
                str(p.pid): int(p.usedGpuMemory) // MIB * MIB
                for p in fake.nvmlDeviceGetComputeRunningProcesses(
                    fake.nvmlDeviceGetHandleByIndex(0)
                )
            },
        }

    views: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    for moment, hold in (("idle", 0), ("holding", ALLOC_GIB * GIB), ("released", 0)):
        held[0] = hold
        side, reference = sidecar_view(fake), smi()
        views[moment] = {"sidecar": side, "smi": reference}
        rows += compare(moment, side, reference)
    return {"rows": rows, "views": views, "pid": os.getpid()}


def verdict(result: dict[str, Any]) -> dict[str, Any]:
    """Figures agree at every moment; used grew by the allocation and came back."""
    views = result["views"]
    used = {m: views[m]["sidecar"].get("used") or 0 for m in views}
    grew = used["holding"] - used["idle"]
    back = used["released"] - used["idle"]
    mismatched = [r for r in result["rows"] if r["ok"] is False]
    return {
        "agree": not mismatched,
        "mismatched": mismatched,
        "used_growth_bytes": grew,
        "growth_ok": ALLOC_GIB * GIB <= grew <= ALLOC_GIB * GIB + 64 * MIB,
        "released_ok": abs(back) <= 64 * MIB,
        "per_process_rows": sum(1 for r in result["rows"] if r["field"].startswith("process")),
    }


def main() -> None:
    result = run_simulated() if "--simulated" in sys.argv[1:] else run_cuda()
    result["verdict"] = verdict(result)
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
