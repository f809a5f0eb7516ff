"""The tap's settings keys, one definition for both places a tap runs.

The ``tap_*`` keys are read by `dsv4-sidecar serve` (the in-process tap, ``tap_port``) and by
`dsv4-sidecar tap` (the tap in its own process and container, :class:`exporter.tap_settings
.TapSettings`); both settings classes take them from :class:`TapKeys`, so a bound or a default
is stated once, and :meth:`TapKeys.tap_config` is the one mapping from keys to
:class:`~exporter.samplers.tap.config.TapConfig`.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from exporter.samplers.tap.config import TapConfig


class TapKeys(BaseModel):
    """The keys of the pass-through tap (docs/tap.md), shared by the sidecar and the tap."""

    tap_sample_rate: float = Field(
        0.1, ge=0, le=1, description="Fraction of tap responses graded (by request hash)."
    )
    tap_sample_seed: int = Field(
        0, ge=-(1 << 63), le=(1 << 63) - 1, description="Key of the tap's sampling hash (64-bit)."
    )
    tap_queue: int = Field(
        256, ge=1, le=1_000_000, description="Tap samples waiting for hand-off, max."
    )
    tap_max_connections: int = Field(
        512, ge=1, le=65536, description="Tap client connections at once; more get 503."
    )
    tap_max_connections_per_client: int = Field(
        TapConfig.max_connections_per_client,
        ge=1,
        le=65536,
        description=(
            "Tap client connections at once from one address; more get 503 (behind a gateway "
            "every client shares its address: raise it up to tap_max_connections)."
        ),
    )
    tap_client_send_timeout: float = Field(
        TapConfig.client_send_timeout,
        gt=0,
        le=86400,
        description="Seconds a tap client may read nothing of a response; then it is cut.",
    )
    tap_upstream_read_timeout: float = Field(
        900.0,
        gt=0,
        le=86400,
        description="Seconds the tap waits for SGLang's next byte of a response; then 504.",
    )
    tap_capture_budget_bytes: int = Field(
        32 << 20,
        ge=1 << 20,
        le=1 << 32,
        description="Bytes all in-flight tap sampling captures keep together, max.",
    )

    def tap_config(self, upstream: str) -> TapConfig:
        """The tap's configuration from these keys, forwarding to ``upstream``."""
        return TapConfig(
            upstream=upstream,
            sample_rate=self.tap_sample_rate,
            sample_seed=self.tap_sample_seed,
            queue_size=self.tap_queue,
            max_connections=self.tap_max_connections,
            max_connections_per_client=self.tap_max_connections_per_client,
            client_send_timeout=self.tap_client_send_timeout,
            upstream_read_timeout=self.tap_upstream_read_timeout,
            capture_budget_bytes=self.tap_capture_budget_bytes,
        )
