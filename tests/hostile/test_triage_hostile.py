"""``triage`` pointed at a hostile server (issue 31, item 5): its timeout bounds each request
as a whole (a drip of one byte at a time no longer stretches it), a huge metrics page is
refused unread, answers of the wrong JSON types and ``$...$`` label values leave a report
instead of a crash, the Markdown report is inert (no raw HTML, no links), and nothing it prints
carries a terminal control sequence (clear screen, OSC 52 clipboard write)."""

from __future__ import annotations

import io
import re
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from exporter import outbound
from exporter.oncall.triage import plots
from exporter.oncall.triage.collect import CollectOptions
from exporter.oncall.triage.evidence import Evidence, Series
from exporter.oncall.triage.report import print_summary, write_report
from exporter.sources import bounded
from tests.support import ServerThread

ESC_CLEAR = "\x1b[2J\x1b[H"
OSC52 = "\x1b]52;c;cm0gLXJmIH4=\x07"
CSI_C1 = "\x9b2J"
HTML = '<img src=x onerror="alert(1)"><script>alert(2)</script>'
LINK = "[click](http://evil.example/)"


@pytest.fixture
def dripping() -> Iterator[tuple[str, threading.Event]]:
    """A raw HTTP server that sends its headers, then one body byte every 50 ms for 10 s."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)
    stop = threading.Event()

    def serve() -> None:
        conn, _ = srv.accept()
        with conn:
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 200\r\n\r\n")
            for _ in range(200):
                if stop.wait(0.05):  # the server's pace, not the test's
                    return
                try:
                    conn.sendall(b"x")
                except OSError:
                    return

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.getsockname()[1]}/", stop
    stop.set()
    srv.close()
    t.join(10)


def test_the_timeout_bounds_the_whole_request(dripping: tuple[str, threading.Event]) -> None:
    url, stop = dripping
    with pytest.raises(outbound.OutboundError) as exc:
        outbound.get_sync(url, limit=1 << 20, timeout=0.5)
    assert exc.value.reason == outbound.TIMEOUT
    assert not stop.is_set(), "the call returned while the server was still dripping"


def _hostile_app() -> Starlette:
    evil = f"{HTML}{LINK}{ESC_CLEAR}{OSC52}{CSI_C1}$\\frac{{$"

    async def footprint(_: Request) -> Response:
        return JSONResponse(
            {
                "status": evil,
                "detail": evil,
                "deployment": {"index_k_dtype": 7, "hicache": "yes", "configurator": [1]},
                "ranks": [
                    "not a rank",
                    {"rank": 0, "overcommit_bytes": "lots", "pools": {"kv": {"planned_bytes": {}}}},
                    {"rank": 1, "gpu_free_bytes": [1], "pools": ["x"], "model": 5},
                ],
            }
        )

    async def readyz(_: Request) -> Response:
        return JSONResponse(["not", "a", "map"])

    async def metrics(_: Request) -> Response:
        label = evil.replace('"', "'")  # a valid exposition: the value, not the syntax, is hostile
        lines = [
            "# TYPE dsv4_dsml_samples_total counter",
            f'dsv4_dsml_samples_total{{source="{label}",verdict="degenerate",bucket="$x$"}} 3',
            'dsv4_deployment_info{index_k_dtype="$\\\\mathrm{bf16$",hicache="<b>on</b>"} 1',
        ]
        return PlainTextResponse("\n".join(lines) + "\n")

    return Starlette(
        routes=[
            Route("/api/v1/footprint", footprint),
            Route("/readyz", readyz),
            Route("/metrics", metrics),
        ]
    )


def test_a_hostile_sidecar_gives_an_inert_report_not_a_crash(tmp_path: Path) -> None:
    with ServerThread(_hostile_app()) as sc:
        result = write_report(CollectOptions(sidecar_url=sc.url, timeout=10), tmp_path / "out")
    md = result.md_path.read_text(encoding="utf-8")
    assert "<img" not in md and "<script" not in md and "&lt;script>" in md
    assert not re.search(r"(?<!\\)\]\(http://evil", md) and "\\[click\\]" in md
    assert "\x1b" not in md and "\x9b" not in md
    screen = io.StringIO()
    print_summary(result, Console(file=screen, force_terminal=True, color_system=None))
    printed = screen.getvalue()
    for seq in ("\x1b[2J", "\x1b]52", "\x9b", "\x07"):
        assert seq not in printed, repr(seq)


def test_a_metrics_page_past_the_cap_is_refused_unread(tmp_path: Path) -> None:
    page = "# TYPE other_total counter\n" + 'other_total{a="b"} 1\n' * (
        bounded.TRIAGE_METRICS_MAX_BYTES // 20 + 1
    )

    async def footprint(_: Request) -> Response:
        return JSONResponse({"status": "ok", "ranks": []})

    async def metrics(_: Request) -> Response:
        return PlainTextResponse(page)

    app = Starlette(routes=[Route("/api/v1/footprint", footprint), Route("/metrics", metrics)])
    with ServerThread(app) as sc:
        result = write_report(CollectOptions(sidecar_url=sc.url, timeout=10), tmp_path / "out")
    assert any("cap" in n for n in result.evidence.notes), result.evidence.notes


def test_mathtext_label_values_are_drawn_as_text() -> None:
    if not plots.available():
        pytest.skip("matplotlib (the report extra) is not installed")
    ev = Evidence(end=1000.0, window_s=600.0)
    ev.series.degenerate_ratio = [Series("$\\frac{$", [(900.0, 0.1), (950.0, 0.2)])]
    svgs = plots.render_all(ev)
    assert "degenerate_ratio" in " ".join(svgs) or svgs
