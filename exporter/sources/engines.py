"""The engine table: every serving engine the sidecar can sit beside, one row each.

Discovery walks it in order (the first engine that answers as itself wins; SGLang first, as
before the seam: until the server answers, SGLang's source runs); the ``engine`` setting takes a
row's name. A row is an :class:`~exporter.sources.engine.Engine`, implemented in the engine's
own package, so a third engine is one package and one line here.
"""

from __future__ import annotations

from exporter.sources.engine import Engine
from exporter.sources.sglang.engine import SGLANG
from exporter.sources.vllm.engine import VLLM

ENGINES: tuple[Engine, ...] = (SGLANG, VLLM)


def by_name(name: str, engines: tuple[Engine, ...] | None = None) -> Engine:
    """The row named ``name`` (of ``engines``, the table's by default); ValueError naming
    the known ones."""
    for engine in ENGINES if engines is None else engines:
        if engine.name == name:
            return engine
    raise ValueError(f"engine must be one of {setting_values(engines)}, not {name!r}")


def setting_values(engines: tuple[Engine, ...] | None = None) -> tuple[str, ...]:
    """What the ``engine`` setting accepts: ``auto`` and every row's name."""
    return ("auto", *(e.name for e in (ENGINES if engines is None else engines)))
