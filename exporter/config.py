"""Sidecar configuration: one settings model, three ways in.

Every key can be set in a YAML config file (``--config``), as an environment variable
(``DSV4_SIDECAR_<KEY>``), or as a command-line flag (``--key-with-dashes``); flags win over
the environment, which wins over the file. A bad value is reported naming the key, where it
came from, and how to fix it (``ConfigError``; the CLI exits 2 with it): malformed values,
files named by a key that cannot be read (canary prompts, the samples token), empty tokens
(an empty token would silently leave an endpoint open or off), unknown presets and fault
scripts. Unknown ``DSV4_SIDECAR_*`` variables (a typo would otherwise be ignored) are warned
about with the closest known name.

Deployment facts SGLang does not report (the index-K dtype under the production fork's
``SGLANG_DSV4_BF16_INDEX_K``, the compress-state dtype, online compress) are also read from
the same environment variables SGLang uses, since in a pod the sidecar gets SGLang's env.
"""

from __future__ import annotations

import argparse
import difflib
import json
import logging
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar, get_args, get_origin, overload

import yaml
from pydantic import Field, SecretStr, ValidationError, ValidationInfo, field_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

log = logging.getLogger(__name__)

ENV_PREFIX = "DSV4_SIDECAR_"
# Variables with the prefix that are not settings (the test oracle's download cache).
NOT_SETTINGS = frozenset({"DSV4_SIDECAR_CACHE"})

# How to fix a bad value, per key (the generic hint is the field's description).
FIXES: dict[str, str] = {
    "redact_patterns": "give one regex, several separated by newlines, or a JSON list of "
    "regexes, e.g. 'secret[0-9]+' or '[\"secret[0-9]+\", \"tok_[a-z]+\"]'",
    "canary_prompts_file": "point it at a readable JSON list or JSON Lines file of "
    "{messages, tools} objects, or unset it to use the built-in prompts",
    "fake_faults": "use comma-separated faults: init=ERROR[:TIMES], lost=GPU@FROM[-TO], "
    "hang=SECONDS[@AT], zero; e.g. 'init=driver_not_loaded:2,lost=1@10'",
    "model_preset": "use deepseek-v4-flash or deepseek-v4-pro, or set model_config_path "
    "to the model's config.json instead",
    "ingest_token": "set a token of letters, digits and -._~+/ (e.g. `openssl rand -hex 32`, "
    "from a Kubernetes Secret), or unset the key",
    "samples_token": "set a token of letters, digits and -._~+/ (e.g. `openssl rand -hex 32`, "
    "from a Kubernetes Secret), or unset the key",
    "samples_token_file": "mount the Secret holding the token at that path, or unset the key "
    "(GET /api/v1/samples is then off)",
}


class ConfigError(ValueError):
    """A configuration problem, phrased for the person who has to fix it."""


# RFC 6750 §2.1 b64token: what a bearer token can be and still arrive intact.
_B64TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")


def _bearer_token(raw: str) -> str:
    token = raw.strip()
    if not token:
        raise ValueError("is empty (an empty token would leave the endpoint open or off)")
    if not _B64TOKEN.fullmatch(token):
        raise ValueError(
            "has characters a bearer token cannot carry (RFC 6750 b64token: letters, digits "
            "and -._~+/ then optional '='); no client could ever send it, every request would "
            "get 401: generate one with e.g. `openssl rand -hex 32`"
        )
    return token


