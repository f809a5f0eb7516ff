"""SGLang as a row of the engine table (:mod:`exporter.sources.engine`).

Identified by ``/server_info``: its server args, a JSON object with ``model_path`` (vLLM's
dev-mode ``/server_info`` answers ``vllm_config``, never ``model_path``). Its dialect comes from
``tool_call_parser`` in those server args; its footprint is the one the model prices.
"""

from __future__ import annotations

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
from exporter.sources.sglang.source import SglangSource


class SglangEngine:
    name = "sglang"
    footprint_modelled = True
    probes: tuple[Probe, ...] = (Probe("/server_info"),)

    def identify(self, answers: Answers) -> bool:
        info = answers.get("/server_info")
        return isinstance(info, Mapping) and isinstance(info.get("model_path"), str)

    def source(self, base_url: str, poll: EnginePoll) -> SglangSource:
        return SglangSource(base_url, **poll.kwargs())

    def dialect(self, setting: str | None, source: EngineSource, config: ModelConfig) -> Dialect:
        parser = source.tool_call_parser if isinstance(source, SglangSource) else None
        return resolve_dialect(setting, parser, config, self.name)

    def dialect_rules(self, source: EngineSource) -> str:
        return ""  # SGLang's detectors are graded by dialect alone


SGLANG = SglangEngine()
