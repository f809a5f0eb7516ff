"""The request's tools, and a small JSON-Schema check of call arguments against them.

Only the keywords that tool schemas use in practice are checked (type, properties, required,
additionalProperties, items, enum, const, anyOf/oneOf/allOf, nullable); anything else is
accepted, so an exotic schema can cause a missed mismatch but never a false one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

MAX_DEPTH = 32  # deeper values are not checked (and cannot make validation recurse forever)
MAX_ERRORS = 3


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool of the request: its name and, when given, its parameters schema."""

    name: str
    schema: Mapping[str, Any] | None = None

    @property
    def required(self) -> tuple[str, ...]:
        req = self.schema.get("required") if isinstance(self.schema, Mapping) else None
        if isinstance(req, list | tuple):
            return tuple(r for r in req if isinstance(r, str))
        return ()


class ToolSet:
    """The tools a request offered, by name. Build once per request and reuse."""

    def __init__(self, specs: Iterable[ToolSpec] = ()) -> None:
        self._specs = {s.name: s for s in specs}

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def __len__(self) -> int:
        return len(self._specs)

    def get(self, name: str) -> ToolSpec | None:
        return self._specs.get(name)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._specs)

    @classmethod
    def from_any(cls, tools: object) -> ToolSet | None:
        """Normalise names, OpenAI tool objects, function objects or ``{name: schema}``.

        None means "not known" (no tool_unknown checks); entries that cannot be read are
        skipped rather than raised on, since this runs on sampled production traffic.
        """
        if tools is None:
            return None
        if isinstance(tools, ToolSet):
            return tools
        specs: list[ToolSpec] = []
        if isinstance(tools, Mapping):
            for name, schema in tools.items():
                if isinstance(name, str):
                    specs.append(ToolSpec(name, schema if isinstance(schema, Mapping) else None))
            return cls(specs)
        if isinstance(tools, str):
            return cls([ToolSpec(tools)])  # one tool name
        if isinstance(tools, bytes) or not isinstance(tools, Iterable):
            return cls()
        for item in tools:
            spec = _spec_of(item)
            if spec is not None:
                specs.append(spec)
        return cls(specs)


def _spec_of(item: object) -> ToolSpec | None:
    if isinstance(item, str):
        return ToolSpec(item)
    if not isinstance(item, Mapping):
        return None
    fn = item.get("function") if isinstance(item.get("function"), Mapping) else item
    name = fn.get("name")
    if not isinstance(name, str):
        return None
    schema = fn.get("parameters", fn.get("input_schema"))
    return ToolSpec(name, schema if isinstance(schema, Mapping) else None)


def schema_errors(value: Any, schema: Mapping[str, Any] | None) -> list[str]:
    """Up to ``MAX_ERRORS`` human-readable mismatches of ``value`` against ``schema``."""
    errors: list[str] = []
    if isinstance(schema, Mapping):
        _check(value, schema, "$", 0, errors)
    return errors[:MAX_ERRORS]


def _type_ok(value: Any, typ: str) -> bool:
    if typ == "string":
        return isinstance(value, str)
    if typ == "integer":
        if isinstance(value, bool):
            return False
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if typ == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if typ == "boolean":
        return isinstance(value, bool)
    if typ == "null":
        return value is None
    if typ == "array":
        return isinstance(value, list)
    if typ == "object":
        return isinstance(value, dict)
    return True  # unknown type keyword: accept


def _check(value: Any, schema: Mapping[str, Any], path: str, depth: int, errors: list[str]) -> None:
    if depth > MAX_DEPTH or len(errors) >= MAX_ERRORS:
        return
    if value is None and schema.get("nullable") is True:
        return
    typ = schema.get("type")
    types = (
        [typ]
        if isinstance(typ, str)
        else [x for x in typ if isinstance(x, str)]
        if isinstance(typ, list)
        else []
    )
    if types and not any(_type_ok(value, x) for x in types):
        errors.append(f"{path}: expected {'|'.join(types)}, got {_json_type(value)}")
        return
    enum = schema.get("enum")
    if isinstance(enum, list) and enum and not any(_same(value, e) for e in enum):
        errors.append(f"{path}: not one of the enum values")
    if "const" in schema and not _same(value, schema["const"]):
        errors.append(f"{path}: not the const value")
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            subs = [o for o in options if isinstance(o, Mapping)]
            if subs and not any(not schema_errors_at(value, o, path, depth) for o in subs):
                errors.append(f"{path}: matches none of {key}")
    all_of = schema.get("allOf")
    if isinstance(all_of, list):
        for sub in all_of:
            if isinstance(sub, Mapping):
                _check(value, sub, path, depth + 1, errors)
    if isinstance(value, dict):
        _check_object(value, schema, path, depth, errors)
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, Mapping):
            for i, item in enumerate(value):
                _check(item, items, f"{path}[{i}]", depth + 1, errors)
                if len(errors) >= MAX_ERRORS:
                    return


def _check_object(
    value: dict[str, Any], schema: Mapping[str, Any], path: str, depth: int, errors: list[str]
) -> None:
    props = schema.get("properties")
    props = props if isinstance(props, Mapping) else {}
    required = schema.get("required")
    if isinstance(required, list):
        for key in required:
            if isinstance(key, str) and key not in value:
                errors.append(f"{path}: missing required {key!r}")
    extra = schema.get("additionalProperties", True)
    for key, item in value.items():
        sub = props.get(key)
        if isinstance(sub, Mapping):
            _check(item, sub, f"{path}.{key}", depth + 1, errors)
        elif extra is False and props:
            errors.append(f"{path}: unexpected property {key!r}")
        elif isinstance(extra, Mapping):
            _check(item, extra, f"{path}.{key}", depth + 1, errors)
        if len(errors) >= MAX_ERRORS:
            return


def schema_errors_at(value: Any, schema: Mapping[str, Any], path: str, depth: int) -> list[str]:
    errors: list[str] = []
    _check(value, schema, path, depth + 1, errors)
    return errors


def _same(a: Any, b: Any) -> bool:
    """JSON equality: 1 == 1.0, but True is not 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return bool(a == b)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__
