"""Probe settings, read once from the environment of the SGLang process.

Environment only (no files, no flags): the probe is switched on for a pod by setting variables
on the SGLang container, and every spawned scheduler / TP worker inherits them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

TRUE = {"1", "true", "yes", "on"}
GAP_MODES = ("auto", "events", "host", "off")


def enabled(environ: Mapping[str, str] | None = None) -> bool:
    """``DSV4_PROBE`` set to 1/true/yes/on; anything else (or unset) leaves SGLang untouched."""
    env = os.environ if environ is None else environ
    return env.get("DSV4_PROBE", "").strip().lower() in TRUE


def _float(env: Mapping[str, str], name: str, default: float, lo: float, hi: float) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        return default
    return min(hi, max(lo, value)) if value == value else default


def default_directory(env: Mapping[str, str]) -> str:
    """``$XDG_RUNTIME_DIR/dsv4-probe`` (the user's own 0700 runtime directory), else
    ``/run/dsv4-probe``: never the world-writable temp dir, where another user could create
    the directory first (the writer refuses one it does not own: snapshot.open_snapshot_dir)."""
    runtime = env.get("XDG_RUNTIME_DIR", "").strip()
    if runtime and os.path.isabs(runtime):
        return os.path.join(runtime, "dsv4-probe")
    return "/run/dsv4-probe"


@dataclass(frozen=True)
class ProbeConfig:
    directory: Path
    interval_s: float = 1.0
    verify_rate: float = 0.0
    gap_mode: str = "auto"
    rank: str | None = None
    rank_grace_s: float = 30.0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ProbeConfig:
        """DSV4_PROBE_DIR (default :func:`default_directory`), DSV4_PROBE_INTERVAL_S (1),
        DSV4_PROBE_VERIFY (sample rate 0..1 of index-K reads to checksum, default 0 = off),
        DSV4_PROBE_GAP (auto|events|host|off), DSV4_PROBE_RANK (override the rank label)."""
        env = os.environ if environ is None else environ
        directory = env.get("DSV4_PROBE_DIR", "").strip() or default_directory(env)
        gap_mode = env.get("DSV4_PROBE_GAP", "auto").strip().lower()
        rank = env.get("DSV4_PROBE_RANK", "").strip() or None
        return cls(
            directory=Path(directory),
            interval_s=_float(env, "DSV4_PROBE_INTERVAL_S", 1.0, 0.05, 60.0),
            verify_rate=_float(env, "DSV4_PROBE_VERIFY", 0.0, 0.0, 1.0),
            gap_mode=gap_mode if gap_mode in GAP_MODES else "auto",
            rank=rank,
        )
