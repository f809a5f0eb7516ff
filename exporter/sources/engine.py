"""What a serving engine is to the sidecar: the :class:`Engine` protocol and its source's.

An engine (SGLang, vLLM) is one row of :data:`exporter.sources.engines.ENGINES`, implemented in
its own package (``exporter/sources/<engine>/engine.py``). The row says

- how to tell the engine from what the server answers: the endpoints it reads (``probes``)
  and a pure :meth:`Engine.identify` over their answers (discovery walks the table in order
  and takes the first that answers as itself);
- how to build its source (:meth:`Engine.source`), which reports the served model, the
  running requests and the per-rank memory figures (:class:`EngineSource`);
- its DSML dialect from its tool-call parser setting (:meth:`Engine.dialect`, delegating to
  :func:`exporter.dsml.dialect.resolve_dialect`, the one mapping of parser names), and the
  per-release parser rules it grades under (:meth:`Engine.dialect_rules`);
- whether the footprint model prices its pools (``footprint_modelled``).

Nothing outside the engine's package and the table names an engine, so a third engine is one
package and one row (tests/sidecar/test_engine_registry.py adds one).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Literal, Protocol

from exporter.sources.base import Source

if TYPE_CHECKING:
    from exporter.sources.sglang.memory import RankMemory
    from exporter.sources.sglang.server_info import ServerFacts


@dataclass(frozen=True)
class Probe:
    """An endpoint an engine is identified by: its path and how its answer is read (``json``:
    the decoded document, ``text``: the body as text). A server that answers but not usably
    (not 200, not JSON) gives None; one that does not answer fails the discovery cycle."""

    path: str
    kind: Literal["json", "text"] = "json"


Answers = Mapping[str, Any]  # probe path -> its answer (None: answered, not usably)
ModelConfig = Mapping[str, Any] | None  # the served model's config.json, when readable
Dialect = tuple[str | None, str]  # (DSML dialect or None for auto, where it came from)


@dataclass(frozen=True)
class EnginePoll:
    """How an engine's source polls (the ``sglang_*`` poll settings, whatever the engine)."""

    poll_interval: float
    timeout: float
    scrape_metrics: bool = True
    on_change: Callable[[], None] | None = None

    def kwargs(self) -> dict[str, Any]:
        """The settings as a source constructor's keyword arguments."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


class EngineSource(Source, Protocol):
    """The source of an engine's server: what the rest of the sidecar reads from it."""

    def served_model(self) -> str | None:
        """The name clients send as ``model`` (the canary too); None until known."""

    def running(self) -> int | None:
        """Requests running right now, as the engine reports them."""

    def memory_by_rank(self) -> dict[int, RankMemory]:
        """Global rank -> the engine's own memory figures ({} when it reports none)."""

    def footprint_facts(self) -> ServerFacts | None:
        """The server facts the footprint model prices (None: not known, or not modelled)."""


class Engine(Protocol):
    """One serving engine: a row of the engine table."""

    name: str  # the ``engine`` setting's value, the source's name and the label value
    footprint_modelled: bool
    probes: tuple[Probe, ...]

    def identify(self, answers: Answers) -> bool:
        """Whether the server's answers to ``probes`` are this engine's (pure, no I/O)."""

    def source(self, base_url: str, poll: EnginePoll) -> EngineSource:
        """The source that polls this engine's server."""

    def dialect(self, setting: str | None, source: EngineSource, config: ModelConfig) -> Dialect:
        """The DSML dialect from the ``dsml_dialect`` setting, the engine's tool-call parser
        and the model's config.json."""

    def dialect_rules(self, source: EngineSource) -> str:
        """The engine's own per-release parser rules the grader applies, as
        ``dsv4_dsml_dialect_info``'s ``engine_rules`` shows them ("" where the dialect alone
        says what the client receives)."""


def footprint_fact(engine: Engine | None) -> str:
    """``modelled``, ``not modelled: <engine>`` or ``unknown`` (the engine is not known yet)."""
    if engine is None:
        return "unknown"
    return "modelled" if engine.footprint_modelled else f"not modelled: {engine.name}"
