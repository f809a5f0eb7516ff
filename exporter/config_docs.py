"""Generate docs/configuration.md from the sidecar's settings model (``make docs``);
``--check`` fails when it is stale. The simulator documents its own settings the same way
(``exporter.sim.config_docs``, docs/simulator.md) with :func:`settings_table`.

    python -m exporter.config_docs [--check] [--out docs/configuration.md]
"""

from __future__ import annotations

from pydantic_settings import BaseSettings

from exporter import generated
from exporter.config import SidecarSettings
from exporter.config_loader import env_name, flag_name


def _default(info) -> str:
    if info.default_factory is not None:
        return f"`{info.default_factory()!r}`"
    if info.default is None:
        return "unset"
    return f"`{info.default}`"


def settings_table(cls: type[BaseSettings]) -> list[str]:
    """A markdown table of every key of ``cls``: file key, flag, environment, default."""
    rows = [
        "| key (config file) | flag | environment | default | description |",
        "|---|---|---|---|---|",
    ]
    for key, info in cls.model_fields.items():
        desc = (info.description or "").replace("|", "\\|")
        rows.append(
            f"| `{key}` | `{flag_name(key)}` | `{env_name(key, cls)}` | {_default(info)} | {desc} |"
        )
    return rows


def render() -> str:
    lines = [
        "# Configuration reference",
        "",
        "Generated from `exporter/config.py` by `make docs`.",
        "Every key can be given in a YAML file (`--config FILE`), as an environment variable, or",
        "as a flag; flags win over the environment, which wins over the file. A bad value is",
        "reported naming the key, where it came from, and the fix (exit status 2).",
        "",
        "## `dsv4-sidecar serve`",
        "",
        *settings_table(SidecarSettings),
        "",
        "The simulated SGLang's settings (`dsv4-sidecar simulate`, `gpu_backend: fake`) are in",
        "[simulator.md](simulator.md).",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    return generated.doc_main(
        argv, __doc__, "docs/configuration.md", "exporter.config_docs", render
    )


if __name__ == "__main__":
    raise SystemExit(main())
