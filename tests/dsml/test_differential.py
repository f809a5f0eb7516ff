"""The grader against SGLang 0.5.23's own DeepSeek detectors on a seeded corpus (issue 14).

The run happens in a subprocess (:mod:`tests.dsml.differential`): the released detectors are
imported with stub package modules, one release per process. Holds:

- no clean output of any dialect is flagged, and the grader extracts the calls SGLang does;
- at least 99% of the damaged outputs whose SGLang parse harms the client (non-streaming or
  streaming view differs from the clean original's) are flagged or, for the damage ops graded
  by a counted signal instead (:data:`tests.dsml.diff_corpus.SIGNALLED_OPS`), signalled;
- every damage op where the grader is stricter than SGLang (flags, yet the client gets the same
  thing) is listed in ``docs/dsml-grading.md`` with its reason (:data:`STRICTER`).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.dsml.diff_corpus import DAMAGES, DIALECTS, SIGNALLED_OPS

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "dsml-grading.md").read_text(encoding="utf-8")

# Damage ops the grader flags although SGLang hands the client the same content and calls.
STRICTER = {
    "lenient.json_body": "an invoke body of JSON (SGLang's 'format 2') is not what the models emit",
    "lenient.space_before_gt": '`name="x" >` is not the trained spelling',
    "lenient.indent": "indentation between tags is not the trained layout",
    "stray.after_block": "text after the closing block: SGLang drops it silently",
    "stray.partial_marker": "a partial marker after a closed block: dropped with the tail",
    "stray.between_invokes": "prose between invokes: SGLang skips it",
    "attr.flag_yes": 'string="yes": SGLang parses the value as JSON or keeps the string',
    "attr.dup_param": "a repeated parameter: SGLang keeps the last one",
}


@pytest.fixture(scope="module")
def summary(dsml_kernel: str) -> dict[str, Any]:
    """The run on this module's kernel (the subprocess inherits DSV4_DSML_KERNEL)."""
    proc = subprocess.run(
        [sys.executable, "-m", "tests.dsml.differential"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def test_corpus_covers_every_dialect_and_damage_class(summary: dict[str, Any]) -> None:
    assert set(summary["clean_by_dialect"]) == set(DIALECTS)
    assert min(summary["clean_by_dialect"].values()) >= 250
    assert summary["items"] >= 3000
    classes = {op.split(".")[0] for op in summary["by_op"]}
    wanted = {"marker", "loop", "salad", "leak", "truncate", "dialect", "json", "schema", "closer"}
    wanted |= {"repeat", "value", "prose"}  # issue 26: the phenotypes of long generations
    assert wanted <= classes, wanted - classes
    assert len(DAMAGES) >= len(wanted)


def test_no_clean_output_is_flagged(summary: dict[str, Any]) -> None:
    assert summary["clean_flagged"] == []
    assert summary["clean_calls_mismatch"] == []
    assert summary["client_view_clean_flagged"] == 0
    assert summary["client_stream_view_clean_flagged"] == 0


def test_harmful_outputs_are_flagged(summary: dict[str, Any]) -> None:
    harmful = summary["harmful"]
    assert harmful >= 1500
    caught = summary["harmful_flagged"] + summary["harmful_signalled"]
    assert caught / harmful >= 0.99, summary["missed"][:10]


def test_only_documented_damage_is_left_to_a_signal(summary: dict[str, Any]) -> None:
    """Precision first (issue 32): what a signal catches instead of a verdict is named."""
    assert set(summary["signalled_by_op"]) <= set(SIGNALLED_OPS), summary["signalled_by_op"]


def test_every_stricter_case_is_documented(summary: dict[str, Any]) -> None:
    undocumented = set(summary["stricter_by_op"]) - set(STRICTER)
    assert not undocumented, undocumented
    missing = [op for op in STRICTER if f"`{op}`" not in DOC]
    assert not missing, missing
