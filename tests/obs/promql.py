"""Small PromQL helpers for the static checks: parse with the real parser (promtool), and pull
metric selectors, matchers and grouping labels out of an expression.

Parsing: promtool has no "parse this expression" command, but `promtool check rules` parses
every rule's expr with Prometheus' own parser, so each expression becomes a recording rule in a
throw-away rule file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.obs.conftest import run_promtool

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"' + r"|'(?:[^'\\]|\\.)*'")
_RECORDING = re.compile(r"\b[a-zA-Z_][a-zA-Z0-9_]*:[a-zA-Z0-9_:]+\b")
# Names may hold colons (recording rules): `deployment:x:count{...}` is one selector.
_SELECTOR = re.compile(r"(?<![a-zA-Z0-9_:])([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}")
_NAMELESS = re.compile(r"\{([^}]*__name__[^}]*)\}")
_MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*\"((?:[^\"\\]|\\.)*)\"")
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_DSV4_TOKEN = re.compile(r"\bdsv4_[a-z0-9_]+\b")


@dataclass(frozen=True)
class Selector:
    """One ``name{matchers}`` vector selector."""

    metric: str
    matchers: tuple[tuple[str, str, str], ...]  # (label, op, value)

    def labels(self) -> set[str]:
        return {label for label, _, _ in self.matchers}


def recording_names(expr: str) -> set[str]:
    """Names with colons (recording rules) an expression refers to."""
    return set(_RECORDING.findall(_STRING.sub('""', expr)))


def selectors(expr: str) -> list[Selector]:
    """Every ``name{...}`` selector (metric names in this repo always carry matchers), and every
    ``{__name__=~"...", ...}`` one (SGLang's series under either prefix), named by that regex."""
    out = []
    for name, body in _SELECTOR.findall(expr):
        out.append(Selector(name, tuple(_MATCHER.findall(body))))
    for body in _NAMELESS.findall(_SELECTOR.sub(" ", expr)):
        matchers = _MATCHER.findall(body)
        (name,) = [v for label, _op, v in matchers if label == "__name__"]
        out.append(Selector(name, tuple(m for m in matchers if m[0] != "__name__")))
    return out


def bare_metric_tokens(expr: str) -> set[str]:
    """``dsv4_*`` names used without a ``{...}`` matcher block (outside strings and recording
    names): a style violation here, and a way for a typo to hide from the selector checks."""
    stripped = _RECORDING.sub(" ", _STRING.sub('""', expr))
    return set(_DSV4_TOKEN.findall(_SELECTOR.sub(" ", stripped)))


def grouping_labels(expr: str) -> set[str]:
    """Label names in by/without/on/ignoring/group_left/group_right clauses."""
    out: set[str] = set()
    for _, body in _GROUPING.findall(_STRING.sub('""', expr)):
        out |= {x.strip() for x in body.split(",") if x.strip()}
    return out


def check_parse(promtool: str, exprs: dict[str, str], workdir: Path) -> tuple[bool, str]:
    """Parse every expression with Prometheus' parser; returns (ok, promtool output).

    The keys name the expressions: rule ``parse_check_<n>`` is the n-th key, and the returned
    output ends with that legend so a failure points at its panel or runbook.
    """
    names = list(exprs)
    rules = [{"record": f"parse_check_{i}", "expr": exprs[k]} for i, k in enumerate(names)]
    path = workdir / "parse-check.rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "parse-check", "rules": rules}]}))
    res = run_promtool(promtool, "check", "rules", path)
    out = res.stdout + res.stderr
    legend = "\n".join(f"parse_check_{i}: {k}" for i, k in enumerate(names))
    return res.returncode == 0, out + "\n" + legend
