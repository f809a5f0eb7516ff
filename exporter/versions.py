"""Release numbers out of engine version strings: the one rule SGLang's and vLLM's versions are
read by (``0.5.16``, ``0.5.12.post1``, ``0.5.23+sim``, ``v0.34.0rc1``, ``0.25.0+cu130`` all count
as their release). A leaf module, so both pure cores (footprint, dsml) can use it."""

from __future__ import annotations

import re

Release = tuple[int, int, int]

_VERSION_RE = re.compile(r"^\s*v?(\d+)\.(\d+)\.(\d+)")


def release_number(version: str) -> Release | None:
    """(major, minor, patch) of a version string, suffixes ignored; None when it has none."""
    match = _VERSION_RE.match(version)
    if not match:
        return None
    major, minor, patch = (int(g) for g in match.groups())
    return major, minor, patch
