"""A stand-in third engine ("trtllm"), the way a real one would be added: this package and
one row of the engine table (tests/sidecar/test_engine_registry.py adds the row). Nothing
else in the sidecar is edited for it.

Its server answers ``/v1/trt/info`` with its identity, served model, tool parser and running
requests; its source is a thin poller on the shared HTTP base.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client.core import Metric

from exporter.sources import bounded
from exporter.sources import reasons as source_reasons
from exporter.sources.engine import (
    Answers,
    Dialect,
    EnginePoll,
    EngineSource,
    ModelConfig,
    Probe,
)
from exporter.sources.poller import HttpPoller, PollError
from exporter.sources.sglang.memory import RankMemory
from exporter.sources.sglang.server_info import ServerFacts

INFO = "/v1/trt/info"
# its --tool-parser names -> DSML dialect (as SGLang's and vLLM's tables in exporter/dsml)
PARSER_DIALECTS = {"trt_deepseek_v4": "v4", "trt_deepseek_v41": "v4.1"}


class TrtSource(HttpPoller):
    """Polls the stand-in's info endpoint."""

    def __init__(self, base_url: str, **poll: Any) -> None:
        poll.pop("scrape_metrics", None)
        super().__init__(
            "trtllm",
            base_url,
            reasons=(*(r.name for r in source_reasons.HTTP), "bad_shape"),
            **poll,
        )
        self.info: Mapping[str, Any] | None = None

    async def poll(self) -> None:
        info = await self.get_json(INFO, bounded.SERVER_INFO_MAX_BYTES)
        if not isinstance(info, Mapping) or not isinstance(info.get("running"), int):
            raise PollError("bad_shape", f"{INFO} has no running count")
        self.info = info

    def went_down(self) -> None:
        self.info = None

    def collect(self) -> Iterable[Metric]:
        return ()

    def served_model(self) -> str | None:
        model = self.info.get("model") if self.info else None
        return model if isinstance(model, str) else None

    def running(self) -> int | None:
        return int(self.info["running"]) if self.info else None

    def memory_by_rank(self) -> dict[int, RankMemory]:
        return {}

    def footprint_facts(self) -> ServerFacts | None:
        return None

    def tool_parser(self) -> str | None:
        parser = self.info.get("tool_parser") if self.info else None
        return parser if isinstance(parser, str) else None


class TrtEngine:
    name = "trtllm"
    footprint_modelled = False
    probes: tuple[Probe, ...] = (Probe(INFO),)

    def identify(self, answers: Answers) -> bool:
        info = answers.get(INFO)
        return isinstance(info, Mapping) and isinstance(info.get("trtllm_version"), str)

    def source(self, base_url: str, poll: EnginePoll) -> TrtSource:
        return TrtSource(base_url, **poll.kwargs())

    def dialect(self, setting: str | None, source: EngineSource, config: ModelConfig) -> Dialect:
        if setting and setting != "auto":
            return setting, "configured"
        parser = source.tool_parser() if isinstance(source, TrtSource) else None
        found = PARSER_DIALECTS.get(parser or "")
        return (found, "tool_call_parser") if found else (None, "unknown")

    def dialect_rules(self, source: EngineSource) -> str:
        return ""


TRTLLM = TrtEngine()
