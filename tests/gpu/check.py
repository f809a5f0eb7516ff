"""``make gpu-check``: every GPU claim of the project, checked in one call, one table.

    python -m tests.gpu.check [--simulated] [--json PATH] [--releases 0.5.12,0.5.20,0.5.23]

Each part runs in its own process with a time limit, so one failing or hanging part is
reported and the others still run:

1. the device-side gate's self-test (tests/gpu/cuda_gate.py);
2. the race harness on the stand-ins, gated and ungated, read back by the sidecar;
3. the race harness on each released SGLang's own counter and pool;
4. the sidecar's NVML source against ``nvidia-smi`` through a 20 GiB allocation and release;
5. each release's own pool on the GPU for Flash fp8 / fp4 / bf16 fork / MTP and Pro, against
   ``plan``: tensor bytes exact, device bytes against the caching-allocator model;
6. the probe's overhead per accessor call and per decode step, against 0.5% of a decode step.

``--simulated`` (CI, no GPU): the stand-ins on the simulated device, the releases on torch's
meta device, the fake NVML; parts that need a GPU say so. Exit 0 only when every part ran and
passed. The JSON (``--json``, default ``$OUT/gpu-check.json`` when ``OUT`` is set) holds every
figure; docs/gpu-validation.md records the runs.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
RELEASES = ("0.5.12", "0.5.20", "0.5.23")  # the first, the forks' base, the newest
DECODE_STEP_MS = 20.0  # assumed: a DeepSeek-V4 decode step on H200 (no model runs here)
BUDGET_SHARE = 0.005  # the probe may cost at most 0.5% of a decode step
DEVICE_MODEL_TOLERANCE = 0.001  # device bytes within 0.1% of what PyTorch allocates
FIXTURES = REPO / "tests" / "fixtures"


@dataclass
class Row:
    part: str
    check: str
    ok: bool | None  # None: not run here (says why)
    figures: str


@dataclass
class Report:
    rows: list[Row] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)

    def add(self, part: str, check: str, ok: bool | None, figures: str) -> None:
        self.rows.append(Row(part, check, ok, figures))


def _run(args: list[str], timeout: float) -> tuple[int, str, str]:
    """One part in its own process; its stderr is appended to ``$DSV4_GPU_CHECK_LOG`` when set
    (the first thing to read when a part fails on a machine you cannot log in to)."""
    cap = os.environ.get("DSV4_GPU_PART_TIMEOUT")  # a short lease: no part may take it all
    timeout = min(timeout, float(cap)) if cap else timeout
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "SGLANG_LOGGING_LEVEL": "ERROR"}
    try:
        done = subprocess.run(
            [sys.executable, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=REPO,
            env=env,
        )
        rc, out, err = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as exc:
        rc, out, err = (
            124,
            _text(exc.stdout),
            _text(exc.stderr) + f"\ntimed out after {timeout:.0f} s",
        )
    log = os.environ.get("DSV4_GPU_CHECK_LOG")
    if log:
        with open(log, "a") as fh:
            fh.write(f"\n===== {' '.join(args)} (exit {rc})\n{err}")
    return rc, out, err


def _text(data: str | bytes | None) -> str:
    if isinstance(data, bytes):
        return data.decode(errors="replace")
    return data or ""


def _tail(text: str, n: int = 1500) -> str:
    return text[-n:].strip()


def gate_part(report: Report, simulated: bool) -> None:
    if simulated:
        report.add("gate", "device-side gate holds a stream", None, "needs CUDA")
        return
    _rc, out, err = _run(["-m", "tests.gpu.cuda_gate"], 120)
    try:
        result = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        report.add("gate", "device-side gate holds a stream", False, _tail(err, 400))
        return
    report.data["gate"] = result
    ok = result["held_while_shut"] and result["released"]
    report.add("gate", "device-side gate holds a stream", ok, json.dumps(result))


def race_part(report: Report, simulated: bool, release: Path | None) -> None:
    part = f"race sglang {release.name}" if release else "race stand-ins"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "race.json"
        args = ["-m", "tests.gpu.race_harness", "--json", str(path)]
        args += ["--simulated"] if simulated else []
        args += ["--release", str(release)] if release else []
        rc, _out, err = _run(args, 300)
        if not path.exists():
            report.add(part, "harness ran", False, f"exit {rc}: {_tail(err)}")
            return
        result = json.loads(path.read_text())
    report.data[part] = result
    failed = [c for c in result["checks"] if not c["ok"]]
    for c in failed:
        report.add(part, c["name"], False, c["detail"])
    summary = []
    for label in ("gated", "ungated"):
        case = result["report"].get(label) or {}
        if case:
            gap = case.get("gap_mean_ms")
            summary.append(
                f"{label}: {case['stale']}/{case['reads']} stale, "
                f"ungated {case['index_k_ungated']}, gaps {case['gaps']}"
                + (f" (mean {gap} ms, hold {case['hold_ms'][0]} ms)" if gap else "")
                + (
                    f", checksum mismatches {case['mismatches']}/{case['checks']}"
                    if case["checks"]
                    else ""
                )
            )
    report.add(part, f"{len(result['checks'])} checks", not failed and rc == 0, "; ".join(summary))


def nvml_part(report: Report, simulated: bool) -> None:
    args = ["-m", "tests.gpu.nvml_check"] + (["--simulated"] if simulated else [])
    rc, out, err = _run(args, 180)
    try:
        result = json.loads(out)
    except ValueError:
        report.add("nvml", "sidecar NVML vs nvidia-smi", False, f"exit {rc}: {_tail(err)}")
        return
    report.data["nvml"] = result
    v = result["verdict"]
    label = "(fake NVML)" if simulated else ""
    report.add(
        "nvml",
        f"every figure to the MiB {label}".strip(),
        v["agree"],
        f"{len(result['rows'])} figures, {v['per_process_rows']} per-process; "
        + (f"mismatched: {v['mismatched'][:3]}" if v["mismatched"] else "all agree"),
    )
    report.add(
        "nvml",
        "used memory follows a 20 GiB allocation and release",
        v["growth_ok"] and v["released_ok"],
        f"growth {v['used_growth_bytes'] / 2**30:.4f} GiB",
    )


def pool_part(report: Report, simulated: bool, release: Path) -> None:
    part = f"pool sglang {release.name}"
    args = ["-m", "tests.gpu.pool_check", str(release)] + (["--simulated"] if simulated else [])
    rc, out, err = _run(args, 600)
    try:
        result = json.loads(out)
    except ValueError:
        report.add(part, "pool check ran", False, f"exit {rc}: {_tail(err)}")
        return
    report.data[part] = result
    for launch in result["launches"]:
        name = launch["launch"]
        if "error" in launch:
            report.add(part, name, False, launch["error"])
            continue
        if "not_applicable" in launch:
            report.add(part, name, None, launch["not_applicable"])
            continue
        if "refused" in launch:
            model_refuses = bool(launch.get("model"))
            report.add(part, f"{name}: refused by SGLang", model_refuses, launch["refused"][:160])
            continue
        pools_equal = all(p["release"] == p["model"] for p in launch["pools"].values())
        tokens_equal = launch["full_tokens"]["release"] == launch["full_tokens"]["model"]
        tb = launch["tensor_bytes"]
        report.add(
            part,
            f"{name}: tensor bytes = plan",
            pools_equal and tokens_equal,
            f"{tb['release']:,} B, full tokens {launch['full_tokens']['release']:,}",
        )
        measured = launch.get("measured")
        model = launch.get("device_model")
        if measured is None or model is None:
            report.add(part, f"{name}: device bytes", None, "measured on CUDA only")
            continue
        errs = {
            k: (model[k] - measured[k]) / measured[k] if measured[k] else 0.0
            for k in ("allocated", "reserved")
        }
        ok = all(abs(e) <= DEVICE_MODEL_TOLERANCE for e in errs.values())
        over = measured["reserved"] - tb["release"]
        report.add(
            part,
            f"{name}: device bytes model within 0.1%",
            ok,
            f"allocated {measured['allocated']:,} (model {errs['allocated']:+.4%}), "
            f"reserved {measured['reserved']:,} (model {errs['reserved']:+.4%}), "
            f"+{over / tb['release']:.3%} over tensors; NVML used +{measured['nvml_used']:,} "
            f"(+{(measured['nvml_used'] - tb['release']) / tb['release']:.3%})",
        )


def calls_per_decode_step(model: str) -> int:
    """Wrapped accessor calls in one decode step, from the layer mix (inferred, per layer: SWA
    KV; compressed KV and attention state on c4/c128 layers; index-K and indexer state on c4)."""
    config = json.loads((FIXTURES / f"deepseek-v4-{model}.config.json").read_text())
    ratios = config["compress_ratios"][: config["num_hidden_layers"]]  # past them: MTP layers
    return sum(1 + (2 if r else 0) + (2 if r == 4 else 0) for r in ratios)


def overhead_part(report: Report, simulated: bool, step_ms: float) -> None:
    if simulated:
        report.add("overhead", "probe cost per decode step", None, "needs CUDA")
        return
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "overhead.json"
        rc, _out, err = _run(
            ["-m", "tests.gpu.race_harness", "--overhead", "--json", str(path)], 300
        )
        if not path.exists():
            report.add("overhead", "timed", False, f"exit {rc}: {_tail(err)}")
            return
        result = json.loads(path.read_text())["report"]["overhead"]
    report.data["overhead"] = result
    for mode, r in result.items():
        report.add(
            "overhead",
            f"per call, {mode}",
            None,
            f"+{r['overhead_us']:.2f} µs ({r['unwrapped_ns']:.0f} -> {r['wrapped_ns']:.0f} ns)",
        )
    per_call_us = max(0.0, result["decode"]["overhead_us"])
    budget_us = step_ms * 1e3 * BUDGET_SHARE
    for model in ("flash", "pro"):
        calls = calls_per_decode_step(model)
        cost = calls * per_call_us
        report.data.setdefault("decode_step", {})[model] = {"calls": calls, "cost_us": cost}
        report.add(
            "overhead",
            f"{model}: per decode step <= 0.5% of {step_ms:g} ms (assumed step)",
            cost <= budget_us,
            f"{calls} calls x {per_call_us:.2f} µs = {cost:.0f} µs; budget {budget_us:.0f} µs; "
            f"holds for steps >= {cost / BUDGET_SHARE / 1e3:.1f} ms",
        )


def environment(simulated: bool) -> dict[str, Any]:
    env: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "python": platform.python_version(),
        "mode": "simulated" if simulated else "cuda",
    }
    try:
        import torch

        env["torch"] = torch.__version__
        if not simulated and torch.cuda.is_available():
            env["device"] = torch.cuda.get_device_name()
    except ImportError:
        env["torch"] = None
    if not simulated:
        try:
            env["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=30,
            ).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            env["driver"] = None
    return env


def render(report: Report, env: dict[str, Any]) -> str:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"dsv4-sidecar gpu-check ({env['mode']}: {env.get('device', 'no GPU')})")
    for col in ("part", "check", "result", "figures"):
        table.add_column(col, overflow="fold")
    for r in report.rows:
        result = "n/a" if r.ok is None else ("ok" if r.ok else "FAIL")
        table.add_row(r.part, r.check, result, r.figures)
    console = Console(width=160, record=True, file=io.StringIO())
    console.print(table)
    return console.export_text()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--simulated", action="store_true", help="no GPU: CI's mode")
    parser.add_argument("--json", type=Path, help="where to write every figure")
    parser.add_argument("--releases", default=",".join(RELEASES))
    parser.add_argument("--decode-step-ms", type=float, default=DECODE_STEP_MS)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(REPO))
    from tests.sglang_release import release_dir

    t0 = time.monotonic()
    env = environment(args.simulated)
    report = Report(data={"environment": env})
    releases = [release_dir(v) for v in args.releases.split(",") if v]
    out = args.json or (
        Path(os.environ["OUT"]) / "gpu-check.json" if os.environ.get("OUT") else None
    )
    parts = [
        lambda: gate_part(report, args.simulated),
        lambda: race_part(report, args.simulated, None),
    ]
    parts += [lambda r=r: race_part(report, args.simulated, r) for r in releases]
    parts += [lambda: nvml_part(report, args.simulated)]
    parts += [lambda r=r: pool_part(report, args.simulated, r) for r in releases]
    parts += [lambda: overhead_part(report, args.simulated, args.decode_step_ms)]
    for part in parts:
        part()
        report.data["rows"] = [r.__dict__ for r in report.rows]
        if out is not None:  # after every part: a run cut short still leaves what it found
            out.write_text(json.dumps(report.data, indent=2, default=str))
    env["seconds"] = round(time.monotonic() - t0, 1)
    print(render(report, env))
    failed = [r for r in report.rows if r.ok is False]
    print(
        f"{'PASS' if not failed else 'FAIL'}: {len(failed)} failed, "
        f"{sum(1 for r in report.rows if r.ok is None)} not run here, {env['seconds']} s"
    )
    out = args.json or (
        Path(os.environ["OUT"]) / "gpu-check.json" if os.environ.get("OUT") else None
    )
    if out is not None:
        out.write_text(json.dumps(report.data, indent=2, default=str))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
