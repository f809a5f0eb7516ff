"""No import cycle in the shipped and generator packages (issue 36, item 4).

What counts as an import, and as a cycle, is tests/import_graph.py's docstring. Where two
modules need each other, what both need goes into a leaf module (``alerts/text.py``,
``exporter/gpu_plugins.py``), or the caller names a ``Protocol`` of what it calls instead of
the class that implements it (the tap: ``exchange.ClientEnd``, ``upstream.ExchangeEnd``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.import_graph import cycles, import_graph

PACKAGES = ("exporter", "alerts", "dashboards")


def test_no_import_cycle_in_the_packages() -> None:
    assert cycles(import_graph(PACKAGES)) == []


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        # a lazy import inside a function still closes the cycle
        ({"a.py": "import exporter.b\n", "b.py": "def f():\n    from exporter import a\n"}, 1),
        # so does a type-only one
        (
            {
                "a.py": "from exporter.b import B\n",
                "b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                "    from exporter.a import A\n",
            },
            1,
        ),
        # relative imports resolve against the importing module's package
        ({"a.py": "from . import b\n", "b.py": "from .a import x\n"}, 1),
        # a package re-exporting its submodules is not a cycle; a chain is not either
        ({"__init__.py": "from exporter.a import x\n", "a.py": "from exporter import b\n"}, 0),
        # a compiled extension's stub is a leaf
        ({"a.py": "from exporter import _ext\n", "_ext.pyi": "from exporter.a import T\n"}, 0),
    ],
)
def test_the_check_sees_every_kind_of_import(tmp_path: Path, files: dict[str, str], expected: int):
    for package in PACKAGES:
        (tmp_path / package).mkdir()
    for name, text in files.items():
        (tmp_path / "exporter" / name).write_text(text)
    (tmp_path / "exporter" / "b.py").touch()
    assert len(cycles(import_graph(PACKAGES, tmp_path))) == expected
