"""The demo's live screen fits an 80x24 terminal (exporter.demo.SCREEN) at its fullest (eight
ranks, every concurrency and length bucket filled, every alert of the rule file active), and
its last frame says which alerts fired during the run and when. Rendered with rich at the
screen's size, as `Live` draws it (tests/test_demo.py runs the real demo)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from rich.console import Console

from exporter.demo import DEMO_WINDOWS, SCREEN, AlertLog, Snapshot, Stack, render
from exporter.demo.screen import size_note
from exporter.metrics import catalog as m
from exporter.units import GIB
from tests.obs.conftest import RULE_FILE

RANKS = 8
CONCURRENCY = ("1", "4", "8", "16", "32", "64", "128", "+Inf")
LENGTHS = ("256", "1024", "4096", "16384", "+Inf")


def _alert_names() -> list[str]:
    groups = yaml.safe_load(Path(RULE_FILE).read_text(encoding="utf-8"))["groups"]
    return sorted({r["alert"] for g in groups for r in g["rules"] if "alert" in r})


def _stack(tmp_path: Path, prometheus: bool = True) -> Stack:
    ports = {"sim": 1, "sidecar": 2, "tap": 3} | ({"prometheus": 4} if prometheus else {})
    return Stack(tmp_path, ports=ports, alert_windows=DEMO_WINDOWS if prometheus else "")


def _fullest(alerts: list[tuple[str, str, str]]) -> Snapshot:
    return Snapshot(
        overcommit={str(r): 4.34 * GIB for r in range(RANKS)},
        reserve={str(r): 19.6 * GIB for r in range(RANKS)},
        by_bucket={le: [12345.0, 6789.0] for le in CONCURRENCY},
        by_length={le: [12345.0, 6789.0] for le in LENGTHS},
        ungated=1234567,
        gated=7654321,
        gap_sum=1.0,
        gap_count=5000,
        alerts=alerts,
        deployment={"index_k_dtype": "bf16", "hicache": "true", "configurator": "legacy"},
    )


def _draw(frame) -> list[str]:
    width, height = SCREEN
    console = Console(width=width, height=height, record=True, file=open("/dev/null", "w"))  # noqa: SIM115
    console.print(frame)
    return console.export_text().splitlines()


def _flat(lines: list[str]) -> str:
    """The frame's text as one line (wrapping moves words to the next line)."""
    return re.sub(r"\s+", " ", " ".join(lines))


def test_fullest_frame_fits_the_screen(tmp_path):
    names = _alert_names()
    alerts = [(n, "warning", "firing" if i % 2 else "pending") for i, n in enumerate(names)]
    log = AlertLog()
    snap = _fullest(alerts)
    log.update(snap, 12.0)
    for final in (False, True):
        lines = _draw(render(_stack(tmp_path), snap, 96, 188.0, log, final=final))
        assert len(lines) <= SCREEN[1], "\n".join(lines)
        assert max(map(len, lines)) <= SCREEN[0], "\n".join(lines)
        text = "\n".join(lines)
        # every part is on it: the cut alert list says so
        for needle in ("KV over-commit per rank", "sessions ≤", "tokens ≤", "ungated", "Alert"):
            assert needle in text, needle
        assert "…" in text, "every alert of the rule file cannot fit: the list is cut"
        # every bucket row of both tables
        assert len(re.findall(r"12345\s+6789\s+55\.0%", text)) == len(CONCURRENCY) + len(LENGTHS)


def test_overcommit_is_one_line_with_the_range_of_ranks(tmp_path):
    snap = _fullest([])
    snap.overcommit["3"] = 4.40 * GIB
    (line,) = [x for x in _draw(render(_stack(tmp_path), snap, 1, 1.0)) if "over-commit" in x]
    assert "4.34-4.40 GiB (8 ranks)" in line and "19.6 GiB reserve" in line


def test_last_frame_tells_what_fired_and_when(tmp_path):
    """After Ctrl-C the last frame lists every alert that fired during the run with its first
    firing time, those that resolved since included, and those still pending apart."""
    log = AlertLog()
    stack = _stack(tmp_path)
    log.update(_fullest([("DSV4RiskyConfiguration", "warning", "firing")]), 12.4)
    log.update(
        _fullest(
            [
                ("DSV4KVPoolOvercommit", "warning", "firing"),
                ("DSV4KVPoolOvercommit", "critical", "pending"),
                ("DSV4GPUMemoryFillingUp", "warning", "pending"),
            ]
        ),
        22.0,
    )
    last = _fullest([("DSV4KVPoolOvercommit", "warning", "firing")])
    live = _flat(_draw(render(stack, last, 96, 30.0, log)))
    assert "Alerts fired: DSV4RiskyConfiguration 12s (resolved), DSV4KVPoolOvercommit 22s" in live
    final = _flat(_draw(render(stack, last, 96, 30.0, log, final=True)))
    assert "stopped after 30s" in final
    fired = "Alerts fired during the run: DSV4RiskyConfiguration 12s, DSV4KVPoolOvercommit 22s "
    assert fired in final, final
    assert "resolved" not in final


def test_frames_say_when_nothing_fired_or_no_prometheus(tmp_path):
    snap = _fullest([("DSV4GPUMemoryFillingUp", "warning", "pending")])
    final = _flat(_draw(render(_stack(tmp_path), snap, 1, 5.0, AlertLog(), final=True)))
    assert "Alerts fired during the run: none · pending at the end: DSV4GPUMemoryFillingUp" in final
    bare = "\n".join(_draw(render(_stack(tmp_path, prometheus=False), snap, 1, 5.0, AlertLog())))
    assert "Prometheus is not running" in bare


def test_a_smaller_terminal_is_told_the_size_the_screen_needs():
    small = Console(width=60, height=20, file=open("/dev/null", "w"))  # noqa: SIM115
    assert size_note(small) == (
        "The live screen needs 80x24; this terminal is 60x20: enlarge it or the screen is cut off."
    )
    assert size_note(Console(width=80, height=24, file=open("/dev/null", "w"))) is None  # noqa: SIM115


def test_catalog_names_the_screen_reads_exist():
    """The screen reads these families by name (exporter.demo.screen._absorb)."""
    for spec in (m.KV_POOL_OVERCOMMIT, m.MEMORY_RESERVE, m.DSML_SAMPLES, m.DSML_LENGTH_SAMPLES):
        assert spec.name.startswith("dsv4_")
