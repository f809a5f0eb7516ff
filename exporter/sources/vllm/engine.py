"""vLLM as a row of the engine table (:mod:`exporter.sources.engine`).

Identified by ``/version`` (``{"version": ...}``) together with ``vllm:`` families on
``/metrics``: ``/version`` alone is too common a path to decide on (vLLM's ``/server_info``
exists only in its dev mode). vLLM serves no endpoint with its ``--tool-call-parser``, so its
dialect is configured or taken from config.json, engine-qualified with the release from
``/version`` (``v4@vllm-0.30.0``). Its KV cache is
its own allocator: the footprint model does not price it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

from exporter.dsml.dialect import resolve_dialect
from exporter.dsml.vllm_releases import rules_for
from exporter.sources.engine import (
    Answers,
    Dialect,
    EnginePoll,
    EngineSource,
    ModelConfig,
    Probe,
)
from exporter.sources.vllm.metrics_text import has_vllm_families
from exporter.sources.vllm.source import VllmSource
from exporter.sources.vllm.version import release_of


class VllmEngine:
    name = "vllm"
    footprint_modelled = False
    probes: tuple[Probe, ...] = (Probe("/version"), Probe("/metrics", "text"))

    def identify(self, answers: Answers) -> bool:
        version, text = answers.get("/version"), answers.get("/metrics")
        if not (isinstance(version, Mapping) and isinstance(version.get("version"), str)):
            return False
        with contextlib.suppress(ValueError, TypeError, IndexError):  # garbage exposition
            return isinstance(text, str) and has_vllm_families(text)
        return False

    def source(self, base_url: str, poll: EnginePoll) -> VllmSource:
        return VllmSource(base_url, **poll.kwargs())

    def dialect(self, setting: str | None, source: EngineSource, config: ModelConfig) -> Dialect:
        """Engine-qualified with the release its ``/version`` reports (``v4@vllm-0.30.0``)."""
        return resolve_dialect(setting, None, config, self.name, _release(source))

    def dialect_rules(self, source: EngineSource) -> str:
        found, how = rules_for(_release(source))
        return f"vllm {found.name} ({how})"


def _release(source: EngineSource) -> str | None:
    """The release vLLM's ``/version`` reported, None until known."""
    return release_of(source.facts) if isinstance(source, VllmSource) else None


VLLM = VllmEngine()
