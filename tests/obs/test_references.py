"""The repository is self-contained: nothing points at a file that is not in it.

Code, docs and tests once cited design notes kept outside the repository; a newcomer cannot
follow those. The facts now live in docs/ with their public sources, and these checks keep it
that way: no mention of an outside note, and every relative Markdown link and every repo path
a document names exists.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
THIS = Path(__file__).resolve()

# Names of the outside notes (and the folder they lived in); `dsml.md` only as a whole name,
# not as the tail of docs/dsml-grading.md.
OUTSIDE = re.compile(
    r"(?<![\w-])(?:dsv4-memory|measurements|dsml|exporter-conventions|sglang-interfaces)\.md\b"
    r"|shared[/]reference|\.\.[/]shared\b"  # [/]: this guard does not match itself
)
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
REPO_PATH = re.compile(
    r"(?<![\w/.-])((?:docs|exporter|tests|alerts|dashboards|docker|bench|scripts)/"
    r"[\w./-]+\.(?:md|py|yaml|yml|json|toml|sh)(?:\.in)?)\b"  # .in: a generator's template
)
GENERATED = ("docker/k8s/generated/",)
# The guides a change is made by: every repo path, folder, test (`path::test`) and dotted
# module name they put in backticks must be real, not only the file paths REPO_PATH finds.
GUIDES = ("CONTRIBUTING.md", "docs/architecture.md")
BACKTICKED = re.compile(r"`([^`\s]+)`")
TOP = r"(?:exporter|tests|alerts|dashboards|docker|bench|scripts|docs)"
GUIDE_PATH = re.compile(rf"{TOP}/[\w./-]*(?:::\w+)?")
GUIDE_MODULE = re.compile(r"(?:exporter|alerts|dashboards|tests)(?:\.\w+)+")


def _tracked() -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return [
        REPO / f
        for f in out
        if f.endswith((".py", ".md", ".yaml", ".yml", ".toml", ".txt", ".sh", "Makefile"))
        and not f.startswith(GENERATED)
        and (REPO / f).is_file()
    ]


def outside_mentions(files: list[Path]) -> list[str]:
    bad = []
    for path in files:
        if path == THIS:
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if OUTSIDE.search(line):
                bad.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    return bad


def dangling(doc: Path, text: str) -> list[str]:
    """Relative links and repo paths in one Markdown document that do not exist."""
    bad = []
    for target in LINK.findall(text):
        if target.startswith(("http://", "https://", "mailto:", "/")):
            continue
        if not (doc.parent / target).resolve().exists():
            bad.append(f"{doc.relative_to(REPO)}: link {target}")
    for target in REPO_PATH.findall(text):
        if "*" in target or "<" in target:
            continue
        if not (REPO / target).exists():
            bad.append(f"{doc.relative_to(REPO)}: path {target}")
    return bad


def unreal_in_guide(doc: str, text: str) -> list[str]:
    """Backticked paths (files or folders, ``path::test`` naming a test in that file) and
    dotted names (``exporter.x.y``: a module, then names defined in it) that do not exist."""
    bad = []
    for token in BACKTICKED.findall(text):
        token = token.rstrip(".,:;)")
        if "<" in token or "*" in token:
            continue  # a pattern (`exporter/sources/<name>/`), not a path
        if GUIDE_PATH.fullmatch(token):
            path, _, test = token.partition("::")
            target = REPO / path
            if not target.exists():
                bad.append(f"{doc}: path {path}")
            elif test and not re.search(rf"def {test}\b", target.read_text(encoding="utf-8")):
                bad.append(f"{doc}: test {token}")
        elif GUIDE_MODULE.fullmatch(token):
            parts = token.split(".")
            for n in range(len(parts), 0, -1):  # the longest prefix that is a module
                base = REPO.joinpath(*parts[:n])
                module = next(
                    (m for m in (base.with_suffix(".py"), base / "__init__.py") if m.is_file()),
                    None,
                )
                if module is not None:
                    source = module.read_text(encoding="utf-8")
                    if any(not re.search(rf"\b{a}\b", source) for a in parts[n:]):
                        bad.append(f"{doc}: name {token}")
                    break
            else:
                bad.append(f"{doc}: module {token}")
    return bad


@pytest.fixture(scope="module")
def files() -> list[Path]:
    return _tracked()


def test_no_file_points_at_notes_outside_the_repository(files: list[Path]) -> None:
    bad = outside_mentions(files)
    assert not bad, "move the fact into docs/ with its public source:\n" + "\n".join(bad)


def test_every_link_and_path_in_the_docs_exists(files: list[Path]) -> None:
    bad = [b for f in files if f.suffix == ".md" for b in dangling(f, f.read_text())]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("doc", GUIDES)
def test_every_path_and_name_the_guides_give_exists(doc: str) -> None:
    bad = unreal_in_guide(doc, (REPO / doc).read_text(encoding="utf-8"))
    assert not bad, "\n".join(bad)


def test_the_guide_check_catches_what_it_looks_for() -> None:
    real = (
        "`exporter/sources/vllm/` `Makefile` `tests/obs/test_references.py::test_"
        "every_path_and_name_the_guides_give_exists` `exporter.dsml.dialect.resolve_dialect` "
        "`exporter/sources/<name>/stats.py` `make docs`"
    )
    assert unreal_in_guide("g.md", real) == []
    made_up = (
        "`exporter/sources/trtllm/` `tests/obs/test_references.py::test_nothing` "
        "`exporter.dsml.dialect.no_such_name` `exporter.nowhere`"
    )
    assert unreal_in_guide("g.md", made_up) == [
        "g.md: path exporter/sources/trtllm/",
        "g.md: test tests/obs/test_references.py::test_nothing",
        "g.md: name exporter.dsml.dialect.no_such_name",
        "g.md: name exporter.nowhere",
    ]


def test_the_checks_catch_what_they_look_for(tmp_path: Path) -> None:
    note = REPO / "docs" / "_probe_note.md"
    assert dangling(note, "see [x](nope.md) and docs/nope.md and [ok](architecture.md)") == [
        "docs/_probe_note.md: link nope.md",
        "docs/_probe_note.md: path docs/nope.md",
    ]
    assert OUTSIDE.search("see " + "dsv4-memory" + ".md §4")
    assert OUTSIDE.search("(../" + "shared/" + "reference/x)")
    assert OUTSIDE.search("the grammar (dsml.md)")
    assert not OUTSIDE.search("docs/dsml-grading.md")
