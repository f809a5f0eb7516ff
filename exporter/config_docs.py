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
from exporter.tap_settings import TapSettings


def _default(info) -> str:
    if info.default_factory is not None:
        return f"`{info.default_factory()!r}`"
    if info.default is None:
        return "unset"
    return f"`{info.default}`"


def _range(info) -> str:
    """The bounds the schema enforces (``ge``/``gt``/``le``/``lt``), as the docs show them:
    the same numbers the loader refuses a value outside of, never restated by hand."""
    lo = hi = ""
    for m in info.metadata:
        for attr, side, sign in (("ge", "lo", "["), ("gt", "lo", "("), ("le", "hi", "]")):
            value = getattr(m, attr, None)
            if value is not None:
                if side == "lo":
                    lo = f"{sign}{_num(value)}"
                else:
                    hi = f"{_num(value)}{sign}"
        value = getattr(m, "lt", None)
        if value is not None:
            hi = f"{_num(value)})"
    if not (lo or hi):
        return ""
    return f"{lo or '(-inf'}, {hi or 'inf)'}"


def _num(x: float) -> str:
    """A bound readably: 2^k for large powers of two (1 << 30 as 2^30), else the number."""
    if isinstance(x, int) and x >= 1 << 16 and x & (x - 1) == 0:
        return f"2^{x.bit_length() - 1}"
    if isinstance(x, int) and x >= 1 << 16 and (x + 1) & x == 0:
        return f"2^{x.bit_length()}-1"
    return f"{x:g}" if isinstance(x, float) else str(x)


def settings_table(cls: type[BaseSettings]) -> list[str]:
    """A markdown table of every key of ``cls``: file key, flag, environment, default, the
    range the schema accepts."""
    rows = [
        "| key (config file) | flag | environment | default | range | description |",
        "|---|---|---|---|---|---|",
    ]
    for key, info in cls.model_fields.items():
        desc = (info.description or "").replace("|", "\\|")
        rows.append(
            f"| `{key}` | `{flag_name(key)}` | `{env_name(key, cls)}` | {_default(info)} "
            f"| {_range(info)} | {desc} |"
        )
    return rows


def render() -> str:
    lines = [
        "# Configuration reference",
        "",
        "Generated from `exporter/config.py` and `exporter/tap_settings.py` by `make docs`.",
        "Every key can be given in a YAML file (`--config FILE`), as an environment variable, or",
        "as a flag; flags win over the environment, which wins over the file. A bad value is",
        "reported naming the key, where it came from, and the fix (exit status 2); numbers",
        "are finite and within the range shown, and keys that contradict each other (the tap",
        "on the sidecar's own port, node_rank not below nnodes, a GPU given to two ranks) are",
        "refused too.",
        "",
        "## `dsv4-sidecar serve`",
        "",
        *settings_table(SidecarSettings),
        "",
        "## `dsv4-sidecar tap`",
        "",
        'The tap in its own process (docs/tap.md, "Its own process"): only the tap\'s keys',
        "(the `tap_*` ones are the same keys as `serve`'s) and where its samples go.",
        "",
        *settings_table(TapSettings),
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
