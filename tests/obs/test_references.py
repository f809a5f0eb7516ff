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


@pytest.fixture(scope="module")
def files() -> list[Path]:
    return _tracked()


def test_no_file_points_at_notes_outside_the_repository(files: list[Path]) -> None:
    bad = outside_mentions(files)
    assert not bad, "move the fact into docs/ with its public source:\n" + "\n".join(bad)


def test_every_link_and_path_in_the_docs_exists(files: list[Path]) -> None:
    bad = [b for f in files if f.suffix == ".md" for b in dangling(f, f.read_text())]
    assert not bad, "\n".join(bad)


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
