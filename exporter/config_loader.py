"""Loading settings: file < environment < flags, and errors a person can act on.

Every key of a settings schema (:class:`~exporter.config.SidecarSettings`, the simulator's
``SimSettings``, the ``fake`` GPU backend's own) can be set in a YAML config file
(``--config``), as an environment variable (``<PREFIX><KEY>``), or as a command-line flag
(``--key-with-dashes``); flags win over the environment, which wins over the file. A bad value
is reported naming the key, where it came from, and how to fix it (:class:`ConfigError`; the
CLI exits 2 with it): malformed values, out-of-range or contradicting ones, files named by a
key that cannot be read (canary prompts, the samples token), empty tokens, unknown presets.
Unknown prefixed variables (a typo would otherwise be ignored) are warned about with the
closest known name.
"""

from __future__ import annotations

import argparse
import difflib
import logging
import os
import re
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args, get_origin, overload

import yaml
from pydantic import ValidationError
from pydantic_settings import BaseSettings, SettingsError

from exporter.config import ENV_PREFIX, FIXES, NOT_SETTINGS, RENAMED, SidecarSettings
from exporter.sources.bounded import (
    CONFIG_FILE_MAX_BYTES,
    LOCAL_READ_SECONDS,
    InputRejected,
    read_local,
)

log = logging.getLogger(__name__)


class ConfigError(ValueError):
    """A configuration problem, phrased for the person who has to fix it."""


def fix_for(cls: type[BaseSettings], key: str) -> str | None:
    """How to fix ``key``: the field's own ``fix`` (``json_schema_extra``), else :data:`FIXES`."""
    field = cls.model_fields.get(key)
    extra = field.json_schema_extra if field is not None else None
    if isinstance(extra, dict) and isinstance(extra.get("fix"), str):
        return str(extra["fix"])
    return FIXES.get(key)


def unknown_env(cls: type[BaseSettings], environ: Any = None) -> list[str]:
    """``DSV4_SIDECAR_*`` variables that name no setting, each with the closest known name."""
    prefix = cls.model_config.get("env_prefix", ENV_PREFIX)
    known = {env_name(k, cls) for k in (*cls.model_fields, *_renamed(cls))}
    out = []
    for name in sorted(os.environ if environ is None else environ):
        if name.startswith(prefix) and name not in known and name not in NOT_SETTINGS:
            close = difflib.get_close_matches(name, sorted(known), n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            out.append(f"unknown environment variable {name} ignored{hint}")
    return out


def _renamed(cls: type[BaseSettings]) -> dict[str, str]:
    """``cls``'s renamed settings, former name -> current (exporter.config.RENAMED)."""
    return RENAMED if issubclass(cls, SidecarSettings) else {}


def _current(cls: type[BaseSettings], values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with former names of renamed settings replaced by the current ones."""
    renamed = _renamed(cls)
    return {renamed.get(k, k): v for k, v in values.items()}


def env_name(key: str, cls: type[BaseSettings] | None = None) -> str:
    prefix = (cls or SidecarSettings).model_config.get("env_prefix", ENV_PREFIX)
    return prefix + key.upper()


def flag_name(key: str) -> str:
    return "--" + key.replace("_", "-")


def _read_file(path: Path) -> dict[str, Any]:
    try:
        text = read_local(path, CONFIG_FILE_MAX_BYTES, LOCAL_READ_SECONDS).decode("utf-8")
        data = yaml.safe_load(text)
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from exc
    except InputRejected as exc:
        raise ConfigError(f"config file {path} {exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"config file {path} is not UTF-8 text") from None
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
    refuse keys that contradict each other (``contradictions``) and a selected GPU backend
    plugin's bad settings; with ``check_files``, also require the files keys name to be usable
    (``file_problems``).
    ``cls`` defaults to :class:`SidecarSettings` (the simulator passes its own)."""
    cls = cls or SidecarSettings
    file_values = _current(cls, _read_file(config_file)) if config_file else {}
    flags = _current(cls, {k: v for k, v in (flags or {}).items() if v is not None})
    env_keys = {k for k in cls.model_fields if env_name(k, cls) in os.environ}
    env_keys |= {new for old, new in _renamed(cls).items() if env_name(old, cls) in os.environ}
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
            f"{env_name(key, cls)}); fix: {fix_for(cls, key) or 'set a valid value'}"
        ) from None
    problems = list(settings.contradictions()) if hasattr(settings, "contradictions") else []
    if check_files and hasattr(settings, "file_problems"):
        problems += settings.file_problems()
    if isinstance(settings, SidecarSettings):
        check_backend_settings(settings.gpu_backend)
    if problems:
        lines = [
            f"{key}: {msg} (from {_origin(cls, key, flags, env_keys, config_file)}); "
            f"fix: {fix_for(cls, key) or 'set a valid value'}"
            for key, msg in problems
        ]
        raise ConfigError("config error: " + "; ".join(lines))
    return settings


def check_backend_settings(name: str) -> None:
    """A GPU backend plugin's own settings (its optional ``check_settings()``; the fake
    backend's DSV4_FAKE_GPU_*), checked when the sidecar's settings load, so a bad one stops
    the start naming its variable rather than failing the first NVML poll."""
    from exporter.sources import gpu_backends

    if name == gpu_backends.BUILTIN:
        return
    try:
        backend = gpu_backends.load(name)
    except gpu_backends.GpuBackendError as exc:  # installed, but its package does not import
        raise ConfigError(f"config error: gpu_backend {name!r}: {exc}") from None
    check = getattr(backend, "check_settings", None)
    if not callable(check):
        return
    try:
        check()
    except ConfigError:
        raise
    except ValueError as exc:  # a plugin that raises its own errors
        raise ConfigError(
            f"config error: gpu_backend {name!r}: its settings are invalid: {exc}; fix: see "
            "the backend's documentation"
        ) from None


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
        former = [flag_name(old) for old, new in _renamed(cls).items() if new == key]
        parser.add_argument(
            flag_name(key),
            *former,
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
        fix = fix_for(cls, key)
        if fix is None:
            hint = f" ({field.description})" if field and field.description else ""
            fix = f"set a valid value{hint}"
        msg = str(err["msg"]).removeprefix("Value error, ")
        lines.append(f"{key}: {msg} (from {origin}); fix: {fix}")
    return "config error: " + "; ".join(lines)
