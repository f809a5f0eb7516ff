"""One real sidecar pod's /metrics, for the fleet's cardinality budget and scale bench.

Runs the simulator (a TP-8 SGLang in a chosen configuration, with probe snapshot files) and
the sidecar in-process on loopback, waits until every source has polled and the canary has
graded a few samples, and returns the exposition text. The fleet bench replays this text
under distinct pod labels; the budget test counts its series.
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from exporter.app import create_app
from exporter.config_loader import load_settings
from exporter.sim.server import create_sim_app
from exporter.sim.settings import SimSettings
from tests.support import ServerThread, scrape, wait_for

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s")


def capture_pod(
    tmp: Path,
    *,
    index_k_dtype: str = "bf16",
    hicache: str = "on",
    configurator: str = "legacy",
    tp_size: int = 8,
    sglang_version: str | None = None,
) -> str:
    """The sidecar's exposition (text format) for one simulated pod."""
    probe = tmp / f"probe-{index_k_dtype}-{hicache}-{configurator}-{sglang_version}"
    probe.mkdir(parents=True, exist_ok=True)
    sim_kwargs: dict[str, object] = {
        "index_k_dtype": index_k_dtype,
        "hicache": hicache,
        "configurator": configurator,
        "tp_size": tp_size,
        "ttft_ms": 1,
        "itl_ms": 0,
        "seed": 3,
        "probe_dir": probe,
    }
    if sglang_version:
        sim_kwargs["sglang_version"] = sglang_version
    with ServerThread(create_sim_app(SimSettings(**sim_kwargs))) as sim:
        app = create_app(
            load_settings(
                {
                    "sglang_url": sim.url,
                    "gpu_backend": "fake",
                    "sglang_poll_interval": 0.5,
                    "nvml_poll_interval": 0.5,
                    "canary_interval": 0.2,
                    "canary_concurrency": 2,
                    "probe_dir": str(probe),
                    "index_k_dtype": index_k_dtype,
                    # A fork's fixed configurator cannot be seen from the server: configured.
                    "configurator": configurator,
                    "tap_port": 0,
                    "tap_host": "127.0.0.1",
                }
            )
        )
        with ServerThread(app) as sc:

            def ready() -> str | None:
                text = scrape(sc.url)
                need = ("dsv4_kv_pool_allocated_bytes{", "dsv4_probe_up{", "dsv4_canary_latency")
                return text if all(n in text for n in need) else None

            return str(wait_for(ready, timeout=60, interval=0.5))


def series_by_family(text: str) -> Counter[str]:
    """Series count per metric name (histogram _bucket/_sum/_count and counters' _created
    each count: they are stored series)."""
    out: Counter[str] = Counter()
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m and not line.startswith("#"):
            out[m.group(1)] += 1
    return out


_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$")
_MONOTONIC = ("_total", "_bucket", "_count", "_sum")


class Replay:
    """Pod ``i`` answers with ``texts[i % len(texts)]``; on its k-th scrape every counter and
    histogram series reads ``grow(value, k)`` (monotonic in k; a growth that keeps the
    ratios between series, ``value * (1 + k / 10)``, keeps each pod's real degenerate ratio).
    """

    def __init__(self, texts: list[str], grow: Callable[[float, int], float]) -> None:
        self.grow = grow
        self.rows: list[list[tuple[str, float, bool]]] = []
        for text in texts:
            rows = []
            for line in text.splitlines():
                m = _LINE.match(line)
                if not m or line.startswith("#"):
                    rows.append((line, 0.0, False))
                    continue
                monotonic = m.group(1).endswith(_MONOTONIC)
                rows.append((f"{m.group(1)}{m.group(2) or ''} ", float(m.group(3)), monotonic))
            self.rows.append(rows)
        self.scrapes: dict[int, int] = {}
        self.lock = threading.Lock()

    def body(self, pod: int) -> bytes:
        with self.lock:
            k = self.scrapes.get(pod, 0)
            self.scrapes[pod] = k + 1
        out = []
        for head, value, monotonic in self.rows[pod % len(self.rows)]:
            if head.endswith(" "):
                out.append(f"{head}{self.grow(value, k) if monotonic else value}")
            else:
                out.append(head)
        return ("\n".join(out) + "\n").encode()


def replay_target(port: int, index: int, deployment: str, pod: str) -> dict[str, object]:
    """One static scrape target for replayed pod ``index``, with the labels Kubernetes service
    discovery and the ServiceMonitor's relabelling would give a real pod."""
    return {
        "targets": [f"127.0.0.1:{port}"],
        "labels": {
            "__metrics_path__": f"/pods/{index}/metrics",
            "instance": f"{pod}:9400",
            "namespace": "llm",
            "deployment": deployment,
            "pod": pod,
        },
    }


def serve_replay(replay: Replay) -> tuple[ThreadingHTTPServer, int]:
    """A threaded HTTP server on loopback answering ``/pods/<i>/metrics``; (server, port)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            m = re.fullmatch(r"/pods/(\d+)/metrics", self.path)
            if not m:
                self.send_error(404)
                return
            data = replay.body(int(m.group(1)))
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)  # port 0: the kernel's, read back
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, server.server_address[1]
