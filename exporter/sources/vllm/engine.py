"""vLLM as a row of the engine table (:mod:`exporter.sources.engine`).

Identified by ``/version`` (``{"version": ...}``) together with ``vllm:`` families on
``/metrics``: ``/version`` alone is too common a path to decide on (vLLM's ``/server_info``
exists only in its dev mode). vLLM serves no endpoint with its ``--tool-call-parser``, so its
dialect is configured or taken from config.json, engine-qualified (``v4@vllm``). Its KV cache is
its own allocator: the footprint model does not price it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

from exporter.dsml.dialect import resolve_dialect
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
        return resolve_dialect(setting, None, config, self.name)


VLLM = VllmEngine()
