"""Generate the monitoring mixin (docker/mixin/mixin.libsonnet) from the same sources as the
rule file and the dashboards: alerts/rules.py with alerts/config.py, and dashboards/*.json.

    python docker/mixin/generate.py            # rewrite docker/mixin/mixin.libsonnet (`make mixin`)
    python docker/mixin/generate.py --check    # exit 1 when the committed file is stale

The mixin follows the monitoring-mixins convention: ``_config`` (the selector and every
threshold, window and ``for:`` of alerts/config.py that the rules use verbatim),
``prometheusAlerts`` (the alert groups), ``prometheusRules`` (the recording groups) and
``grafanaDashboards`` (the committed dashboards, imported). A jsonnet user overrides
``_config+::`` and gets the rules ``python -m alerts.generate --config`` renders for the same
knobs; tests/deploy/test_mixin.py evaluates it with a real jsonnet and compares both ways.

How the rules become functions of ``_config``: the rules are rendered once with a sentinel in
place of each knob, and every sentinel in the output becomes a reference to that knob. A knob
whose value reaches the output only transformed (a ratio printed as a percentage, a byte count
as GiB) has no verbatim sentinel there; it stays at its default in the mixin and is listed in
the header, so an override never silently half-applies.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
import textwrap
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # a script: make the repository's packages importable
    sys.path.insert(0, str(ROOT))

from alerts import config as alert_config  # noqa: E402
from alerts.rules import build  # noqa: E402
from alerts.text import num  # noqa: E402
from exporter import generated  # noqa: E402

OUT = Path(__file__).resolve().parent / "mixin.libsonnet"
DASHBOARDS = ROOT / "dashboards"
# Sentinels: numbers 9NNN7531, durations 8NNN7531s, strings zqNNNzq (NNN: the knob's index).
SENTINEL = re.compile(r"zq\d{3}zq|8\d{3}7531s|9\d{3}7531")
# Numbers as alerts.text.num writes them (Python's repr, no ".0"): integers exactly, others
# with 15 significant digits (jsonnet's own std.toString prints 0.05 as 0.050000000000000003).
NUM_HELPER = (
    "local num(x) =\n"
    "  if !std.isNumber(x) then x\n"
    "  else if x == std.floor(x) && std.abs(x) < 1e15 then std.toString(x)\n"
    "  else std.format('%.15g', x);\n"
)


def _sentinel(i: int, value: Any, name: str) -> Any:
    """A value for knob ``i`` that its validation accepts and that no rule text contains."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return int(f"9{i:03d}7531")
    if isinstance(value, float):
        return float(f"9{i:03d}7531")
    if name.endswith(("_for", "_window", "_lookback")):
        return f"8{i:03d}7531s"
    return f"zq{i:03d}zq"


