"""The one skip policy (tests/support.py): a missing tool or artefact skips locally and fails
in CI; and no test writes the rule again for itself."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from tests import support

TESTS = Path(__file__).resolve().parent
MISSING = "dsv4-no-such-tool"


@pytest.mark.parametrize("value", ["true", "1", "yes"])
def test_a_missing_tool_fails_in_ci(monkeypatch, value):
    monkeypatch.setenv("CI", value)
    with pytest.raises(pytest.fail.Exception, match=f"{MISSING} is not installed.*CI=true"):
        support.require(MISSING)
    with pytest.raises(pytest.fail.Exception):
        support.optional(MISSING)


@pytest.mark.parametrize("value", [None, "", "false", "0"])
def test_a_missing_tool_skips_locally(monkeypatch, value):
    if value is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", value)
    with pytest.raises(pytest.skip.Exception, match=f"{MISSING} is not installed; install"):
        support.require(MISSING)
    assert support.optional(MISSING) is None
    monkeypatch.setattr(support, "find", lambda *names: None)
    with pytest.raises(pytest.skip.Exception, match="`make deb-test` installs Debian's nginx"):
        support.require("nginx")


def test_require_takes_the_first_tool_found(monkeypatch):
    monkeypatch.setenv("CI", "true")
    python = Path(sys.executable).name
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))
    assert support.require(MISSING, python) == str(Path(sys.executable).parent / python)


def test_no_test_writes_the_rule_again():
    """Every CI check goes through tests/support.py; a test reading CI itself would be a
    second rule that can drift (four copies once did)."""
    offenders = []
    for path in TESTS.rglob("*.py"):
        if path.name == "support.py" and path.parent == TESTS:
            continue
        text = path.read_text(encoding="utf-8")
        if re.search(r"""environ(\.get\(|\[)\s*["']CI["']""", text):
            offenders.append(str(path.relative_to(TESTS)))
    assert offenders == []
