"""What `dsv4-sidecar tap` can be told: the tap's keys and where its samples go, nothing else.

The tap in its own process (docs/tap.md, "Its own process") reads the same config file,
environment (``DSV4_SIDECAR_*``) and flags as `serve`, through the same loader
(:mod:`exporter.config_loader`); its ``tap_*`` keys are the sidecar's (:class:`TapKeys`), one
definition of each. Keys only `serve` knows are refused here, as a typo would be.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from exporter.config import ENV_PREFIX, token_file_problem, token_value
from exporter.samplers.tap.config import TapConfig
from exporter.tap_keys import TapKeys


class TapSettings(BaseSettings, TapKeys):
    """Everything `dsv4-sidecar tap` can be told. Field descriptions feed the docs."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, extra="forbid", frozen=True, allow_inf_nan=False
    )

    host: str = Field("0.0.0.0", description="Address the tap and its /metrics listen on.")
    port: int = Field(9401, ge=0, le=65535, description="Port of the tap (SGLang's API).")
    metrics_port: int | None = Field(
        9402, ge=0, le=65535, description="Port of the tap's own /metrics (off when unset)."
    )
    server_url: str = Field(
        "http://127.0.0.1:30000",
        description="The serving engine's plain http:// base URL the tap forwards to.",
    )
    sidecar_url: str = Field(
        "http://127.0.0.1:9400",
        description="The sidecar the tap posts sampled exchanges to (POST /api/v1/samples).",
    )
    ingest_token_file: Path | None = Field(
        None,
        description="File holding the sidecar's ingest bearer token (a mounted Secret), read "
        "before each post; unset: posts without a token (a sidecar listening on loopback).",
    )
    tap_queue_bytes: int = Field(
        32 << 20,
        ge=1 << 20,
        le=1 << 34,
        description="Bytes the samples waiting to be posted to the sidecar hold, max; past "
        "it (or past tap_queue samples) they are dropped and counted.",
    )
    log_format: Literal["text", "json"] = Field(
        "text", description="Log lines on stderr: text, or json (one object per line)."
    )

    @field_validator("server_url", "sidecar_url")
    @classmethod
    def _plain_http(cls, v: str) -> str:
        TapConfig(upstream=v)  # the tap's own rule: http://host[:port]
        return v

    def file_problems(self) -> list[tuple[str, str]]:
        """The token file, checked at start (``load_settings(check_files=True)``)."""
        path = self.ingest_token_file
        problem = None if path is None else token_file_problem(path)
        return [] if problem is None else [("ingest_token_file", problem)]

    def ingest_token(self) -> str | None:
        """The token, read now (None when unset or unreadable)."""
        return token_value(None, self.ingest_token_file)
