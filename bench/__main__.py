"""Run every benchmark (or those named) and record results in bench/RESULTS.md.

Each ``bench/bench_<name>.py`` exposes ``run(quick: bool) -> str`` (a Markdown section). The
section replaces the text between ``<!-- bench:<name> -->`` and ``<!-- /bench:<name> -->``, so
benchmarks can be re-run one at a time without losing the others' results. The machine is
recorded with every section, since only ratios measured in the same run are comparable.
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import re
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
RESULTS = HERE / "RESULTS.md"
HEADER = """# Benchmark results

Produced by `make bench` (`python -m bench [NAME ...]`). Each section records the machine and
date it ran on. These machines are noisy: compare the ratios and deltas measured side by side
within one section, not absolute numbers across sections.
"""


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{platform.node() or 'host'}: {cpu}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, {platform.system()} {platform.release()}"
    )


def discover() -> list[str]:
    return sorted(p.stem.removeprefix("bench_") for p in HERE.glob("bench_*.py"))


def store(name: str, body: str) -> None:
    text = RESULTS.read_text(encoding="utf-8") if RESULTS.exists() else HEADER
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    section = (
        f"<!-- bench:{name} -->\n{body.rstrip()}\n\n_Machine: {machine()}; run {stamp}._\n"
        f"<!-- /bench:{name} -->"
    )
    pattern = re.compile(
        rf"<!-- bench:{re.escape(name)} -->.*?<!-- /bench:{re.escape(name)} -->", re.S
    )
    if pattern.search(text):
        text = pattern.sub(lambda _m: section, text)
    else:
        text = text.rstrip() + "\n\n" + section + "\n"
    RESULTS.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    ap.add_argument("names", nargs="*", help=f"benchmarks to run (default all: {discover()})")
    ap.add_argument("--quick", action="store_true", help="fewer repetitions (smoke run)")
    ap.add_argument("--no-record", action="store_true", help="print only; leave RESULTS.md alone")
    args = ap.parse_args(argv)
    names = args.names or discover()
    failed = 0
    for name in names:
        print(f"== bench {name}", flush=True)
        try:
            mod = importlib.import_module(f"bench.bench_{name}")
            body = mod.run(quick=args.quick)
        except Exception as exc:  # one failing benchmark must not lose the others' results
            print(f"bench {name} failed: {exc!r}", file=sys.stderr)
            failed += 1
            continue
        print(body, flush=True)
        if not args.no_record:
            store(name, body)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
