"""The eight generators of committed files share one shape (exporter/generated.py): no argument
writes, ``--check`` writes nothing and exits 1 naming each stale file, 2 on bad input."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from pathlib import Path

import pytest

from exporter import generated

REPO = Path(__file__).resolve().parents[2]
MODULES = (
    "exporter.metrics.docgen",
    "exporter.config_docs",
    "exporter.sim.config_docs",
    "exporter.oncall.triage.rules_doc",
    "exporter.footprint_docs",
    "alerts.generate",
    "dashboards.generate",
)


def _k8s_main() -> Callable[[list[str]], int]:
    spec = importlib.util.spec_from_file_location("k8s_generate", REPO / "docker/k8s/generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


def _mains() -> dict[str, Callable[[list[str]], int]]:
    mains = {name: importlib.import_module(name).main for name in MODULES}
    mains["docker/k8s/generate.py"] = _k8s_main()
    return mains


@pytest.mark.parametrize("name", [*MODULES, "docker/k8s/generate.py"])
def test_every_committed_output_is_fresh(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)  # the docs generators' default outputs are repo-relative
    assert _mains()[name](["--check"]) == 0, f"run the generator ({name}) and commit"


@pytest.mark.parametrize(
    "name",
    [
        "exporter.metrics.docgen",
        "exporter.config_docs",
        "exporter.sim.config_docs",
        "exporter.oncall.triage.rules_doc",
        "exporter.footprint_docs",
    ],
)
def test_docs_generators_write_then_check(name: str, tmp_path: Path, capsys) -> None:
    """Same options everywhere: --out FILE to write, --check --out FILE to compare."""
    main = importlib.import_module(name).main
    out = tmp_path / "out.md"
    if name.endswith("rules_doc"):  # it fills a block of an existing page
        out.write_text((REPO / "docs/oncall.md").read_text().replace("| R2 |", "| R2x |"))
    elif name.endswith("footprint_docs"):  # so does this one
        page = (REPO / "docs/footprint.md").read_text()
        out.write_text(page.replace("| `c4_kv` |", "| `c4_kvx` |"))
    else:
        out.write_text("old\n")
    assert main(["--check", "--out", str(out)]) == 1
    assert f"stale: {out}: run `make docs` and commit" in capsys.readouterr().err
    assert main(["--out", str(out)]) == 0
    assert main(["--check", "--out", str(out)]) == 0


def test_main_writes_checks_and_reports_bad_input(tmp_path: Path, capsys) -> None:
    a, b = tmp_path / "a.txt", tmp_path / "sub" / "b.txt"
    rendered = {a: "A\n", b: "B\n"}
    assert generated.main(lambda: rendered, "x", check=True) == 1
    assert f"stale: {a}, {b}: run `make x` and commit" in capsys.readouterr().err
    assert generated.main(lambda: rendered, "x", check=False) == 0
    assert a.read_text() == "A\n" and b.read_text() == "B\n"
    assert generated.main(lambda: rendered, "x", check=True) == 0
    extra = tmp_path / "hand.json"
    assert generated.main(lambda: rendered, "x", check=True, unexpected=lambda: [extra]) == 1
    assert f"{extra} (not generated)" in capsys.readouterr().err

    def broken() -> dict[Path, str]:
        raise ValueError("knob 'x': not a duration")

    assert generated.main(broken, "x", check=True, name="gen") == 2
    assert "gen: knob 'x': not a duration" in capsys.readouterr().err
