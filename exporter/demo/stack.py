"""`make demo` / `dsv4-sidecar demo`, the stack: every process it starts and the load.

Starts the simulated SGLang (by default a bf16 index-K, HiCache-on, legacy-configurator
deployment: both failures live), the sidecar against it with fake NVML, the tap and the probe
snapshots, a real Prometheus (when its binary is available) scraping the sidecar and the
simulated SGLang's own /metrics with the alert rules rendered for the demo's short run, and a
load generator that ramps concurrency through the tap. What it shows is in
:mod:`exporter.demo.screen`. :meth:`Stack.stop` ends every process it started and removes its
temporary files.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path

from exporter.loadgen import Exchange, LoadGenerator

REPO_ALERTS = Path(__file__).resolve().parents[2] / "alerts"
DEMO_TOKEN = "demo-token"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(port: int, path: str, timeout: float = 2.0) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


@dataclass
class DemoOptions:
    index_k_dtype: str = "bf16"
    hicache: str = "on"
    configurator: str = "legacy"
    levels: tuple[int, ...] = (1, 4, 8, 16, 32, 64, 96)
    level_seconds: float = 10.0
    duration: float | None = None
    prometheus: bool = True
    tp_size: int = 8
    live: bool = True


@dataclass
class Stack:
    tmp: Path
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)
    alert_windows: str = ""  # which rule set Prometheus runs: DEMO_WINDOWS or PRODUCTION_WINDOWS

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
        deadline = time.monotonic() + 10
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=5)
        shutil.rmtree(self.tmp, ignore_errors=True)


class StackError(RuntimeError):
    """A part of the demo stack exited or never became ready; the message carries its log's
    tail (for the simulator, its own config error), shown without a traceback."""


def _spawn(stack: Stack, name: str, argv: list[str]) -> None:
    log = (stack.tmp / f"{name}.log").open("wb")
    stack.procs[name] = subprocess.Popen(
        argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
    )


def _wait_ready(stack: Stack, name: str, port: int, path: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        proc = stack.procs[name]
        if proc.poll() is not None:
            log = (stack.tmp / f"{name}.log").read_text(errors="replace")[-2000:]
            raise StackError(f"{name} exited with {proc.returncode}:\n{log}")
        with contextlib.suppress(OSError):
            if http_get(port, path)[0] < 500:
                return
        time.sleep(0.2)
    raise StackError(f"{name} did not become ready on port {port}")


def _wait_scraped(stack: Stack, port: int, jobs: tuple[str, ...], timeout: float = 30) -> None:
    """Until Prometheus has scraped every job once and its rules have seen it: before that,
    the meta rules see no `up` series and DSV4SidecarAbsent shows as pending on the first
    screen (an alert listed that never fires). A rule evaluation can fall between start-up
    and the first scrape, so `up` existing is not enough: the pending alert must be gone."""
    absent = urllib.parse.quote('ALERTS{alertname="DSV4SidecarAbsent"}')
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if stack.procs["prometheus"].poll() is not None:
            raise StackError("prometheus exited before its first scrape")
        with contextlib.suppress(OSError, ValueError, KeyError):
            _status, body = http_get(port, "/api/v1/query?query=up")
            up = {r["metric"]["job"] for r in json.loads(body)["data"]["result"]}
            _status, body = http_get(port, f"/api/v1/query?query={absent}")
            if up >= set(jobs) and not json.loads(body)["data"]["result"]:
                return
        time.sleep(0.2)
    raise StackError(f"prometheus did not scrape {', '.join(jobs)} within {timeout:.0f}s")


def start_stack(opts: DemoOptions) -> Stack:
    stack = Stack(Path(tempfile.mkdtemp(prefix="dsv4-demo-")))
    py = [sys.executable, "-m", "exporter"]
    p = stack.ports
    p.update(sim=free_port(), sidecar=free_port(), tap=free_port())
    probe_dir = stack.tmp / "probe"
    probe_dir.mkdir()
    try:
        _spawn(
            stack,
            "simulator",
            [
                *py,
                "simulate",
                "--port",
                str(p["sim"]),
                "--index-k-dtype",
                opts.index_k_dtype,
                "--hicache",
                opts.hicache,
                "--configurator",
                opts.configurator,
                "--tp-size",
                str(opts.tp_size),
                "--ttft-ms",
                "20",
                "--itl-ms",
                "5",
                "--probe-dir",
                str(probe_dir),
            ],
        )
        _wait_ready(stack, "simulator", p["sim"], "/health")
        _spawn(
            stack,
            "sidecar",
            [
                *py,
                "serve",
                "--host",
                "127.0.0.1",
                "--port",
                str(p["sidecar"]),
                "--tap-port",
                str(p["tap"]),
                "--tap-sample-rate",
                "1.0",
                "--sglang-url",
                f"http://127.0.0.1:{p['sim']}",
                "--gpu-backend",
                "fake",
                "--index-k-dtype",
                opts.index_k_dtype,
                "--sglang-poll-interval",
                "1",
                # Short canary rounds every 5 s: a minority of the graded samples next to the
                # load's long answers (at 1 s they were most samples at low concurrency, so
                # the output-length p50 moved with the load's size alone, not with loops).
                # DSV4CanaryFailing still fires early: the long canary below degenerates at
                # the load's concurrency.
                "--canary-interval",
                "5",
                # The long-generation canary (answers of 1,500-4,000 tokens, then a call) at
                # a small concurrency of its own. Its token budget is lifted for the demo
                # (production: 50k/h).
                "--canary-long",
                "true",
                "--canary-long-concurrency",
                "2",
                "--canary-long-interval",
                "1",
                "--canary-long-max-tokens",
                "4096",
                "--canary-long-tokens-per-hour",
                "1000000000",
                "--probe-dir",
                str(probe_dir),
                "--samples-token",
                DEMO_TOKEN,
                "--log-level",
                "warning",
            ],
        )
        _wait_ready(stack, "sidecar", p["sidecar"], "/healthz")
        prom = shutil.which("prometheus")
        if opts.prometheus and prom:
            p["prometheus"] = free_port()
            rules, stack.alert_windows = demo_rules(stack.tmp)
            cfg = stack.tmp / "prometheus.yml"
            cfg.write_text(prometheus_config(stack, rules))
            _spawn(
                stack,
                "prometheus",
                [
                    prom,
                    f"--config.file={cfg}",
                    f"--storage.tsdb.path={stack.tmp / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{p['prometheus']}",
                    "--log.level=warn",
                ],
            )
            _wait_ready(stack, "prometheus", p["prometheus"], "/-/ready")
            _wait_scraped(stack, p["prometheus"], ("dsv4-sidecar", "sglang"))
    except BaseException:
        stack.stop()
        raise
    return stack


def prometheus_config(stack: Stack, rules: list[str]) -> str:
    """Two jobs, as a deployment scrapes them: the sidecar (job dsv4-sidecar, what the rules
    select) and SGLang's own /metrics (job sglang: the dashboards read SGLang's queue, running
    requests, token usage and TTFT from it, with tp_rank intact)."""
    p = stack.ports
    jobs = {"dsv4-sidecar": p["sidecar"], "sglang": p["sim"]}
    return (
        "global:\n  scrape_interval: 2s\n  evaluation_interval: 2s\n"
        + ("rule_files:\n" + "".join(f"  - {r}\n" for r in rules) if rules else "")
        + "scrape_configs:\n"
        + "".join(
            f"  - job_name: {job}\n    static_configs:\n      - targets: ['127.0.0.1:{port}']\n"
            for job, port in jobs.items()
        )
    )


# The demo's alert knobs: the shipped rules with windows and `for:` short enough that every
# alert can fire within the three minutes a newcomer watches (every `for:` knob of
# alerts/config.py is here: tests/test_demo.py checks it). Production keeps alerts/config.py's
# defaults (5-30 minute `for:`), and the screen says which set is in force.
DEMO_KNOBS: dict[str, str | int] = {
    "kv_overcommit_for": "20s",
    "gpu_free_warning_for": "20s",
    "gpu_free_critical_for": "20s",
    "gpu_fill_for": "20s",
    "model_drift_for": "20s",
    "assumed_fact_for": "20s",
    "corruption_window": "2m",
    "corruption_min_samples": 20,
    "corruption_warning_for": "20s",
    "corruption_critical_for": "20s",
    "canary_stale_for": "20s",
    "canary_degenerate_window": "2m",
    "canary_degenerate_for": "10s",
    "index_k_window": "1m",
    "index_k_for": "10s",
    "risky_config_for": "10s",
    "sidecar_down_for": "20s",
    "sidecar_absent_for": "20s",
    "source_down_for": "20s",
    "probe_stale_for": "20s",
    "gpu_count_for": "20s",
    "deployment_risky_config_for": "10s",
    "deployment_overcommit_for": "20s",
    # Output length against the deployment's own baseline: a 30 s p50 against the median of
    # the p50 30 s, 1 m, ... 3.5 m ago (production: the same time of the last 7 days), so the
    # first, low-concurrency minute is the baseline the ramp inflates against.
    "length_window": "30s",
    "length_baseline_period": "30s",
    "length_baseline_periods": 7,
    "length_baseline_window": "10m",
    "length_inflation_for": "10s",
    "finish_length_for": "10s",
}
DEMO_WINDOWS = "demo"  # the short-window rules above
PRODUCTION_WINDOWS = "production"  # the committed rule file (fallback)


def demo_rules(tmp: Path) -> tuple[list[str], str]:
    """Render the rules with :data:`DEMO_KNOBS` into ``tmp``; the rule files and which
    windows they use. Falls back to the committed (production-window) rule file when the
    generator cannot run (no repository checkout: ``alerts/`` is not in the wheel)."""
    if not REPO_ALERTS.is_dir():
        return [], PRODUCTION_WINDOWS
    knobs, out = tmp / "demo-knobs.yaml", tmp / "demo.rules.yaml"
    knobs.write_text("".join(f"{k}: {v}\n" for k, v in DEMO_KNOBS.items()))
    r = subprocess.run(
        [sys.executable, "-m", "alerts.generate", "--config", str(knobs), "--out", str(out)],
        cwd=REPO_ALERTS.parent,
        capture_output=True,
        timeout=60,
    )
    if r.returncode == 0:
        return [str(out)], DEMO_WINDOWS
    return sorted(str(f) for f in REPO_ALERTS.glob("*.yaml")), PRODUCTION_WINDOWS


def urls(stack: Stack) -> list[str]:
    p = stack.ports
    out = [
        f"sidecar landing page  http://127.0.0.1:{p['sidecar']}/",
        f"sidecar metrics       http://127.0.0.1:{p['sidecar']}/metrics",
        f"bad samples           curl -H 'Authorization: Bearer {DEMO_TOKEN}' "
        f"http://127.0.0.1:{p['sidecar']}/api/v1/samples",
        f"tap (OpenAI API)      http://127.0.0.1:{p['tap']}/v1/models",
        f"simulated SGLang      http://127.0.0.1:{p['sim']}/server_info",
    ]
    if "prometheus" in p:
        out.append(
            f"Prometheus alerts     http://127.0.0.1:{p['prometheus']}{alerts_page(p['prometheus'])}"
        )
    return out


# Prometheus' alerts page: /alerts in the React UI, /classic/alerts where the React UI is not
# built in (Debian's 2.42 package answers 404 on /alerts); asked of the server, not assumed.
ALERTS_PAGES = ("/alerts", "/classic/alerts")


def alerts_page(port: int) -> str:
    """The first of :data:`ALERTS_PAGES` this Prometheus answers 200 on (the last if none)."""
    for path in ALERTS_PAGES:
        with contextlib.suppress(OSError):
            if http_get(port, path)[0] == 200:
                return path
    return ALERTS_PAGES[-1]


@dataclass
class LoadState:
    """What the load driver is doing now, for the live summary."""

    level: int | None = None


# The load: agents asking for a detailed answer, then a tool call (sglang#33397's replayed
# production request), the prompts of the long-generation canary. Clean, an answer ends at
# 1,500-6,000 tokens with its call; degenerate, it loops a paragraph until max_tokens. So the
# degenerate rate rises with concurrency and with length, and the output-length p50 inflates
# against its own low-concurrency baseline (sglang#36179) once loops are most answers: with
# the fixed configurator or fp8 index-K it stays put. Not streamed: one body per answer keeps
# a 96-session load of 8,000-token answers within a laptop's CPU.
LOAD_MAX_TOKENS = 8192


async def drive(stack: Stack, opts: DemoOptions, state: LoadState, stop: asyncio.Event) -> None:
    """Ramp concurrency through the tap, level by level, repeating until stopped. Like a
    gateway, it also posts every fourth answer it got to the sidecar's ingest API."""
    import aiohttp

    from exporter.samplers.prompts import load_prompts

    gen = LoadGenerator(
        f"http://127.0.0.1:{stack.ports['tap']}",
        stream=False,
        timeout=60,
        prompts=load_prompts(None, "canary_long_prompts.json"),
        max_tokens=LOAD_MAX_TOKENS,
    )
    ingest = f"http://127.0.0.1:{stack.ports['sidecar']}/api/v1/samples"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        seen = [0]

        async def to_ingest(ex: Exchange) -> None:
            seen[0] += 1
            if ex.response is None or seen[0] % 4:
                return
            sample = {
                "response": ex.response,
                "concurrency": ex.concurrency,
                "tools": ex.request.get("tools"),
            }
            with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
                async with session.post(ingest, json=sample) as resp:
                    await resp.read()

        while not stop.is_set():
            for level in opts.levels:
                if stop.is_set():
                    return
                state.level = level
                await gen.run_level(level, duration=opts.level_seconds, hook=to_ingest, stop=stop)
