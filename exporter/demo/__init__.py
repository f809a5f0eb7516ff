"""`make demo` / `dsv4-sidecar demo`: the whole picture on 127.0.0.1, no GPU needed.

:mod:`exporter.demo.stack` starts the processes (simulated SGLang, sidecar, Prometheus) and
drives the load; :mod:`exporter.demo.screen` reads and draws what they show and runs the two
together. The names below are what the CLI, tests and picture renderers use.
"""

from exporter.demo.screen import (
    SCREEN,
    AlertLog,
    Snapshot,
    read_snapshot,
    render,
    run_demo,
    windows_note,
)
from exporter.demo.stack import (
    DEMO_KNOBS,
    DEMO_WINDOWS,
    PRODUCTION_WINDOWS,
    DemoOptions,
    LoadState,
    Stack,
    StackError,
    alerts_page,
    demo_rules,
    drive,
    start_stack,
    urls,
)

__all__ = [
    "DEMO_KNOBS",
    "DEMO_WINDOWS",
    "PRODUCTION_WINDOWS",
    "SCREEN",
    "AlertLog",
    "DemoOptions",
    "LoadState",
    "Snapshot",
    "Stack",
    "StackError",
    "alerts_page",
    "demo_rules",
    "drive",
    "read_snapshot",
    "render",
    "run_demo",
    "start_stack",
    "urls",
    "windows_note",
]
