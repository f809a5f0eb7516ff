"""Sidecar configuration: one settings model, three ways in.

Every key can be set in a YAML config file (``--config``), as an environment variable
(``DSV4_SIDECAR_<KEY>``), or as a command-line flag (``--key-with-dashes``); flags win over
the environment, which wins over the file. A bad value is reported naming the key, where it
came from, and how to fix it.

Deployment facts SGLang does not report (the index-K dtype under the production fork's
``SGLANG_DSV4_BF16_INDEX_K``, the compress-state dtype, online compress) are also read from
the same environment variables SGLang uses, since in a pod the sidecar gets SGLang's env.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

ENV_PREFIX = "DSV4_SIDECAR_"


class ConfigError(ValueError):
    """A configuration problem, phrased for the person who has to fix it."""


class SidecarSettings(BaseSettings):
    """Everything `dsv4-sidecar serve` can be told. Field descriptions feed the docs."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", frozen=True)

    # HTTP
    host: str = Field("0.0.0.0", description="Address the sidecar listens on.")
    port: int = Field(9400, ge=0, le=65535, description="Port of /metrics and the API.")
    # SGLang
    sglang_url: str = Field("http://127.0.0.1:30000", description="SGLang server base URL.")
    sglang_poll_interval: float = Field(5.0, gt=0, description="Seconds between SGLang polls.")
    sglang_timeout: float = Field(2.0, gt=0, description="Timeout of one SGLang request (s).")
    sglang_metrics: bool = Field(True, description="Also poll SGLang's /metrics.")
    # GPUs
    gpu_backend: Literal["nvml", "fake"] = Field("nvml", description="nvml, or fake (simulator).")
    nvml_poll_interval: float = Field(2.0, gt=0, description="Seconds between NVML polls.")
    nvml_timeout: float = Field(1.5, gt=0, description="Abandon an NVML poll after this (s).")
    per_process_memory: bool = Field(False, description="Export per-process GPU memory (pids).")
    rank_map: list[int] | None = Field(
        None, description="GPU index of each rank (rank i -> rank_map[i]); default visible order."
    )
    fake_gpu_count: int | None = Field(
        None, ge=0, le=64, description="Fake backend: GPUs (default: SGLang's tp*pp, else 8)."
    )
    fake_gpu_memory_gib: float = Field(140.0, gt=0, description="Fake backend: memory per GPU.")
    fake_weights_gib: float = Field(70.0, ge=0, description="Fake backend: weights per GPU.")
    fake_faults: str = Field(
        "", description="Fake backend fault script, e.g. 'init=driver_not_loaded:2,lost=1@10'."
    )
    # Deployment facts
    model_config_path: Path | None = Field(
        None, description="The model's config.json (or its directory), when readable."
    )
    model_preset: str | None = Field(
        None, description="Preset to use when no config.json: deepseek-v4-flash|deepseek-v4-pro."
    )
    index_k_dtype: Literal["auto", "fp8", "bf16", "fp4"] = Field(
        "auto",
        description="auto: bf16 if SGLANG_DSV4_BF16_INDEX_K=1, fp4 if SGLang reports "
        "enable_deepseek_v4_fp4_indexer, else fp8.",
    )
    compress_state_dtype: Literal["auto", "float32", "bfloat16"] = Field(
        "auto", description="auto: SGLANG_DSV4_COMPRESS_STATE_DTYPE, else float32."
    )
    online_compress: bool | None = Field(
        None, description="Default: SGLANG_OPT_USE_ONLINE_COMPRESS."
    )
    configurator: Literal["auto", "legacy", "fixed"] = Field(
        "auto",
        description="Index-K pricing of the deployed configurator: legacy = as fp8 (every "
        "upstream release on NVIDIA; a bf16 fork without the fix), fixed = by dtype (a fork "
        "with the fix). auto = legacy, what upstream does; the release's other rules follow "
        "the version in /server_info.",
    )
    # Sampling and grading
    canary: bool = Field(True, description="Run the canary prober against sglang_url.")
    canary_interval: float = Field(30.0, gt=0, description="Seconds per round of canaries.")
    canary_concurrency: int = Field(2, ge=1, le=64, description="Canary requests in flight, max.")
    canary_timeout: float = Field(60.0, gt=0, description="Timeout of one canary request (s).")
    canary_max_tokens: int = Field(1024, ge=16, description="max_tokens of canary requests.")
    canary_prompts_file: Path | None = Field(
        None, description="JSON list / JSON Lines of {messages, tools} replacing the built-ins."
    )
    samples_token: SecretStr | None = Field(
        None, description="Bearer token for GET /api/v1/samples (off when unset)."
    )
    samples_token_file: Path | None = Field(
        None, description="File holding the samples bearer token (e.g. a mounted Secret)."
    )
    ingest_token: SecretStr | None = Field(
        None, description="If set, POST /api/v1/samples requires this bearer token."
    )
    samples_capacity: int = Field(200, ge=1, le=100_000, description="Bad samples kept.")
    sample_text_cap: int = Field(4096, ge=256, description="Characters kept per stored sample.")
    redact_patterns: list[str] = Field(
        default_factory=list, description="Extra regexes redacted from stored samples."
    )
    ingest_max_bytes: int = Field(8 << 20, ge=1024, description="Max body of POST /api/v1/samples.")
    grading_queue: int = Field(1000, ge=1, description="Samples waiting for the grader, max.")
    # Pass-through tap
    tap_port: int | None = Field(
        None, ge=0, le=65535, description="Listen port of the pass-through tap (off when unset)."
    )
    tap_host: str | None = Field(None, description="Tap listen address (default: host).")
    tap_sample_rate: float = Field(
        0.1, ge=0, le=1, description="Fraction of tap responses graded (by request hash)."
    )
    tap_sample_seed: int = Field(0, description="Key of the tap's sampling hash.")
    tap_queue: int = Field(256, ge=1, description="Tap samples waiting for hand-off, max.")
    # Probe
    probe_dir: Path | None = Field(None, description="Directory of probe snapshot files.")
    probe_stale_after: float = Field(5.0, gt=0, description="Probe file older than this is down.")

    @field_validator("sglang_url")
    @classmethod
    def _url(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return v.rstrip("/")

    @field_validator("redact_patterns", mode="before")
    @classmethod
    def _patterns(cls, v: Any) -> Any:
        import re

        if isinstance(v, str):
            v = [p for p in v.split("\n") if p.strip()]
        for p in v or []:
            try:
                re.compile(p)
            except re.error as exc:
                raise ValueError(f"pattern {p!r} is not a valid regex: {exc}") from None
        return v

    def samples_token_value(self) -> str | None:
        """The samples token from the setting or its file (stripped), None when off."""
        if self.samples_token is not None:
            return self.samples_token.get_secret_value() or None
        if self.samples_token_file is not None:
            try:
                return self.samples_token_file.read_text(encoding="utf-8").strip() or None
            except OSError:
                return None
        return None

    @field_validator("rank_map", mode="before")
    @classmethod
    def _rank_map(cls, v: Any) -> Any:
        if isinstance(v, str):
            return [int(x) for x in v.split(",") if x.strip()] if v.strip() else None
        return v

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # init kwargs carry CLI flags and (lowest) the YAML file, merged in load_settings.
        return (init_settings, env_settings)


def env_name(key: str, cls: type[BaseSettings] | None = None) -> str:
    prefix = (cls or SidecarSettings).model_config.get("env_prefix", ENV_PREFIX)
    return prefix + key.upper()


def flag_name(key: str) -> str:
    return "--" + key.replace("_", "-")


def _read_file(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: expected a mapping of keys to values")
    return {str(k).replace("-", "_"): v for k, v in data.items()}


def load_settings(
    flags: dict[str, Any] | None = None,
    config_file: Path | None = None,
    cls: type[BaseSettings] | None = None,
) -> Any:
    """Merge file < env < flags and validate, turning pydantic errors into actionable ones."""
    cls = cls or SidecarSettings
    file_values = _read_file(config_file) if config_file else {}
    flags = {k: v for k, v in (flags or {}).items() if v is not None}
    env_keys = {k for k in cls.model_fields if env_name(k, cls) in os.environ}
    # File values sit below the environment: drop those the environment sets.
    merged = {k: v for k, v in file_values.items() if k not in env_keys}
    merged.update(flags)
    try:
        return cls(**merged)
    except ValidationError as exc:
        raise ConfigError(_explain(cls, exc, flags, env_keys, config_file)) from None


def add_settings_arguments(parser: Any, cls: type[BaseSettings]) -> None:
    """One ``--key-with-dashes`` flag per settings field (values validated by pydantic), plus
    ``--config FILE``. Flags default to None so that unset ones fall through to env / file."""
    parser.add_argument("--config", type=Path, default=None, help="YAML config file")
    for key, info in cls.model_fields.items():
        choices = None
        ann = info.annotation
        if getattr(ann, "__origin__", None) is Literal:
            choices = list(ann.__args__)
        default = info.default if info.default is not None else "unset"
        parser.add_argument(
            flag_name(key),
            dest=key,
            default=None,
            choices=choices,
            metavar=None if choices else "V",
            help=f"{info.description or ''} [env {env_name(key, cls)}; default {default}]",
        )


def settings_from_args(args: Any, cls: type[BaseSettings]) -> Any:
    flags = {k: getattr(args, k, None) for k in cls.model_fields}
    return load_settings(flags, getattr(args, "config", None), cls)


def _explain(
    cls: type[BaseSettings],
    exc: ValidationError,
    flags: dict[str, Any],
    env_keys: set[str],
    config_file: Path | None,
) -> str:
    lines = []
    for err in exc.errors():
        key = str(err["loc"][0]) if err["loc"] else "?"
        if err["type"] == "extra_forbidden":
            known = ", ".join(sorted(cls.model_fields))
            lines.append(f"unknown key {key!r} in {config_file}; known keys: {known}")
            continue
        if key in flags:
            origin = f"flag {flag_name(key)}"
        elif key in env_keys:
            origin = f"environment {env_name(key, cls)}"
        else:
            origin = f"{config_file} key {key!r}"
        field = cls.model_fields.get(key)
        hint = f" ({field.description})" if field and field.description else ""
        lines.append(f"{key}: {err['msg']} (from {origin}); fix: set a valid value{hint}")
    return "config error: " + "; ".join(lines)
