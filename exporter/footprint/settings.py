"""Deployment switches that change the DSV4 pool footprint (docs/footprint.md, "Switches")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

IndexKDtype = Literal["fp8", "bf16", "fp4"]
Configurator = Literal["legacy", "fixed"]
StateDtype = Literal["float32", "bfloat16"]

INDEX_K_DTYPES: tuple[IndexKDtype, ...] = ("fp8", "bf16", "fp4")
CONFIGURATORS: tuple[Configurator, ...] = ("legacy", "fixed")
STATE_DTYPES: dict[str, int] = {"float32": 4, "bfloat16": 2}

# SGLang forces the SWA ratio to 0.1 for DSV4 when --swa-full-tokens-ratio is left at 0.8.
DSV4_SWA_RATIO = 0.1
DSV4_PAGE_SIZE = 256  # DSV4 requires 256
DSV4_MAX_RUNNING_REQUESTS = 256
# SGLang's --chunked-prefill-size and SGLANG_SWA_EVICTION_INTERVAL defaults (environ.py):
# both size the SWA pool in cap mode.
DEFAULT_CHUNKED_PREFILL_SIZE = 8192
DEFAULT_SWA_EVICTION_INTERVAL = 128


# Deployment switches that change the footprint in ways the model does not reproduce (read from
# SGLang 0.5.23's pool_configurator.py / deepseek_v4_memory_pool.py): where one is on, the
# sidecar and `plan` say "not modelled: <switch>" and export no number rather than a wrong one.
NOT_MODELLED_SWITCHES: dict[str, str] = {
    "unified-kv": "unified KV ring pools (SGLANG_DSV4_UNIFIED_KV*, HIP/triton path)",
    "trtllm-layout": "--dsv4-attn-backend trtllm (uniform-FP8 layout, SM100)",
    "hisparse": "--enable-hisparse (c4 pool shrunk by the host-to-device ratio)",
    "dspark-draft": "DSpark draft worker (--speculative-algorithm DSPARK)",
    "encoder-replay": "encoder SWA bounded replay (request-window SWA)",
    "pd-decode-slots": "PD disaggregation decode extra slots",
    "swa-cap-mode": "SWA cap mode with speculative decoding (draft tokens and the spec "
    "decode allocation widen each request's SWA cap)",
}


class SettingsError(ValueError):
    """An impossible deployment setting; the message names it and the valid range."""


@dataclass(frozen=True)
class DeploymentSettings:
    """What the configurator and the device pool are told, beyond the model geometry."""

    index_k_dtype: IndexKDtype = "fp8"
    swa_full_tokens_ratio: float = DSV4_SWA_RATIO
    page_size: int = DSV4_PAGE_SIZE
    max_running_requests: int = DSV4_MAX_RUNNING_REQUESTS  # per attention-DP worker
    compress_state_dtype: StateDtype = "float32"
    speculative: bool = False
    # --speculative-num-draft-tokens as SGLang resolved it (max_speculative_num_draft_tokens):
    # bounded by the compress-state ring (refusals.py) and, with online compress and
    # SGLANG_EXPERIMENTAL_ONLINE_C128_MTP, the number of extra c128 state banks.
    num_draft_tokens: int = 0
    online_compress: bool = False
    # SGLANG_EXPERIMENTAL_ONLINE_C128_MTP=1 (0.5.14+): online compress allowed with MTP.
    online_c128_mtp: bool = False
    hisparse_ratio: float | None = None  # host-to-device ratio of HiSparse c4, None when off
    unmodelled: tuple[str, ...] = ()  # switches in use from NOT_MODELLED_SWITCHES
    # --swa-full-tokens-ratio given by the operator. Left unset, SGLang 0.5.21+ sizes the SWA
    # pool in cap mode (pricing.swa_cap_tokens) and swa_full_tokens_ratio is not used.
    swa_ratio_explicit: bool = True
    # Cap-mode inputs (0.5.21+): --chunked-prefill-size, --swa-prefix-tails (None: 4 x mrr,
    # 0 with --disable-radix-cache), --disable-radix-cache, SGLANG_SWA_EVICTION_INTERVAL,
    # --disable-overlap-schedule (one prefill chunk in flight instead of two).
    chunked_prefill_size: int = DEFAULT_CHUNKED_PREFILL_SIZE
    swa_prefix_tails: int | None = None
    disable_radix_cache: bool = False
    swa_eviction_interval: int = DEFAULT_SWA_EVICTION_INTERVAL
    disable_overlap_schedule: bool = False

    def __post_init__(self) -> None:
        if self.index_k_dtype not in INDEX_K_DTYPES:
            raise SettingsError(
                f"index_k_dtype must be one of {INDEX_K_DTYPES}, got {self.index_k_dtype!r}"
            )
        if self.compress_state_dtype not in STATE_DTYPES:
            raise SettingsError(
                f"compress_state_dtype must be one of {tuple(STATE_DTYPES)}, "
                f"got {self.compress_state_dtype!r}"
            )
        if not 0.0 < self.swa_full_tokens_ratio <= 1.0:
            raise SettingsError(
                f"swa_full_tokens_ratio must be in (0, 1], got {self.swa_full_tokens_ratio}"
            )
        if self.page_size < 128 or self.page_size % 128:
            raise SettingsError(
                f"page_size must be a positive multiple of 128 (DSV4: 256), got {self.page_size}"
            )
        if self.max_running_requests < 0:
            # 0 is what releases up to 0.5.22 make of --max-running-requests below the
            # attention-DP size (releases.ReleaseRules.requests_per_worker_floor).
            raise SettingsError(
                f"max_running_requests must be >= 0, got {self.max_running_requests}"
            )
        unknown = [u for u in self.unmodelled if u not in NOT_MODELLED_SWITCHES]
        if unknown:
            raise SettingsError(
                f"unknown not-modelled switch(es) {unknown}: known are "
                f"{', '.join(NOT_MODELLED_SWITCHES)}"
            )
        if self.swa_prefix_tails is not None and self.swa_prefix_tails < 0:
            raise SettingsError(
                f"swa_prefix_tails must be >= 0 when set, got {self.swa_prefix_tails}"
            )
        if self.num_draft_tokens < 0:
            raise SettingsError(f"num_draft_tokens must be >= 0, got {self.num_draft_tokens}")
        if self.hisparse_ratio is not None and self.hisparse_ratio < 1:
            raise SettingsError(f"hisparse_ratio must be >= 1 when set, got {self.hisparse_ratio}")

    @property
    def not_modelled(self) -> tuple[str, ...]:
        """Switches in use whose footprint the model does not reproduce (see docs/footprint.md)."""
        found = list(self.unmodelled)
        if self.hisparse_ratio is not None and "hisparse" not in found:
            found.append("hisparse")
        return tuple(found)

    @property
    def state_dtype_bytes(self) -> int:
        return STATE_DTYPES[self.compress_state_dtype]

    @property
    def online_mtp_banks(self) -> int:
        """Extra c128 state banks of online compress with MTP (``1 + draft`` rows per row:
        ``CompressStatePool`` bank 0 committed, banks 1..N per-draft prefixes); 0 without."""
        if self.online_compress and self.speculative and self.online_c128_mtp:
            return self.num_draft_tokens
        return 0

    @property
    def ring_c4(self) -> int:
        return 16 if self.speculative else 8

    @property
    def ring_c128(self) -> int:
        if self.online_compress:
            return 1
        return 256 if self.speculative else 128
