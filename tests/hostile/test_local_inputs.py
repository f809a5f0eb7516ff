"""Local inputs the command-line tools are pointed at are bounded in bytes and in time as a
whole (issue 31, item 5): ``--config /dev/zero`` was read whole, ``scan /dev/zero`` grew one
endless line to 23 GB, and a FIFO or a pipe that never ends held either forever."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from exporter.cli.scan import _lines
from exporter.config_loader import ConfigError, load_settings
from exporter.sources.bounded import CONFIG_FILE_MAX_BYTES, BoundedReader, InputRejected

REPO = Path(__file__).resolve().parent.parent.parent


def test_config_from_an_endless_device_is_refused() -> None:
    with pytest.raises(ConfigError, match=f"over {CONFIG_FILE_MAX_BYTES} bytes"):
        load_settings(config_file=Path("/dev/zero"))


def test_an_oversized_config_file_is_refused(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    big.write_text("# padding\n" * (CONFIG_FILE_MAX_BYTES // 10 + 1) + "port: 9400\n")
    with pytest.raises(ConfigError, match="over"):
        load_settings(config_file=big)


def test_a_config_fifo_that_never_ends_is_refused_in_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("exporter.config_loader.LOCAL_READ_SECONDS", 0.3)
    fifo = tmp_path / "config.yaml"
    os.mkfifo(fifo)
    # The writer holds the FIFO open, a line written and no end, before the read begins: an
    # O_RDWR open never blocks on Linux (a writer opened in a thread could come after the
    # read, which then finds no writer and an empty file, the next test's case).
    fd = os.open(fifo, os.O_RDWR)
    try:
        os.write(fd, b"port: 9400\n")
        with pytest.raises(ConfigError, match="time limit"):
            load_settings(config_file=fifo)
    finally:
        os.close(fd)


def test_a_config_fifo_without_a_writer_does_not_hang(tmp_path: Path) -> None:
    fifo = tmp_path / "config.yaml"
    os.mkfifo(fifo)
    load_settings(config_file=fifo)  # opened non-blocking: empty, the defaults apply


def _reader(data: bytes, max_bytes: int = 1 << 30) -> BoundedReader:
    return BoundedReader(io.BytesIO(data), max_bytes, float("inf"))


def test_scan_skips_a_line_over_the_cap_without_holding_it() -> None:
    data = b'{"a": 1}\n' + b"x" * 5000 + b"\n\n" + b'{"b": 2}\n' + b"y" * 5000
    got = list(_lines(_reader(data), None, line_max=1000))
    assert got == [(1, '{"a": 1}'), (2, None), (4, '{"b": 2}'), (5, None)]


def test_scan_reader_stops_at_the_byte_budget() -> None:
    with pytest.raises(InputRejected, match="over 100 bytes"):
        list(_lines(_reader(b"z" * 1000, max_bytes=100), None, line_max=10))


def _scan(*argv: str, stdin: int | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "exporter", "scan", *argv],
        cwd=REPO,
        stdin=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_scan_of_dev_zero_stops_at_max_bytes() -> None:
    r = _scan("/dev/zero", "--max-bytes", str(8 << 20), "--summary-json", "/dev/null")
    assert r.returncode == 2
    assert "input stopped" in r.stderr and f"over {8 << 20} bytes" in r.stderr


def test_scan_of_a_pipe_that_never_ends_stops_at_max_seconds() -> None:
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, json.dumps({"text": "hello"}).encode() + b"\n")
        r = _scan("-", "--json", "--max-seconds", "1", stdin=read_end)
    finally:
        os.close(read_end)
        os.close(write_end)
    assert r.returncode == 2 and "time limit" in r.stderr
    assert json.loads(r.stdout.splitlines()[0])["line"] == 1  # what was read was graded


def test_triage_files_are_bounded_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``triage --scan /dev/zero`` and ``--repro /dev/zero`` end with a note, not a hang."""
    from exporter.oncall.triage import collect as triage_collect

    monkeypatch.setattr(triage_collect, "TRIAGE_FILE_MAX_BYTES", 8 << 20)
    ev = triage_collect.collect(
        triage_collect.CollectOptions(repro_path=Path("/dev/zero"), scan_paths=[Path("/dev/zero")])
    )
    assert any("repro result /dev/zero unreadable" in n for n in ev.notes), ev.notes
    assert any(n.startswith("scan /dev/zero:") and "over" in n for n in ev.notes), ev.notes


def test_triage_scan_skips_a_line_over_the_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from exporter.oncall import samples

    monkeypatch.setattr(samples, "MAX_LINE_BYTES", 1000)
    path = tmp_path / "a.jsonl"
    long_line = json.dumps({"text": "hello " * 400}).encode()
    path.write_bytes(long_line + b"\n" + json.dumps({"text": "hello"}).encode() + b"\n")
    lines = list(samples.read_graded(path))
    assert len(lines) == 2 and lines[0] is None and lines[1] is not None
