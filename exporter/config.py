"""The sidecar's settings schema: every key, its type, bounds, default and how to fix it.

What a value may be lives here (:class:`SidecarSettings`, its validators, :data:`FIXES`); how
values arrive (file < environment < flags) and how a bad one is reported lives in
:mod:`exporter.config_loader`, so the schema can be read, documented (docs/configuration.md)
and tested apart from the loader, and the loader serves the simulator's schemas too.

Deployment facts SGLang does not report (the index-K dtype under the production fork's
``SGLANG_DSV4_BF16_INDEX_K``, the compress-state dtype, online compress) are also read from
the same environment variables SGLang uses, since in a pod the sidecar gets SGLang's env.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, ValidationInfo, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from exporter.gpu_plugins import BUILTIN, ENTRY_POINT_GROUP, installed
from exporter.samplers.tap.config import TapConfig
from exporter.samplers.tap.handover import BATCH_BYTES
from exporter.tap_keys import TapKeys

ENV_PREFIX = "DSV4_SIDECAR_"
# Upper bounds of the keys that become sleeps, timeouts, buffers or token counts: far above any
# sensible value, far below what overflows (asyncio's timer, a C size field, the event loop).
HOUR, DAY = 3600.0, 86400.0
TIMEOUT_MAX = 3600.0
MAX_TOKENS = 1 << 20  # above every model's context length
BYTES_MAX = 1 << 34  # 16 GiB: no in-memory budget of the sidecar is near this
MAX_GPUS_PER_NODE = 1024
# Variables with the prefix that are not settings (the test oracle's download cache).
NOT_SETTINGS = frozenset({"DSV4_SIDECAR_CACHE"})

# How to fix a bad value, per key (the generic hint is the field's description).
FIXES: dict[str, str] = {
    "redact_patterns": "give one regex, several separated by newlines, or a JSON list of "
    "regexes, e.g. 'secret[0-9]+' or '[\"secret[0-9]+\", \"tok_[a-z]+\"]'",
    "canary_prompts_file": "point it at a readable JSON list or JSON Lines file of "
    "{messages, tools} objects, or unset it to use the built-in prompts",
    "tap_port": "give the tap a port of its own (not the sidecar's port) and point server_url "
    "at SGLang's plain http:// port, or unset tap_port",
    "node_rank": "set node_rank to this pod's node index, 0..nnodes-1 (e.g. from the "
    "LeaderWorkerSet worker index), or correct nnodes",
    "rank_map": "list one GPU index per rank, each GPU once, e.g. 0,1,2,3, or unset it",
    "engine": "use auto (discovered), or the name of a row of the engine table: sglang or vllm",
    "gpu_backend": "use nvml, or install the package that provides the backend (an entry "
    f"point in group {ENTRY_POINT_GROUP!r}) into the sidecar's environment",
    "model_preset": "use deepseek-v4-flash or deepseek-v4-pro, or set model_config_path "
    "to the model's config.json instead",
    "ingest_token": "set a token of letters, digits and -._~+/ (e.g. `openssl rand -hex 32`, "
    "from a Kubernetes Secret), or unset the key",
    "samples_token": "set a token of letters, digits and -._~+/ (e.g. `openssl rand -hex 32`, "
    "from a Kubernetes Secret), or unset the key",
    "web_config_file": "point it at a readable YAML file with tls_server_config and/or "
    "basic_auth_users (docs/deploy.md, 'TLS and basic auth'), or unset it",
    "samples_token_file": "mount the Secret holding the token at that path, or unset the key "
    "(GET /api/v1/samples is then off)",
    "ingest_token_file": "mount the Secret holding the token at that path, or unset the key "
    "(ingest then answers only when the sidecar listens on loopback)",
    "ingest_max_bytes": f"set it between {BATCH_BYTES} (the largest batch of samples "
    "`dsv4-sidecar tap` posts: below it every batch would be refused) and 1073741824, or "
    f"unset it ({TapConfig.max_sample_bytes}, the largest sample the tap captures)",
}


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


# Settings renamed, still read under their former name (key, flag and environment variable):
# former -> current. sglang_url named the server of every engine (issue 36).
RENAMED: dict[str, str] = {"sglang_url": "server_url"}


class _FormerEnvNames(PydanticBaseSettingsSource):
    """The environment variables of :data:`RENAMED` settings, under their current names and
    below the current variables (a pod spec written before a rename keeps working)."""

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # unused: __call__ reads the former names itself

    def __call__(self) -> dict[str, Any]:
        prefix = self.settings_cls.model_config.get("env_prefix", "")
        return {
            new: os.environ[prefix + old.upper()]
            for old, new in RENAMED.items()
            if prefix + old.upper() in os.environ
        }


class SidecarSettings(BaseSettings, TapKeys):
    """Everything `dsv4-sidecar serve` can be told. Field descriptions feed the docs."""

    # allow_inf_nan=False: inf passes gt=0 and becomes a sleep that never ends or an
    # OverflowError in the event loop; every number a key takes is finite.
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, extra="forbid", frozen=True, allow_inf_nan=False
    )

    # HTTP
    host: str = Field("0.0.0.0", description="Address the sidecar listens on.")
    port: int = Field(9400, ge=0, le=65535, description="Port of /metrics and the API.")
    listen_file: Path | None = Field(
        None,
        description="File serve writes the address it listens on to (JSON), for the image's "
        "HEALTHCHECK (`python -m exporter.healthcheck`); the image sets it under /tmp.",
    )
    web_config_file: Path | None = Field(
        None,
        description="Web config file (YAML, as Prometheus exporter-toolkit's "
        "--web.config.file): tls_server_config {cert_file, key_file, client_ca_file, "
        "client_auth_type, min_version} serves /metrics and the API over TLS; "
        "basic_auth_users {user: bcrypt hash} requires basic auth on every path but /healthz "
        "and /api/v1/samples (bearer tokens). Also --web.config.file. docs/deploy.md.",
    )
    log_format: Literal["text", "json"] = Field(
        "text",
        description="Log lines on stderr: text, or json (one object per line: time, level, "
        "logger, message) for log pipelines. Never a prompt, an output or a token.",
    )
    engine: str = Field(
        "auto",
        description="The serving engine at server_url: a row of the engine table (sglang, "
        "vllm), or auto (discovered: "
        "SGLang's /server_info, else vLLM's /version with vllm: families on /metrics). Under "
        "vllm the sglang_* poll settings apply to the vLLM server; dsml_dialect is vLLM's "
        "--tool-call-parser dialect (deepseek_v4: v4).",
    )
    server_url: str = Field(
        "http://127.0.0.1:30000",
        description="Base URL of the serving engine's server (SGLang's or vLLM's, whichever "
        "`engine` is). Formerly sglang_url, still accepted: key, --sglang-url, "
        "DSV4_SIDECAR_SGLANG_URL.",
    )
    # SGLang
    sglang_poll_interval: float = Field(
        5.0, gt=0, le=HOUR, description="Seconds between SGLang polls."
    )
    sglang_timeout: float = Field(
        2.0, gt=0, le=TIMEOUT_MAX, description="Timeout of one SGLang request (s)."
    )
    sglang_metrics: bool = Field(True, description="Also poll SGLang's /metrics.")
    # GPUs
    gpu_backend: str = Field(
        "nvml",
        description="nvml (built in), or the name of an installed GPU backend plugin (entry "
        f"point group {ENTRY_POINT_GROUP}); this repository's simulator installs fake, the "
        "simulated SGLang's GPUs read from server_url, configured by its own DSV4_FAKE_GPU_* "
        "variables (docs/simulator.md).",
    )
    nvml_poll_interval: float = Field(2.0, gt=0, le=HOUR, description="Seconds between NVML polls.")
    nvml_timeout: float = Field(
        1.5, gt=0, le=TIMEOUT_MAX, description="Abandon an NVML poll after this (s)."
    )
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
    dsml_dialect: Literal[
        "auto", "v3.2", "v4", "v4.1", "deepseek_v32", "deepseek_v4", "deepseek_v41"
    ] = Field(
        "auto",
        description="DSML dialect of the deployment's tool parser, or vLLM's "
        "--tool-call-parser name (vLLM serves no endpoint with it); auto: SGLang's "
        "tool_call_parser, else the model's config.json, else each block's own spelling.",
    )
    canary: bool = Field(True, description="Run the canary prober against server_url.")
    canary_interval: float = Field(30.0, gt=0, le=DAY, description="Seconds per round of canaries.")
    canary_concurrency: int = Field(2, ge=1, le=64, description="Canary requests in flight, max.")
    canary_timeout: float = Field(
        60.0, gt=0, le=TIMEOUT_MAX, description="Timeout of one canary request (s)."
    )
    canary_max_tokens: int = Field(
        1024, ge=16, le=MAX_TOKENS, description="max_tokens of canary requests."
    )
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
        600.0,
        gt=0,
        le=DAY,
        description="Seconds per round of long-generation canaries (at least).",
    )
    canary_long_tokens_per_hour: int = Field(
        50_000,
        ge=1000,
        le=10**12,  # a budget this large is "unbounded"; larger only risks float overflow
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
        description="Bearer token POST /api/v1/samples requires (not empty). Without one "
        "(here or in ingest_token_file), ingest only answers when the sidecar's host is a "
        "loopback address (docs/deploy.md). Prefer ingest_token_file: an environment "
        "variable is visible to whoever can read the pod spec or /proc/PID/environ.",
    )
    ingest_token_file: Path | None = Field(
        None,
        description="File holding the ingest bearer token (e.g. a mounted Secret); read "
        "per request, so a rotated Secret applies without a restart.",
    )
    samples_capacity: int = Field(200, ge=1, le=100_000, description="Bad samples kept.")
    sample_text_cap: int = Field(
        4096, ge=256, le=1 << 20, description="Characters kept per stored sample."
    )
    redact_patterns: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Extra regexes redacted from stored samples: one regex, several on "
        "separate lines, or a JSON list.",
    )
    ingest_max_bytes: int = Field(
        # a sample as large as the tap captures fits (its one metadata line comes on top)
        TapConfig.max_sample_bytes,
        ge=BATCH_BYTES,
        le=1 << 30,
        description="Max body of POST /api/v1/samples; at least the largest batch "
        "`dsv4-sidecar tap` posts (4 MiB). A sampled exchange larger than it is refused "
        "(the tap counts it as sidecar_refused).",
    )
    grading_queue: int = Field(
        1000, ge=1, le=1_000_000, description="Samples waiting for the grader, max."
    )
    grading_queue_bytes: int = Field(
        32 << 20,
        ge=1 << 20,
        le=BYTES_MAX,
        description="Bytes the samples waiting for the grader hold, max.",
    )
    ingest_concurrency: int = Field(
        1, ge=1, le=64, description="POST /api/v1/samples bodies read at once; more get 429."
    )
    samples_max_bytes: int = Field(
        8 << 20,
        ge=1 << 20,
        le=BYTES_MAX,
        description="Bytes the stored bad samples hold, max (oldest go).",
    )
    # Pass-through tap
    tap_port: int | None = Field(
        None, ge=0, le=65535, description="Listen port of the pass-through tap (off when unset)."
    )
    tap_host: str | None = Field(None, description="Tap listen address (default: host).")
    # Probe
    probe_dir: Path | None = Field(None, description="Directory of probe snapshot files.")
    probe_stale_after: float = Field(
        5.0, gt=0, le=DAY, description="Probe file older than this is down."
    )

    @model_validator(mode="before")
    @classmethod
    def _former_names(cls, data: Any) -> Any:
        """A renamed setting given under its former name (here only from the constructor's
        keywords: the loader renames file keys and flags) is its current one."""
        if isinstance(data, dict) and any(old in data for old in RENAMED):
            data = dict(data)
            for old, new in RENAMED.items():
                if old in data:
                    data[new] = data.pop(old)
        return data

    @property
    def sglang_url(self) -> str:
        """The former name of :attr:`server_url`."""
        return self.server_url

    @field_validator("server_url")
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
        url = info.data.get("server_url")
        if v is not None and isinstance(url, str) and url.startswith("https://"):
            raise ValueError(
                "the tap forwards plain HTTP to the engine, but server_url is https://; point "
                "server_url at the engine's http:// port (it is on localhost in the pod) or "
                "unset tap_port"
            )
        return v

    @field_validator("engine")
    @classmethod
    def _engine_known(cls, v: str) -> str:
        """``auto`` or a row of the engine table (exporter/sources/engines.py), not a fixed
        list, so a third engine is selectable as soon as its row exists."""
        from exporter.sources.engines import setting_values  # the table imports the sources

        v = v.strip()
        if v not in setting_values():
            raise ValueError(f"engine must be one of {', '.join(setting_values())}, not {v!r}")
        return v

    @field_validator("gpu_backend")
    @classmethod
    def _backend_installed(cls, v: str) -> str:
        """One of the installed backends: the entry points, not a fixed list, so a plugin is
        selectable as soon as its package is installed. (Its own settings are checked by the
        loader at start: ``config_loader.check_backend_settings``.)"""
        v = v.strip()
        if v == BUILTIN:
            return v
        if v not in installed():
            raise ValueError(
                f"GPU backend {v!r} is not installed (installed: {', '.join(installed())})"
            )
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
        for key in ("samples_token_file", "ingest_token_file"):
            path = getattr(self, key)
            problem = None if path is None else token_file_problem(path)
            if problem is not None:
                problems.append((key, problem))
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
        return token_value(self.samples_token, self.samples_token_file)

    def ingest_token_value(self) -> str | None:
        """The ingest token from the setting or its file (stripped), None when unset."""
        return token_value(self.ingest_token, self.ingest_token_file)

    def ingest_open_without_token(self) -> bool:
        """Whether ingest may answer without a token: only when the sidecar *listens* on a
        loopback address. The caller's address proves nothing: in a pod every local proxy
        (Istio's connects from 127.0.0.6, a local nginx from 127.0.0.1) forwards remote
        clients from a loopback address."""
        return listens_on_loopback(self.host)

    @field_validator("rank_map", mode="before")
    @classmethod
    def _rank_map(cls, v: Any) -> Any:
        if isinstance(v, str):
            try:
                return [int(x) for x in v.split(",") if x.strip()] if v.strip() else None
            except ValueError:
                raise ValueError(f"{v!r} is not a comma-separated list of GPU indices") from None
        return v

    @field_validator("rank_map")
    @classmethod
    def _rank_map_usable(cls, v: list[int] | None) -> list[int] | None:
        """GPU indices a node can have, each once: two ranks on one GPU, or a negative index,
        would silently attribute one GPU's memory to the wrong rank."""
        if v is None:
            return None
        if len(v) > MAX_GPUS_PER_NODE:
            raise ValueError(f"lists {len(v)} ranks; a node has at most {MAX_GPUS_PER_NODE} GPUs")
        bad = [i for i in v if not 0 <= i < MAX_GPUS_PER_NODE]
        if bad:
            raise ValueError(f"GPU indices must be in 0..{MAX_GPUS_PER_NODE - 1}, got {bad}")
        dupes = sorted({i for i in v if v.count(i) > 1})
        if dupes:
            raise ValueError(f"GPU {dupes} is given to more than one rank")
        return v

    def contradictions(self) -> list[tuple[str, str]]:
        """(key, problem) for values that are each valid but contradict another key; the
        loader refuses them at start naming the key (``load_settings``)."""
        out = []
        hosts = {self.tap_host or self.host, self.host}
        overlap = len(hosts) == 1 or bool(hosts & {"0.0.0.0", "::", ""})
        if self.tap_port and self.tap_port == self.port and overlap:
            out.append(
                (
                    "tap_port",
                    f"is the sidecar's own port ({self.port} on {self.host}): the second "
                    "listener could never bind",
                )
            )
        for key in ("samples_token", "ingest_token"):
            if getattr(self, key) is not None and getattr(self, key + "_file") is not None:
                out.append(
                    (
                        f"{key}_file",
                        f"is set as well as {key}: one token, one source (keep the file)",
                    )
                )
        if self.nnodes is not None and self.node_rank >= self.nnodes:
            out.append(
                (
                    "node_rank",
                    f"{self.node_rank} is not below nnodes {self.nnodes} (node ranks are "
                    f"0..{self.nnodes - 1})",
                )
            )
        return out

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
        return (init_settings, env_settings, _FormerEnvNames(settings_cls))


def _read_token_file(path: Path) -> str:
    """The token file's text, bounded (a path at ``/dev/zero`` or a FIFO is read on every
    request otherwise); :class:`~exporter.sources.bounded.InputRejected` is a ValueError."""
    from exporter.sources.bounded import LOCAL_READ_SECONDS, TOKEN_FILE_MAX_BYTES, read_local

    return read_local(path, TOKEN_FILE_MAX_BYTES, LOCAL_READ_SECONDS).decode("utf-8")


def token_file_problem(path: Path) -> str | None:
    """Why the token file at ``path`` cannot be used, None when it can (checked at start)."""
    try:
        _bearer_token(_read_token_file(path))
    except ValueError as exc:  # UnicodeDecodeError is one too
        return f"the token in {str(path)!r} {exc}"
    except OSError as exc:
        why = getattr(exc, "strerror", None) or type(exc).__name__
        return f"cannot read {str(path)!r}: {why}"
    return None


def token_value(value: SecretStr | None, path: Path | None) -> str | None:
    """A token from its setting, else its file (stripped); None when unset or unreadable (an
    unreadable file at start is a configuration error: :meth:`SidecarSettings.file_problems`)."""
    if value is not None:
        return value.get_secret_value() or None
    if path is not None:
        try:
            return _read_token_file(path).strip() or None
        except (OSError, ValueError):
            return None
    return None


def listens_on_loopback(host: str) -> bool:
    """Whether a listen address only accepts connections from this host (127.0.0.0/8, ::1,
    ``localhost``). A wildcard (0.0.0.0, ::, empty) or any other name is not."""
    name = host.strip().strip("[]").rstrip(".").lower()
    if name == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(name)
    except ValueError:
        return False
    mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
    return (mapped or ip).is_loopback


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
