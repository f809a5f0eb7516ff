"""Which serving engine the sidecar sits beside: configured, or discovered from the server.

The engine decides which source reads the server (SGLang's or vLLM's), the DSML dialect's
engine (:mod:`exporter.dsml.engines`) and whether the KV footprint is modelled. It is a
deployment fact, exported with where it came from (``dsv4_engine_info``):

- ``configured``: the ``engine`` setting is ``sglang`` or ``vllm``;
- ``discovered`` (``engine: auto``): SGLang answers ``/server_info`` with its server args (a
  JSON object with ``model_path``); vLLM answers ``/version`` with ``{"version": ...}`` and
  serves ``vllm:`` families on ``/metrics`` (vLLM's ``/server_info`` exists only in its dev
  mode, and answers ``vllm_config``, never ``model_path``). Until one answers, ``unknown``;
  the poller retries every cycle and stops once it knows.

:func:`engine_of` is the pure decision; :class:`EngineDiscovery` the thin poller. It lives
beside the vLLM source because vLLM is the engine that made the sidecar ask.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from prometheus_client.core import Metric

from exporter.metrics import catalog as m
from exporter.sources import bounded
from exporter.sources import reasons as source_reasons
from exporter.sources.poller import HttpPoller, PollError, poll_forever
from exporter.sources.vllm.metrics_text import has_vllm_families

ENGINES = ("sglang", "vllm")
SETTING_VALUES = ("auto", *ENGINES)
# The engines whose KV footprint the model prices (exporter/footprint: SGLang's pools).
MODELLED = ("sglang",)
# /server_info failures that still mean a server answered (vLLM: 404; a dev-mode oddity: JSON)
_ANSWERED = ("http_status", "bad_json", bounded.TOO_DEEP)


def engine_of(server_info: Any, version: Any, metrics_text: str | None) -> str | None:
    """``sglang``, ``vllm`` or None (neither answered as itself yet)."""
    if isinstance(server_info, Mapping) and isinstance(server_info.get("model_path"), str):
        return "sglang"
    if isinstance(version, Mapping) and isinstance(version.get("version"), str):
        with contextlib.suppress(ValueError, TypeError, IndexError):
            if metrics_text is not None and has_vllm_families(metrics_text):
                return "vllm"
    return None


def _decide(server_info: Any, version: Any, metrics_body: bytes | None) -> str | None:
    """:func:`engine_of` on the raw /metrics body (decoded here, off the event loop)."""
    text = None if metrics_body is None else metrics_body.decode("utf-8", "replace")
    return engine_of(server_info, version, text)


def footprint_fact(engine: str | None) -> str:
    """``modelled``, ``not modelled: vllm`` or ``unknown`` (the engine is not known yet)."""
    if engine is None:
        return "unknown"
    return "modelled" if engine in MODELLED else f"not modelled: {engine}"


class EngineDiscovery(HttpPoller):
    """Holds the engine fact; with ``engine: auto``, polls until the server says which it is
    and then calls ``on_found(engine)`` once."""

    def __init__(
        self,
        setting: str,
        base_url: str,
        *,
        poll_interval: float = 5.0,
        timeout: float = 2.0,
        on_found: Callable[[str], None] | None = None,
    ) -> None:
        super().__init__(
            "engine",
            base_url,
            poll_interval=poll_interval,
            timeout=timeout,
            reasons=source_reasons.names("engine"),
            max_body_bytes=bounded.METRICS_MAX_BYTES,
        )
        if setting not in SETTING_VALUES:
            raise ValueError(f"engine must be one of {SETTING_VALUES}, not {setting!r}")
        self.health.gates_readiness = False  # the engine source gates readiness, not this
        self.engine: str | None = None if setting == "auto" else setting
        self.source = "unknown" if setting == "auto" else "configured"
        self._on_found = on_found or (lambda engine: None)

    async def run(self, stop: asyncio.Event) -> None:
        try:
            await poll_forever(
                stop, self.poll_once, self.poll_interval, until=lambda: self.engine is not None
            )
        finally:
            await self.aclose()

    async def poll(self) -> None:
        info = version = text = None
        try:
            info = await self.get_json("/server_info", bounded.SERVER_INFO_MAX_BYTES)
        except PollError as exc:
            if exc.reason not in _ANSWERED:
                raise  # nothing answers (unreachable, timeout): that is the reason, not undecided
        # Only SGLang's shape ends the search here: vLLM in dev mode (VLLM_SERVER_DEV_MODE)
        # answers /server_info too, with {"vllm_config": ...}, and is told by /version.
        if engine_of(info, None, None) != "sglang":
            info = None
            with contextlib.suppress(PollError):
                version = await self.get_json("/version", bounded.SERVER_INFO_MAX_BYTES)
            if version is not None:
                reply = await self.get("/metrics", bounded.METRICS_MAX_BYTES)
                if reply.status == 200:
                    text = reply.body
        found = await self.offload(_decide, info, version, text)
        if found is None:
            raise PollError("undecided", "neither SGLang's /server_info nor vLLM's /version")
        self.engine, self.source = found, "discovered"
        self._on_found(found)

    def collect(self) -> Iterable[Metric]:
        yield m.ENGINE_INFO.info(
            {
                "engine": self.engine or "unknown",
                "source": self.source,
                "footprint": footprint_fact(self.engine),
            }
        )