def _rendered(value: Any) -> str:
    """How a knob's value is written into the rules (numbers through alerts.text.num)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return num(value)
    return str(value)


def verbatim_knobs() -> dict[str, tuple[str, Any]]:
    """Knob name -> (sentinel text, default) for each knob that reaches the rules only verbatim:
    rendered with its sentinel, and the sentinel put back to the default, the rules are the
    default rules exactly."""
    defaults = alert_config.AlertConfig()
    expected = json.dumps(build(defaults), sort_keys=True)
    out: dict[str, tuple[str, Any]] = {}
    for i, f in enumerate(dataclasses.fields(alert_config.AlertConfig)):
        default = getattr(defaults, f.name)
        sentinel = _sentinel(i, default, f.name)
        if sentinel is None:
            continue
        try:
            cfg = dataclasses.replace(defaults, **{f.name: sentinel})
        except ValueError:
            continue  # bounded by another knob: stays at its default
        text = json.dumps(build(cfg), sort_keys=True)
        token = str(_rendered(sentinel))
        if token not in text:
            continue  # not used by any rule
        if text.replace(token, _rendered(default).replace('"', '\\"')) == expected:
            out[f.name] = (token, default)
    return out


def _jsonnet_string(text: str, knobs: dict[str, str]) -> str:
    """A jsonnet expression for ``text``: literal pieces and ``$._config`` references."""
    parts: list[str] = []
    pos = 0
    for m in SENTINEL.finditer(text):
        if m.group(0) not in knobs:
            continue
        if m.start() > pos:
            parts.append(json.dumps(text[pos : m.start()], ensure_ascii=False))
        parts.append(f"num($._config.{knobs[m.group(0)]})")
        pos = m.end()
    if pos < len(text) or not parts:
        parts.append(json.dumps(text[pos:], ensure_ascii=False))
    return " + ".join(parts)


def _jsonnet(obj: Any, knobs: dict[str, str], indent: int) -> str:
    pad, inner = "  " * indent, "  " * (indent + 1)
    if isinstance(obj, str):
        return _jsonnet_string(obj, knobs)
    if isinstance(obj, dict):
        if not obj:
            return "{}"
        items = [
            f"{inner}{json.dumps(k)}: {_jsonnet(v, knobs, indent + 1)}," for k, v in obj.items()
        ]
        return "{\n" + "\n".join(items) + f"\n{pad}}}"
    if isinstance(obj, list):
        if not obj:
            return "[]"
        items = [f"{inner}{_jsonnet(v, knobs, indent + 1)}," for v in obj]
        return "[\n" + "\n".join(items) + f"\n{pad}]"
    return json.dumps(obj)


def render() -> str:
    verbatim = verbatim_knobs()
    defaults = alert_config.AlertConfig()
    fields = dataclasses.fields(alert_config.AlertConfig)
    index = {f.name: i for i, f in enumerate(fields)}
    sentinels = {
        name: _sentinel(index[name], default, name) for name, (_tok, default) in verbatim.items()
    }
    rules = build(dataclasses.replace(defaults, **sentinels))
    knobs = {token: name for name, (token, _default) in verbatim.items()}
    alerts = [g for g in rules["groups"] if all("alert" in r for r in g["rules"])]
    records = [g for g in rules["groups"] if all("record" in r for r in g["rules"])]
    mixed = [g["name"] for g in rules["groups"] if g not in alerts and g not in records]
    if mixed:
        raise SystemExit(f"rule groups mixing alerts and recording rules: {', '.join(mixed)}")
    baked = [f.name for f in fields if f.name not in verbatim]
    config = "\n".join(
        f"    {name}: {json.dumps(default)}," for name, (_tok, default) in verbatim.items()
    )
    dashboards = "\n".join(
        f"    {json.dumps(p.name)}: import {json.dumps('../../dashboards/' + p.name)},"
        for p in sorted(DASHBOARDS.glob("*.json"))
    )
    return (
        "// Generated by docker/mixin/generate.py (`make mixin`) from alerts/rules.py,\n"
        "// alerts/config.py and dashboards/*.json; do not edit by hand.\n"
        "// Knobs fixed at their defaults here (they reach the rules transformed, e.g. as a\n"
        "// percentage, or not at all; set them with `python -m alerts.generate --config`):\n"
        + "".join(f"//   {line}\n" for line in textwrap.wrap(", ".join(baked) or "none", 90))
        + NUM_HELPER
        + "{\n"
        "  _config+:: {\n" + config + "\n  },\n\n"
        "  prometheusRules+:: {\n    groups+: " + _jsonnet(records, knobs, 2) + ",\n  },\n\n"
        "  prometheusAlerts+:: {\n    groups+: " + _jsonnet(alerts, knobs, 2) + ",\n  },\n\n"
        "  grafanaDashboards+:: {\n" + dashboards + "\n  },\n"
        "}\n"
    )


def main(argv: list[str] | None = None) -> int:
    args = generated.parser(__doc__).parse_args(argv)
    return generated.main(
        lambda: {OUT: render()}, "mixin", check=args.check, name="docker/mixin/generate.py"
    )


if __name__ == "__main__":
    raise SystemExit(main())