class SidecarSettings(BaseSettings):
    """Everything `dsv4-sidecar serve` can be told. Field descriptions feed the docs."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid", frozen=True)

    # HTTP
    host: str = Field("0.0.0.0", description="Address the sidecar listens on.")
    port: int = Field(9400, ge=0, le=65535, description="Port of /metrics and the API.")
    listen_file: Path | None = Field(
        None,
        description="File serve writes the address it listens on to (JSON), for the image's "
        "HEALTHCHECK (`python -m exporter.healthcheck`); the image sets it under /tmp.",
    )
    engine: Literal["auto", "sglang", "vllm"] = Field(
        "auto",
        description="The serving engine at sglang_url: sglang, vllm, or auto (discovered: "
        "SGLang's /server_info, else vLLM's /version with vllm: families on /metrics). Under "
        "vllm, sglang_url (and the sglang_* poll settings) name the vLLM server; dsml_dialect "
        "is vLLM's --tool-call-parser dialect (deepseek_v4: v4).",
    )
    # SGLang
    sglang_url: str = Field("http://127.0.0.1:30000", description="SGLang server base URL.")
    sglang_poll_interval: float = Field(5.0, gt=0, description="Seconds between SGLang polls.")
    sglang_timeout: float = Field(2.0, gt=0, description="Timeout of one SGLang request (s).")
    sglang_metrics: bool = Field(True, description="Also poll SGLang's /metrics.")
    # GPUs
    gpu_backend: Literal["nvml", "fake"] = Field(
        "nvml",
        description="nvml, or fake: the simulated SGLang's GPUs, read from the simulator at "
        "sglang_url (a plugin of the simulator, exporter.sim.gpus).",
    )
    nvml_poll_interval: float = Field(2.0, gt=0, description="Seconds between NVML polls.")
    nvml_timeout: float = Field(1.5, gt=0, description="Abandon an NVML poll after this (s).")
    per_process_memory: bool = Field(False, description="Export per-process GPU memory (pids).")
    rank_map: list[int] | None = Field(
        None, description="GPU index of each rank (rank i -> rank_map[i]); default visible order."
    )
    node_rank: int = Field(
        0,
        ge=0,
        le=1023,
        description="SGLang's --node-rank of this pod's node (multi-node: per pod, e.g. from "
        "the LeaderWorkerSet worker index); GPU ranks are labelled node_rank * gpus_per_node "
        "+ local index.",
    )
    nnodes: int | None = Field(
        None,
        ge=1,
        le=1024,
        description="SGLang's --nnodes; default: the nnodes SGLang reports in /server_info, "
        "else 1.",
    )
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
    dsml_dialect: Literal["auto", "v3.2", "v4", "v4.1"] = Field(
        "auto",
        description="DSML dialect of the deployment's tool parser; auto: SGLang's "
        "tool_call_parser, else the model's config.json, else each block's own spelling.",
    )
    canary: bool = Field(True, description="Run the canary prober against sglang_url.")
    canary_interval: float = Field(30.0, gt=0, description="Seconds per round of canaries.")
    canary_concurrency: int = Field(2, ge=1, le=64, description="Canary requests in flight, max.")
    canary_timeout: float = Field(60.0, gt=0, description="Timeout of one canary request (s).")
    canary_max_tokens: int = Field(1024, ge=16, description="max_tokens of canary requests.")
    canary_prompts_file: Path | None = Field(
        None, description="JSON list / JSON Lines of {messages, tools} replacing the built-ins."
    )
    canary_long: bool = Field(
        False,
        description="Also run the long-generation canary: prompts asking for a long free-form "
        "answer and then a tool call (docs/sampling.md; its cost is bounded by "
        "canary_long_tokens_per_hour).",
    )
    canary_long_concurrency: int = Field(
        1, ge=1, le=8, description="Long-generation canary requests in flight, max."
    )
    canary_long_max_tokens: int = Field(
        4096, ge=256, le=32768, description="max_tokens of long-generation canary requests."
    )
    canary_long_interval: float = Field(
        600.0, gt=0, description="Seconds per round of long-generation canaries (at least)."
    )
    canary_long_tokens_per_hour: int = Field(
        50_000,
        ge=1000,
        description="Output-token budget of the long-generation canary per hour: the interval "
        "is raised until concurrency x max_tokens x rounds per hour fits it.",
    )
    canary_long_prompts_file: Path | None = Field(
        None,
        description="JSON list / JSON Lines of {messages, tools} replacing the long built-ins.",
    )
    samples_token: SecretStr | None = Field(
        None, description="Bearer token for GET /api/v1/samples (off when unset; not empty)."
    )
    samples_token_file: Path | None = Field(
        None, description="File holding the samples bearer token (e.g. a mounted Secret)."
    )
    ingest_token: SecretStr | None = Field(
        None,
        description="Bearer token POST /api/v1/samples requires (not empty). Without one, "
        "ingest only answers when the sidecar listens on loopback (docs/deploy.md).",
    )
    samples_capacity: int = Field(200, ge=1, le=100_000, description="Bad samples kept.")
    sample_text_cap: int = Field(4096, ge=256, description="Characters kept per stored sample.")
    redact_patterns: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Extra regexes redacted from stored samples: one regex, several on "
        "separate lines, or a JSON list.",
    )
    ingest_max_bytes: int = Field(8 << 20, ge=1024, description="Max body of POST /api/v1/samples.")
    grading_queue: int = Field(1000, ge=1, description="Samples waiting for the grader, max.")
    grading_queue_bytes: int = Field(
        32 << 20, ge=1 << 20, description="Bytes the samples waiting for the grader hold, max."
    )
    ingest_concurrency: int = Field(
        1, ge=1, le=64, description="POST /api/v1/samples bodies read at once; more get 429."
    )
    samples_max_bytes: int = Field(
        8 << 20, ge=1 << 20, description="Bytes the stored bad samples hold, max (oldest go)."
    )
    # Pass-through tap
    tap_port: int | None = Field(
        None, ge=0, le=65535, description="Listen port of the pass-through tap (off when unset)."
    )
    tap_host: str | None = Field(None, description="Tap listen address (default: host).")
    tap_sample_rate: float = Field(
        0.1, ge=0, le=1, description="Fraction of tap responses graded (by request hash)."
    )
    tap_sample_seed: int = Field(
        0, ge=-(1 << 63), le=(1 << 63) - 1, description="Key of the tap's sampling hash (64-bit)."
    )
    tap_queue: int = Field(256, ge=1, description="Tap samples waiting for hand-off, max.")
    tap_max_connections: int = Field(
        512, ge=1, le=65536, description="Tap client connections at once; more get 503."
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
        if isinstance(v, str):
            v = _pattern_list(v)
        if not isinstance(v, list):
            raise ValueError("expected a regex or a list of regexes")
        for p in v:
            if not isinstance(p, str):
                raise ValueError(f"pattern {p!r} is not a string")
            try:
                re.compile(p)
            except re.error as exc:
                raise ValueError(f"pattern {p!r} is not a valid regex: {exc}") from None
        return v

    @field_validator("samples_token", "ingest_token")
    @classmethod
    def _token_usable(cls, v: SecretStr | None) -> SecretStr | None:
        """Stripped of surrounding whitespace (a Secret written with ``echo`` ends in a newline)
        and refused at start unless it can be sent in ``Authorization: Bearer`` at all."""
        if v is None:
            return None
        return SecretStr(_bearer_token(v.get_secret_value()))

    @field_validator("tap_port")
    @classmethod
    def _tap_speaks_http(cls, v: int | None, info: ValidationInfo) -> int | None:
        url = info.data.get("sglang_url")
        if v is not None and isinstance(url, str) and url.startswith("https://"):
            raise ValueError(
                "the tap forwards plain HTTP to SGLang, but sglang_url is https://; point "
                "sglang_url at SGLang's http:// port (it is on localhost in the pod) or unset "
                "tap_port"
            )
        return v

    @field_validator("gpu_backend")
    @classmethod
    def _backend_installed(cls, v: str) -> str:
        if v != "nvml":
            from exporter.sources import gpu_backends

            gpu_backends.load(v)  # GpuBackendError (a ValueError) names what is installed
        return v

    @field_validator("fake_faults")
    @classmethod
    def _faults_parse(cls, v: str) -> str:
        """Checked by the fake GPU backend (a plugin: exporter.sources.gpu_backends), whose
        fault script it is."""
        if v.strip():
            from exporter.sources import gpu_backends

            try:
                gpu_backends.load("fake").check_faults(v)
            except (ValueError, KeyError) as exc:
                raise ValueError(f"fault script {v!r} does not parse: {exc}") from None
        return v

    @field_validator("model_preset")
    @classmethod
    def _known_preset(cls, v: str | None) -> str | None:
        if v is not None:
            from exporter.footprint.presets import PRESETS

            if v.strip().lower() not in PRESETS:
                raise ValueError(f"unknown preset {v!r}; known: {', '.join(PRESETS)}")
        return v

    def file_problems(self) -> list[tuple[str, str]]:
        """(key, problem) for each file a key names that cannot be used: checked when the
        server starts (``load_settings(check_files=True)``), not whenever settings are parsed,
        so deployment artefacts can be validated away from the pod."""
        problems = []
        path = self.samples_token_file
        if path is not None:
            try:
                _bearer_token(path.read_text(encoding="utf-8"))
            except ValueError as exc:  # UnicodeDecodeError is one too
                problems.append(("samples_token_file", f"the token in {str(path)!r} {exc}"))
            except OSError as exc:
                why = getattr(exc, "strerror", None) or type(exc).__name__
                problems.append(("samples_token_file", f"cannot read {str(path)!r}: {why}"))
        from exporter.samplers.prompts import PromptsError, load_prompts

        for key in ("canary_prompts_file", "canary_long_prompts_file"):
            path = getattr(self, key)
            if path is not None:
                try:
                    load_prompts(path)
                except PromptsError as exc:
                    problems.append((key, str(exc)))
        return problems

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


def _pattern_list(text: str) -> list[str]:
    """A JSON list of regexes, else one regex per non-blank line (a plain regex such as
    ``[0-9]{16}`` is not JSON, so it is taken as it is)."""
    if text.lstrip().startswith("["):
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if isinstance(data, list):
            return data
    return [line for line in text.split("\n") if line.strip()]


def unknown_env(cls: type[BaseSettings], environ: Any = None) -> list[str]:
    """``DSV4_SIDECAR_*`` variables that name no setting, each with the closest known name."""
    prefix = cls.model_config.get("env_prefix", ENV_PREFIX)
    known = {env_name(k, cls) for k in cls.model_fields}
    out = []
    for name in sorted(os.environ if environ is None else environ):
        if name.startswith(prefix) and name not in known and name not in NOT_SETTINGS:
            close = difflib.get_close_matches(name, sorted(known), n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            out.append(f"unknown environment variable {name} ignored{hint}")
    return out


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


S = TypeVar("S", bound=BaseSettings)


@overload
def load_settings(
    flags: dict[str, Any] | None = None,
    config_file: Path | None = None,
    cls: None = None,
    check_files: bool = False,
) -> SidecarSettings: ...


@overload
def load_settings(
    flags: dict[str, Any] | None,
    config_file: Path | None,
    cls: type[S],
    check_files: bool = False,
) -> S: ...


def load_settings(
    flags: dict[str, Any] | None = None,
    config_file: Path | None = None,
    cls: type[BaseSettings] | None = None,
    check_files: bool = False,
) -> BaseSettings:
    """Merge file < env < flags and validate, turning pydantic errors into actionable ones;
    with ``check_files``, also require the files keys name to be usable (``file_problems``).
    ``cls`` defaults to :class:`SidecarSettings` (the simulator passes its own)."""
    cls = cls or SidecarSettings
    file_values = _read_file(config_file) if config_file else {}
    flags = {k: v for k, v in (flags or {}).items() if v is not None}
    env_keys = {k for k in cls.model_fields if env_name(k, cls) in os.environ}
    for warning in unknown_env(cls):
        log.warning("config: %s", warning)
    # File values sit below the environment: drop those the environment sets.
    merged = {k: v for k, v in file_values.items() if k not in env_keys}
    merged.update(flags)
    try:
        settings = cls(**merged)
    except ValidationError as exc:
        raise ConfigError(_explain(cls, exc, flags, env_keys, config_file)) from None
    except SettingsError as exc:  # the env source could not decode a value
        m = re.search(r'field "(\w+)"', str(exc))
        key = m.group(1) if m else "?"
        raise ConfigError(
            f"config error: {key}: cannot parse the value (from environment "
            f"{env_name(key, cls)}); fix: {FIXES.get(key, 'set a valid value')}"
        ) from None
    problems = (
        settings.file_problems() if check_files and hasattr(settings, "file_problems") else []
    )
    if problems:
        lines = [
            f"{key}: {msg} (from {_origin(cls, key, flags, env_keys, config_file)}); "
            f"fix: {FIXES.get(key, 'set a valid value')}"
            for key, msg in problems
        ]
        raise ConfigError("config error: " + "; ".join(lines))
    return settings


def add_settings_arguments(parser: argparse.ArgumentParser, cls: type[BaseSettings]) -> None:
    """One ``--key-with-dashes`` flag per settings field (values validated by pydantic), plus
    ``--config FILE``. Flags default to None so that unset ones fall through to env / file."""
    parser.add_argument("--config", type=Path, default=None, help="YAML config file")
    for key, info in cls.model_fields.items():
        choices = None
        ann = info.annotation
        if get_origin(ann) is Literal:
            choices = list(get_args(ann))
        value = info.get_default(call_default_factory=True)
        default = "unset" if value is None else ("none" if value == [] else value)
        parser.add_argument(
            flag_name(key),
            dest=key,
            default=None,
            choices=choices,
            metavar=None if choices else "V",
            help=f"{info.description or ''} [env {env_name(key, cls)}; default {default}]",
        )


def settings_from_args(args: argparse.Namespace, cls: type[S], check_files: bool = False) -> S:
    flags = {k: getattr(args, k, None) for k in cls.model_fields}
    return load_settings(flags, getattr(args, "config", None), cls, check_files)


def _origin(
    cls: type[BaseSettings],
    key: str,
    flags: dict[str, Any],
    env_keys: set[str],
    config_file: Path | None,
) -> str:
    if key in flags:
        return f"flag {flag_name(key)}"
    if key in env_keys:
        return f"environment {env_name(key, cls)}"
    return f"{config_file} key {key!r}"


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
        origin = _origin(cls, key, flags, env_keys, config_file)
        field = cls.model_fields.get(key)
        fix = FIXES.get(key)
        if fix is None:
            hint = f" ({field.description})" if field and field.description else ""
            fix = f"set a valid value{hint}"
        msg = str(err["msg"]).removeprefix("Value error, ")
        lines.append(f"{key}: {msg} (from {origin}); fix: {fix}")
    return "config error: " + "; ".join(lines)
