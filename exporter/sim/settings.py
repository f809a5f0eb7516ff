"""Settings of the simulated SGLang: the deployment it pretends to be."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from exporter.dsml.vllm_releases import RULES as VLLM_RULES
from exporter.dsml.vllm_releases import rules_for as vllm_rules_for
from exporter.footprint.releases import NEWEST_RELEASE, VersionError, rules_for_version
from exporter.sim.vllm import VERSION as VLLM_VERSION
from exporter.topology import Topology, TopologyError

GIB_MAX = 1 << 20  # GiB per GPU: far above any GPU, far below float trouble
COUNT_MAX = 1_000_000
DELAY_MS_MAX = 600_000.0  # ten minutes per token is already no answer at all


class SimSettings(BaseSettings):
    """`dsv4-sidecar simulate` flags; also DSV4_SIM_<KEY> env vars and --config keys."""

    # Finite numbers with upper bounds: an inf budget or delay would start the simulator and
    # then hang or overflow at the first request instead of stopping at start with exit 2.
    model_config = SettingsConfigDict(
        env_prefix="DSV4_SIM_", extra="forbid", frozen=True, allow_inf_nan=False
    )

    engine: Literal["sglang", "vllm"] = Field(
        "sglang",
        description="The server the simulator poses as: SGLang (/server_info, sglang: metrics, "
        "SGLang's parser) or vLLM (/version, vllm: metrics and cache_config_info, the "
        "deepseek_v4 tool and reasoning parsers of the vllm_version release; no /server_info).",
    )
    vllm_version: str = Field(
        VLLM_VERSION,
        description="With engine vllm: the vLLM release the simulator reports on /version and "
        "whose deepseek_v4 parser rules deliver the tool calls (the release table of "
        "exporter/dsml/vllm_releases.py, 0.23.0-0.34.x; default the newest).",
    )
    host: str = Field("127.0.0.1", description="Listen address.")
    port: int = Field(30000, ge=0, le=65535, description="Listen port (SGLang's default).")
    model: str = Field("deepseek-v4-flash", description="Preset or config.json path.")
    index_k_dtype: Literal["fp8", "bf16", "fp4"] = Field("bf16", description="Index-K dtype.")
    configurator: Literal["legacy", "fixed"] = Field(
        "legacy",
        description="Index-K pricing: legacy = as fp8 (upstream; bf16 forks' bug), fixed = by "
        "dtype (a fork with the fix).",
    )
    sglang_version: str = Field(
        "0.5.20",
        description="SGLang release whose configurator and pool rules the simulator runs "
        "(reported as <version>+sim). The default deployment is the README's bf16 index-K "
        f"fork, built on 0.5.20; upstream's newest supported release is {NEWEST_RELEASE}.",
    )
    hicache: Literal["on", "off"] = Field("on", description="Hierarchical cache (HiCache).")
    available_gib: float = Field(
        50.0, gt=0, le=GIB_MAX, description="Budget handed to the configurator."
    )
    tp_size: int = Field(8, ge=1, le=64, description="Tensor-parallel ranks (GPUs).")
    pp_size: int = Field(1, ge=1, le=16, description="Pipeline stages.")
    nnodes: int = Field(
        1,
        ge=1,
        le=16,
        description="Nodes the deployment spans (SGLang's --nnodes). The simulator is the "
        "head (node 0, the only one serving HTTP); a worker node's sidecar points at it.",
    )
    mem_fraction_static: float | None = Field(
        None,
        gt=0,
        lt=1,
        description="Reported mem_fraction_static; default: the one that gives available_gib "
        "on this GPU (SGLang's budget = (GPU - context) x fraction - weights).",
    )
    gpu_memory_gib: float = Field(
        140.0, gt=0, le=GIB_MAX, description="Memory of each simulated GPU."
    )
    context_gib: float = Field(
        0.5, ge=0, le=GIB_MAX, description="CUDA context and buffers per GPU."
    )
    graph_gib: float = Field(2.0, ge=0, le=GIB_MAX, description="Decode CUDA graphs per GPU.")
    max_running_requests: int = Field(
        256, ge=1, le=COUNT_MAX, description="Max running requests per DP."
    )
    speculative: bool = Field(False, description="Report MTP speculative decoding on.")
    weights_gib: float = Field(70.0, ge=0, le=GIB_MAX, description="Reported weights per GPU.")
    background_running: int = Field(
        0, ge=0, le=COUNT_MAX, description="Requests reported running besides real ones."
    )
    ttft_ms: float = Field(
        20.0, ge=0, le=DELAY_MS_MAX, description="Time to first token of a streamed answer."
    )
    itl_ms: float = Field(10.0, ge=0, le=DELAY_MS_MAX, description="Time between streamed tokens.")
    chars_per_token: int = Field(4, ge=1, le=64, description="Characters per simulated token.")
    seed: int = Field(
        0,
        ge=-(1 << 63),
        le=(1 << 63) - 1,
        description="Seed of the corruption model (reproducible runs).",
    )
    probe_dir: Path | None = Field(
        None,
        description="Write simulated probe snapshots (one file per rank) here; with "
        "nnodes > 1 into node-<k>/ per node.",
    )
    index_k_gated: bool | None = Field(
        None,
        description="Whether index-K reads wait for the HiCache load (default: only fp8 is "
        "gated, modelling the fork whose bf16/fp4 index-K path lost the wait).",
    )
    corruption: Literal["model", "off"] = Field(
        "model", description="model: rate from index-K dtype, HiCache and concurrency; off: none."
    )

    @field_validator("sglang_version")
    @classmethod
    def _known_release(cls, value: str) -> str:
        try:
            rules_for_version(value)
        except VersionError as exc:
            raise ValueError(str(exc)) from None
        return value

    @field_validator("vllm_version")
    @classmethod
    def _known_vllm_release(cls, value: str) -> str:
        """A release the table has rules for: the simulator never guesses a parser."""
        if vllm_rules_for(value)[1] != "release":
            first, last = VLLM_RULES[0].first, VLLM_RULES[-1].last
            raise ValueError(
                f"vLLM release {value!r} is not in the release table "
                f"({'.'.join(map(str, first))} to {'.'.join(map(str, last[:2]))}.x)"
            )
        return value

    @model_validator(mode="after")
    def _launchable(self) -> SimSettings:
        """tp_size x pp_size must place over nnodes the way SGLang places it."""
        try:
            Topology(self.tp_size, self.pp_size, self.nnodes)
        except TopologyError as exc:
            raise ValueError(str(exc)) from None
        return self


FAULTS_FIX = (
    "use comma-separated faults: init=ERROR[:TIMES], lost=GPU@FROM[-TO], hang=SECONDS[@AT], "
    "zero; e.g. 'init=driver_not_loaded:2,lost=1@10', or unset it"
)


class FakeGpuSettings(BaseSettings):
    """The ``fake`` GPU backend's own settings (DSV4_FAKE_GPU_<KEY>), read by the plugin itself
    (``exporter.sim.gpus``) when the sidecar selects ``gpu_backend: fake``: simulator knobs stay
    out of the sidecar's production settings, and the sidecar's start-up validation asks the
    plugin to check them (``check_settings``)."""

    model_config = SettingsConfigDict(env_prefix="DSV4_FAKE_GPU_", extra="forbid", frozen=True)

    faults: str = Field(
        "",
        description="NVML fault script of the simulated GPUs, e.g. "
        "'init=driver_not_loaded:2,lost=1@10' (init=ERROR[:TIMES], lost=GPU@FROM[-TO] seconds, "
        "hang=SECONDS[@AT], zero).",
        json_schema_extra={"fix": FAULTS_FIX},
    )

    @field_validator("faults")
    @classmethod
    def _faults_parse(cls, v: str) -> str:
        if v.strip():
            from exporter.sim.fake_nvml import FakeNvml

            try:
                FakeNvml(count=1, faults=v)
            except (ValueError, KeyError) as exc:
                raise ValueError(f"fault script {v!r} does not parse: {exc}") from None
        return v
