"""Fleet scale: one real Prometheus scraping 50 and 200 pods' worth of sidecar expositions.

Real sidecar output: the simulator (TP 8) and the sidecar run in-process for four pod
configurations (bf16 index-K + HiCache on the legacy configurator, a bf16 fork on the fixed
configurator, fp8, fp4; two SGLang versions) and each one's /metrics text is captured once
(tests/obs/fleet_pod.py). A replay server then answers every pod's scrape with its
configuration's text, counters advanced on each scrape so rates and increases move, and
Prometheus scrapes the pods every 15 s as distinct targets (namespace, deployment, pod and
instance labels, as the ServiceMonitor relabelling attaches them), evaluating the committed
rule file (alerts/dsv4-sidecar.rules.yaml, per-pod and fleet rules) every 15 s.

Measured per fleet size, after a warm-up: series in the head block and per pod, Prometheus CPU
(cores) and RSS per pod over the steady window, rule evaluation time per group (Prometheus'
own ``prometheus_rule_group_last_duration_seconds``), and every fleet-dashboard panel query
(dashboards.queries, variables at "All") timed through /api/v1/query, median of 3, slowest
reported. The machine is shared (2 cores, other helpers' tests running): read ratios between
the two sizes, not absolute numbers.

    python -m bench fleet          # full: 50 and 200 pods, 3 min each
    python -m bench fleet --quick  # 50 and 200 pods, 75 s each
"""

from __future__ import annotations

import http.client
import json
import re
import shutil
import statistics
import subprocess
import tempfile
import time
import urllib.parse
from pathlib import Path

import yaml

from bench.procs import cpu_seconds, free_port, rss_mb, stop
from dashboards.queries import panel_queries
from tests.obs.fleet_pod import (
    Replay,
    capture_pod,
    replay_target,
    series_by_family,
    serve_replay,
)

REPO = Path(__file__).resolve().parents[1]
RULES = REPO / "alerts" / "dsv4-sidecar.rules.yaml"
SIZES = (50, 200)
SCRAPE = "15s"

# (deployment, simulator configuration); pods are dealt round-robin over these.
CONFIGS: tuple[tuple[str, dict[str, str]], ...] = (
    ("flash-bf16-hicache", {"index_k_dtype": "bf16", "hicache": "on", "configurator": "legacy"}),
    ("flash-bf16-fork", {"index_k_dtype": "bf16", "hicache": "off", "configurator": "fixed"}),
    ("flash-fp8", {"index_k_dtype": "fp8", "hicache": "off", "configurator": "legacy"}),
    (
        "flash-fp4-v0512",
        {
            "index_k_dtype": "fp4",
            "hicache": "off",
            "configurator": "legacy",
            "sglang_version": "0.5.12",
        },
    ),
)


def _get(port: int, path: str, timeout: float = 60) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request("GET", path)
    return json.loads(conn.getresponse().read())


def _self_metric(port: int, name: str) -> dict[str, float]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith(name):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def _config(pods: int, replay_port: int) -> dict:
    jobs = []
    for i in range(pods):
        deployment, _ = CONFIGS[i % len(CONFIGS)]
        jobs.append(replay_target(replay_port, i, deployment, f"{deployment}-{i:04d}"))
    return {
        "global": {"scrape_interval": SCRAPE, "evaluation_interval": SCRAPE},
        "rule_files": [str(RULES)],
        "scrape_configs": [
            {"job_name": "dsv4-sidecar", "scrape_timeout": "10s", "static_configs": jobs}
        ],
    }


def _time_query(port: int, expr: str) -> float:
    qs = urllib.parse.urlencode({"query": expr})
    t0 = time.perf_counter()
    data = _get(port, f"/api/v1/query?{qs}")
    took = time.perf_counter() - t0
    if data.get("status") != "success":
        raise RuntimeError(f"query failed: {expr}: {data}")
    return took


