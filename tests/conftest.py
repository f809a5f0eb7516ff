"""Shared pytest configuration: the test tiers (issue 36, item 3).

Every test is in one or more tiers, each a marker (pyproject's ``[tool.pytest.ini_options]``):

* ``e2e``: starts real servers or processes on loopback (uvicorn, Prometheus, nginx, the CLI).
  Marked in the module (``pytestmark = pytest.mark.e2e``): only the module knows.
* ``gpu``: needs CUDA. Marked in the module.
* ``oracle``: runs released SGLang/vLLM code. Applied here, to every test of a module that
  imports tests/sglang_release.py (the one place releases are fetched) directly or through
  other test modules, or runs one that does (``python -m tests.dsml.differential``); nobody
  marks it by hand, so a new oracle test is never missed.
* ``unit``: all the rest, applied here: no server left running, no release (a test may still
  run the CLI or a tool like promtool as a short subprocess).
* ``fast``: the unit tests of the modules named in :data:`FAST`, applied here: ``make
  test-fast``, under a minute on two CPUs. One or more modules per package's core (the tap's
  framing rules without sockets among them), chosen by measured time; the rest of the unit
  tier (the DSML corpora and property suites, the promtool runs, the sanitizer build) is
  ``make test``'s.
* ``serial``: the tests of the modules named in :data:`SERIAL`, applied here, each module with
  why it cannot share the machine. ``make test`` runs the rest with pytest-xdist, one worker
  per CPU, each worker taking whole modules (``--dist loadfile``: a module's fixtures are
  built once, on one worker), then the serial tier alone. Every other test must be safe beside
  any other: ports bound as port 0 and read back (or held, :func:`tests.support.dead_url`, or
  retried when a child fails to bind them, :func:`tests.support.prometheus`), files only under
  ``tmp_path``, the release cache behind its lock (tests/sglang_release.py), and no timeout
  that holds only on an idle machine.

So ``-m unit``, ``-m e2e``, ``-m oracle``, ``-m fast`` and ``-m "not oracle"`` select what
their names say, with no test decorated by hand beyond ``e2e`` and ``gpu``.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest
from hypothesis import settings

from tests.import_graph import REPO, import_graph, reaching

# No property test has a time limit per example (Hypothesis's default deadline is 200 ms): a
# loaded machine, or the workers of a parallel run sharing it, is no failure of the code; speed
# is bench/'s to measure.
settings.register_profile("dsv4", deadline=None)
settings.load_profile("dsv4")

# A path, not the dotted name: a string naming a module whole counts as running it.
RELEASE_FETCHER = "tests/sglang_release.py"
HAND_MARKED = ("e2e", "gpu")
FAST = frozenset(
    REPO / "tests" / path
    for path in (
        "test_import_cycles.py",
        "test_stats.py",
        "test_tiers.py",
        "tap/test_tap_wire.py",
        "tap/test_tap_unit.py",
        "footprint/test_geometry.py",
        "footprint/test_terms.py",
        "footprint/test_releases.py",
        "footprint/test_device_bytes.py",
        "dsml/test_openai.py",
        "dsml/test_reasons.py",
        "dsml/test_mutations.py",
        "dsml/test_schema.py",
        "dsml/test_verdict_rules.py",
        "dsml/test_streaming.py",
        "sidecar/test_config.py",
        "sidecar/test_collect_guard.py",
        "sidecar/test_exposition.py",
        "sidecar/test_nvml_source.py",
        "sidecar/test_sglang_source.py",
        "sidecar/test_footprint_view.py",
        "obs/test_metric_names.py",
        "hostile/test_config_errors.py",
        "oncall/test_diagnosis.py",
        "sampling/test_decode.py",
        "sampling/test_store_and_ingest.py",
        "probe/test_snapshot.py",
        "probe/test_runtime.py",
    )
)


# Modules that run in the serial pass of `make test`, after the parallel one, alone: each
# with why (tests/conftest.py's docstring says what every other module must keep to).
SERIAL = {
    REPO / "tests" / path: why
    for path, why in {
        "deploy/test_image.py": "runs the image in podman on the host network (a port picked"
        " before podman binds it), minutes of CPU beside anything else",
        "dsml/test_textscan_sanitizers.py": "builds the C modules under ASan and runs their"
        " equivalence suites through them: CPU for minutes under a 300 s per-test timeout",
        "test_demo.py": "the demo stack picks its four ports before its children bind them"
        " (exporter/demo/stack.py) and drives load for timed levels (minutes of CPU)",
        "test_demo_install.py": "runs the whole demo, as test_demo.py does",
    }.items()
}


@cache
def _oracle_files() -> frozenset[Path]:
    graph = import_graph(("tests",), run_targets=True)
    users = reaching(graph, RELEASE_FETCHER.removesuffix(".py").replace("/", "."))
    return frozenset((REPO / name.replace(".", "/")).with_suffix(".py") for name in users)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    oracle = _oracle_files()
    for item in items:
        if Path(item.path) in oracle:
            item.add_marker(pytest.mark.oracle)
        elif not any(item.get_closest_marker(m) for m in HAND_MARKED):
            item.add_marker(pytest.mark.unit)
            if Path(item.path) in FAST:
                item.add_marker(pytest.mark.fast)
        if Path(item.path) in SERIAL:
            item.add_marker(pytest.mark.serial)
