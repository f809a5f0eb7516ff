"""The test tiers of tests/conftest.py select what their names say."""

from __future__ import annotations

from tests import conftest
from tests.import_graph import REPO


def test_every_fast_module_exists_and_runs_no_release() -> None:
    missing = sorted(str(p.relative_to(REPO)) for p in conftest.FAST if not p.is_file())
    assert not missing, f"FAST names modules that are not there: {missing}"
    assert not conftest.FAST & conftest._oracle_files()
    # the socket-free framing tier is what makes test-fast catch a broken tap rule
    assert REPO / "tests" / "tap" / "test_tap_wire.py" in conftest.FAST


def test_oracle_reaches_through_imports_and_python_dash_m() -> None:
    oracle = {str(p.relative_to(REPO)) for p in conftest._oracle_files()}
    assert "tests/conformance/test_release_conformance.py" in oracle  # imports the fetcher
    assert "tests/dsml/test_differential.py" in oracle  # runs -m tests.dsml.differential
    assert "tests/tap/test_tap_wire.py" not in oracle


def test_every_serial_module_exists_and_says_why() -> None:
    missing = sorted(str(p.relative_to(REPO)) for p in conftest.SERIAL if not p.is_file())
    assert not missing, f"SERIAL names modules that are not there: {missing}"
    assert all(why.strip() for why in conftest.SERIAL.values())
    assert not conftest.FAST.intersection(conftest.SERIAL)  # the fast tier runs in one process