def _one_size(pods: int, replay_port: int, seconds: float, tmp: Path) -> dict:
    binary = shutil.which("prometheus") or "/usr/bin/prometheus"
    port = free_port()
    cfg = tmp / f"prometheus-{pods}.yml"
    cfg.write_text(yaml.safe_dump(_config(pods, replay_port)))
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={cfg}",
            f"--storage.tsdb.path={tmp / f'data-{pods}'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if _get(port, "/api/v1/status/buildinfo", timeout=2).get("status") == "success":
                    break
            except (OSError, ValueError):
                time.sleep(0.5)
        warm = 35.0  # two scrapes and two rule evaluations before measuring
        time.sleep(warm)
        cpu0, t0 = cpu_seconds(proc.pid), time.monotonic()
        # Each group's last evaluation time, sampled once per evaluation interval over the
        # steady window: the median says what an evaluation costs, the max what contention adds.
        samples: dict[str, list[float]] = {}
        end = t0 + max(seconds - warm, 15)
        while time.monotonic() < end:
            time.sleep(min(15.0, max(end - time.monotonic(), 0)))
            for key, v in _self_metric(
                port, "prometheus_rule_group_last_duration_seconds{"
            ).items():
                m = re.search(r'rule_group="[^"]*;([^"]+)"', key)
                if m:
                    samples.setdefault(m.group(1), []).append(v)
        cpu1, t1 = cpu_seconds(proc.pid), time.monotonic()
        rss = rss_mb(proc.pid)
        head = _self_metric(port, "prometheus_tsdb_head_series ")
        up = _get(port, "/api/v1/query?query=" + urllib.parse.quote("sum(up)"))
        queries = panel_queries(job="dsv4-sidecar", rate_interval="1m", range_="5m")["fleet"]
        timed = []
        for title, expr in queries:
            runs = [_time_query(port, expr) for _ in range(3)]
            timed.append((statistics.median(runs), title))
        timed.sort(reverse=True)
        return {
            "pods": pods,
            "up": float(up["data"]["result"][0]["value"][1]) if up["data"]["result"] else 0,
            "head_series": sum(head.values()),
            "cpu_cores": (cpu1 - cpu0) / (t1 - t0),
            "rss_mb": rss,
            "rule_groups": {g: (statistics.median(v), max(v)) for g, v in samples.items()},
            "slowest": timed[:3],
            "queries": len(timed),
        }
    finally:
        stop(proc, timeout=20)


def run(quick: bool = False) -> str:
    tmp = Path(tempfile.mkdtemp(prefix="dsv4-fleet-bench-"))
    texts = [capture_pod(tmp / name, tp_size=8, **cfg) for name, cfg in CONFIGS]
    per_config = [sum(series_by_family(t).values()) for t in texts]
    # Counters advance by one per scrape of the pod: every series moves (cost, not meaning).
    replay = Replay(texts, grow=lambda value, k: value + k)
    server, replay_port = serve_replay(replay)
    seconds = 75.0 if quick else 180.0
    try:
        results = [_one_size(n, replay_port, seconds, tmp) for n in SIZES]
    finally:
        server.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
    return _report(results, per_config, seconds)


def _report(results: list[dict], per_config: list[int], seconds: float) -> str:
    lines = [
        "## Fleet: one Prometheus, 50 and 200 pods (`bench/bench_fleet.py`)",
        "",
        "Real sidecar output (simulator TP 8 + sidecar, captured once per configuration; counters "
        "advance by one per scrape: "
        + ", ".join(f"{name} {n} series" for (name, _), n in zip(CONFIGS, per_config, strict=True))
        + f") replayed as distinct pods, scraped every {SCRAPE} by one Prometheus "
        f"({_prometheus_version()}) evaluating the committed rule file every {SCRAPE}; "
        f"{seconds:.0f} s per size (35 s warm-up). The 2 cores are shared with other helpers' "
        "test runs while this ran: compare the two sizes, not absolute numbers.",
        "",
        "| pods | targets up | head series | series / pod | Prometheus CPU (cores) | CPU / pod "
        "(millicores) | RSS (MiB) | RSS / pod (MiB) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['pods']} | {r['up']:.0f} | {r['head_series']:.0f} | "
            f"{r['head_series'] / r['pods']:.0f} | {r['cpu_cores']:.3f} | "
            f"{1000 * r['cpu_cores'] / r['pods']:.2f} | {r['rss_mb']:.0f} | "
            f"{r['rss_mb'] / r['pods']:.2f} |"
        )
    lines += [
        "",
        "Rule evaluation time per group, ms: median (max) of the group's last evaluation "
        "time sampled every 15 s over the steady window:",
        "",
    ]
    groups = sorted({g for r in results for g in r["rule_groups"]})
    lines.append("| group | " + " | ".join(f"{r['pods']} pods" for r in results) + " |")
    lines.append("|---|" + "---|" * len(results))
    for g in groups:
        cells = " | ".join(
            "{:.1f} ({:.1f})".format(*(1000 * x for x in r["rule_groups"].get(g, (0.0, 0.0))))
            for r in results
        )
        lines.append(f"| {g} | {cells} |")
    lines += ["", "Slowest fleet-dashboard panel queries (median of 3, ms):", ""]
    for r in results:
        slow = "; ".join(f"{t * 1000:.0f} ms {title}" for t, title in r["slowest"])
        lines.append(f"- {r['pods']} pods ({r['queries']} queries): {slow}")
    return "\n".join(lines)


def _prometheus_version() -> str:
    binary = shutil.which("prometheus") or "/usr/bin/prometheus"
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10)
    m = re.search(r"version (\S+)", out.stdout + out.stderr)
    return f"Prometheus {m.group(1)}" if m else "Prometheus"
