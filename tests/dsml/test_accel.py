"""exporter.dsml.accel is the one switch between the C accelerator and its Python twin.

The environment picks the kernel at import and never stops the process; select() switches every
caller at once (what tests/dsml/conftest.py relies on to run the suite on both).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from exporter.dsml import accel, grade_text, textcheck

_REPORT = (
    "import json; from exporter.dsml import KERNEL, accel; print(json.dumps([KERNEL, accel.WHY]))"
)


def _imported_with(value: str | None) -> tuple[str, str]:
    env = {k: v for k, v in os.environ.items() if k != accel.ENV}
    if value is not None:
        env[accel.ENV] = value
    out = subprocess.run(
        [sys.executable, "-c", _REPORT], env=env, capture_output=True, text=True, check=True
    )
    kernel, why = json.loads(out.stdout)
    return kernel, why


def test_the_environment_picks_the_kernel_at_import() -> None:
    default = "c" if accel.available() else "python"
    assert _imported_with(None) == (default, "")
    assert _imported_with("auto") == (default, "")
    assert _imported_with(" Python ") == ("python", "")
    kernel, why = _imported_with("rust")
    assert kernel == default
    assert "DSV4_DSML_KERNEL='rust' is not c, python or auto" in why
    if accel.available():
        assert _imported_with("c") == ("c", "")


def test_select_reaches_every_caller_and_refuses_unknown_names() -> None:
    before = accel.kernel()
    try:
        accel.select("python")
        assert accel.kernel() == "python"
        assert accel.scan is None and accel.canonical_calls is None
        text = "Loop " + "abc " * 40
        assert textcheck.check_text(text) == textcheck.check_text_python(text)
        if accel.available():
            accel.select("c")
            assert accel.kernel() == "c"
            assert accel.scan is not None and accel.canonical_calls is not None
        with pytest.raises(ValueError, match="unknown DSML kernel 'fortran'"):
            accel.select("fortran")
    finally:
        accel.select(before)


def test_both_kernels_grade_a_canonical_block_alike() -> None:
    """The fast path reads accel.canonical_calls at each call, so select() changes it at once."""
    from tests.dsml.fp_corpus import corpus

    texts = [c.text for c in corpus() if c.text and c.label.startswith("call-v4-")][:40]
    assert texts
    before = accel.kernel()
    try:
        results = {}
        for kernel in accel.KERNELS if accel.available() else ("python",):
            accel.select(kernel)
            results[kernel] = [(r.verdict, r.findings, r.calls) for r in map(grade_text, texts)]
        assert len({json.dumps(v, default=repr) for v in results.values()}) == 1
    finally:
        accel.select(before)
