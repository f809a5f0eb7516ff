"""Reading only what a source needs from a server's Prometheus exposition, bounded.

SGLang's and vLLM's ``/metrics`` carry dozens of histograms the sidecar never reads, and a
hostile or misconfigured server can send 100,000 series of one family. A parser hands its
families to :func:`family_pattern`; :func:`capped_lines` then keeps only those lines (a C regex
scan: the rest is never parsed) and at most :data:`MAX_SAMPLES_PER_FAMILY` samples of each,
counting what it dropped (``dsv4_source_samples_dropped_total``, via ``SourceHealth``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# Samples read per family: a TP 16 x DP 16 deployment with every scheduler reporting has 256;
# past the cap a family's lines are dropped unparsed (and counted).
MAX_SAMPLES_PER_FAMILY = 1024


def family_pattern(prefix: str, names: Iterable[str], suffixes: Iterable[str]) -> re.Pattern[str]:
    """Lines (TYPE/HELP included) of the families ``prefix`` + one of ``names``, each name
    optionally followed by one of ``suffixes``. ``prefix`` is a regex (``sglang[:_]``); the
    family a line counts under is the named group ``family`` (prefix and name)."""
    alternatives = "|".join(sorted(set(names)))
    tails = "|".join(sorted(set(suffixes)))
    return re.compile(
        rf"^(?:# (?:TYPE|HELP) )?(?P<family>{prefix}(?:{alternatives}))(?:{tails})?(?=[ {{\t]).*$",
        re.M,
    )


def capped_lines(text: str, pattern: re.Pattern[str]) -> tuple[str, int]:
    """The lines ``pattern`` matches, at most MAX_SAMPLES_PER_FAMILY samples and one TYPE and
    one HELP line per family, and how many lines were dropped (200,000 repeated HELP lines
    once passed uncounted and cost 2.8 s of parsing)."""
    kept: list[str] = []
    seen: dict[str, int] = {}
    described: set[tuple[str, str]] = set()  # (family, "TYPE" | "HELP") already kept
    dropped = 0
    for m in pattern.finditer(text):
        line = m.group(0)
        family = m.group("family")
        if line.startswith("#"):
            kind = (family, line[2:6])
            if kind in described:  # a repeated TYPE/HELP line: counted like a sample
                dropped += 1
            else:
                described.add(kind)
                kept.append(line)
            continue
        n = seen.get(family, 0)
        if n >= MAX_SAMPLES_PER_FAMILY:
            dropped += 1
            continue
        seen[family] = n + 1
        kept.append(line)
    return "\n".join(kept) + "\n", dropped
