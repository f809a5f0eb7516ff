"""Render the fleet dashboard's pods table and heatmap as a PNG from real Prometheus data.

The "done when" of the fleet: the simulator deployed as several differently configured pods
(fp8 on two SGLang versions, a bf16 fork on the fixed configurator, one bf16 deployment with
HiCache on the legacy configurator), each pod's real sidecar output (tests/obs/fleet_pod.py)
scraped by a real Prometheus under distinct namespace/deployment/pod labels with the rule file
(``for:`` of the deployment alerts set to 0 so they fire within the run). The picture is drawn
from the fleet dashboard's own panel queries (dashboards.queries), so it cannot drift from the
panels; it also lists the deployment alerts that fired, one per bad deployment and cause.

    python -m dashboards.render_fleet_png [--out docs/img/fleet.png] [--seconds 40]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from dashboards.common import ALERTS
from dashboards.queries import panel_queries
from exporter.units import GIB
from tests.obs.fleet_pod import Replay, capture_pod, replay_target, serve_replay
from tests.support import prometheus, promql

REPO = Path(__file__).resolve().parents[1]
# (deployment, pods, simulator configuration)
FLEET: tuple[tuple[str, int, dict[str, str]], ...] = (
    ("flash-fp8", 3, {"index_k_dtype": "fp8", "hicache": "off", "configurator": "legacy"}),
    (
        "flash-fp8-canary",
        2,
        {
            "index_k_dtype": "fp8",
            "hicache": "off",
            "configurator": "legacy",
            "sglang_version": "0.5.12",
        },
    ),
    ("flash-bf16-fork", 2, {"index_k_dtype": "bf16", "hicache": "off", "configurator": "fixed"}),
    ("flash-bf16-hicache", 3, {"index_k_dtype": "bf16", "hicache": "on", "configurator": "legacy"}),
)
FAST = "deployment_risky_config_for: 0s\ndeployment_overcommit_for: 0s\ncorruption_window: 1m\n"


def _rules(tmp: Path) -> Path:
    knobs, out = tmp / "knobs.yaml", tmp / "fleet.rules.yaml"
    knobs.write_text(FAST)
    cmd = [sys.executable, "-m", "alerts.generate", "--config", str(knobs), "--out", str(out)]
    subprocess.run(cmd, check=True, cwd=REPO, timeout=60)
    return out


def _scrape_configs(port: int) -> list[dict]:
    targets, i = [], 0
    for deployment, pods, _ in FLEET:
        for j in range(pods):
            targets.append(replay_target(port, i, deployment, f"{deployment}-{j}"))
            i += 1
    return [{"job_name": "dsv4-sidecar", "static_configs": targets}]


def collect(seconds: float) -> dict:
    """Run the fleet and return the pods table, the heatmap series and the firing alerts."""
    tmp = Path(tempfile.mkdtemp(prefix="dsv4-fleet-png-"))
    texts = []
    for deployment, pods, cfg in FLEET:
        text = capture_pod(tmp / deployment, tp_size=8, **cfg)
        texts += [text] * pods
    # Ratios kept: counters grow in proportion, so each pod keeps its real degenerate ratio.
    server, port = serve_replay(Replay(texts, grow=lambda v, k: v * (1 + k / 10)))
    try:
        with prometheus(
            [],
            rule_files=[_rules(tmp)],
            scrape_interval="2s",
            eval_interval="2s",
            scrape_configs=_scrape_configs(port),
        ) as prom:
            start = time.time()
            time.sleep(seconds)
            queries = dict(
                panel_queries(job="dsv4-sidecar", rate_interval="10s", range_="1m")["fleet"]
            )
            table: dict[str, dict[str, str | float]] = {}
            for title, expr in queries.items():
                if not title.startswith(("Pods at risk", "Pod configuration", "Release rules")):
                    continue
                for r in promql(prom, expr):
                    row = table.setdefault(r["metric"]["pod"], {})
                    row.update({k: v for k, v in r["metric"].items() if k != "__name__"})
                    row[title] = float(r["value"][1])
            heat = httpx.get(
                prom + "/api/v1/query_range",
                params={
                    "query": queries["Over-commit share of reserve per pod [A]"],
                    "start": start,
                    "end": time.time(),
                    "step": 2,
                },
                timeout=30,
            ).json()["data"]["result"]
            alerts = httpx.get(prom + "/api/v1/alerts", timeout=10).json()["data"]["alerts"]
    finally:
        server.shutdown()
    fired = sorted(
        (a["labels"]["alertname"], a["labels"].get("deployment", ""), a["labels"].get("risk", ""))
        for a in alerts
        if a["labels"]["alertname"].startswith("DSV4Deployment") and a["state"] == "firing"
    )
    return {"table": table, "heat": heat, "fired": fired, "t0": start}


def draw(data: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sorted(data["table"].items(), key=lambda kv: (kv[1].get("deployment", ""), kv[0]))
    cols = [
        "pod",
        "SGLang",
        "rules",
        "index-K",
        "(source)",
        "configurator",
        "HiCache",
        "over-commit",
        "of reserve",
        "GPU free",
        "degenerate",
        "samples",
        "canary",
        "probe",
        "risky",
    ]
    cells, colours = [], []
    for pod, r in rows:
        share = r.get("Pods at risk [C]", 0.0)
        risky = r.get("Pods at risk [I]")
        degenerate = r.get("Pods at risk [E]")
        line = [
            pod,
            str(r.get("version", "")).removesuffix("+sim"),
            str(r.get("rules", "")),
            str(r.get("index_k_dtype", "")),
            str(r.get("source", "n/a")),
            str(r.get("configurator", "")),
            str(r.get("hicache", "")),
            f"{r.get('Pods at risk [A]', 0.0) / GIB:.2f} GiB",
            f"{100 * share:.0f}%",
            f"{r.get('Pods at risk [D]', 0.0) / GIB:.1f} GiB",
            "-" if degenerate is None else f"{100 * degenerate:.1f}%",
            f"{r.get('Pods at risk [F]', 0.0):.0f}",
            "up" if r.get("Pods at risk [G]") == 1 else "DOWN",
            f"{100 * r.get('Pods at risk [H]', 0.0):.0f}%",
            "YES" if risky else "",
        ]
        shade = ["white"] * len(line)
        if r.get("Pods at risk [A]", 0.0) > ALERTS.kv_overcommit_warning_bytes:
            shade[7] = "#f8d49a"  # over the DSV4KVPoolOvercommit warning threshold
        if share >= 1:
            shade[8] = shade[7] = "#f4a6a6"
        elif share > 0.5:
            shade[8] = shade[7] = "#f8d49a"
        if risky:
            shade[14] = shade[3] = shade[6] = "#f4a6a6"
        if degenerate:
            shade[10] = "#f8d49a" if degenerate < 0.1 else "#f4a6a6"
        cells.append(line)
        colours.append(shade)
    fig = plt.figure(figsize=(19, 8))
    ax = fig.add_axes((0.01, 0.5, 0.98, 0.45))
    ax.axis("off")
    ax.set_title(
        "DSV4 sidecar / Fleet: pods at risk (real Prometheus, 10 simulated TP-8 pods, "
        "4 deployments, 2 SGLang versions)",
        fontsize=13,
        loc="left",
    )
    t = ax.table(cellText=cells, colLabels=cols, cellColours=colours, loc="upper left")
    t.auto_set_font_size(False)
    t.set_fontsize(9)
    t.auto_set_column_width(list(range(len(cols))))
    t.scale(1, 1.7)
    hx = fig.add_axes((0.09, 0.07, 0.5, 0.36))
    names = []
    for i, series in enumerate(sorted(data["heat"], key=lambda s: s["metric"].get("pod", ""))):
        xs = [float(ts) - data["t0"] for ts, _ in series["values"]]
        ys = [float(v) for _, v in series["values"]]
        hx.scatter(xs, [i] * len(xs), c=ys, cmap="RdYlGn_r", vmin=0, vmax=1.2, marker="s", s=60)
        names.append(series["metric"].get("pod", ""))
    hx.set_yticks(range(len(names)), names, fontsize=8)
    hx.set_xlabel("seconds")
    hx.set_title("Over-commit share of reserve per pod (heatmap: green 0, red >= 100%)", loc="left")
    fired = "\n".join(
        f"{name}  {deployment}" + (f"  risk={risk}" if risk else "")
        for name, deployment, risk in data["fired"]
    )
    fig.text(
        0.62,
        0.42,
        "Deployment alerts firing (one per bad deployment and cause):\n\n" + (fired or "none"),
        fontsize=9.5,
        va="top",
        family="monospace",
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "img" / "fleet.png")
    ap.add_argument("--seconds", type=float, default=40.0)
    args = ap.parse_args(argv)
    data = collect(args.seconds)
    draw(data, args.out)
    for name, deployment, risk in data["fired"]:
        print(f"firing: {name} {deployment} {risk}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
