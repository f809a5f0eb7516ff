"""Is there a C compiler here? The accelerators' tests need to know: where there is one, a
module that did not build is a lost build step (the grader silently runs the slower reference);
where there is none, the reference running is the expected outcome."""

from __future__ import annotations

import shutil
import sysconfig


def c_compiler() -> str | None:
    """The path of the compiler Python's build uses (its ``CC``), or None."""
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    return shutil.which(cc)
