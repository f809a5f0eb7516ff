"""The request's tools, and a small JSON-Schema check of call arguments against them.

Only the keywords that tool schemas use in practice are checked (type, properties, required,
additionalProperties, items, enum, const, anyOf/oneOf/allOf, nullable); anything else is
accepted, so an exotic schema can cause a missed mismatch but never a false one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

MAX_DEPTH = 32  # deeper values are not checked (and cannot make validation recurse forever)
MAX_ERRORS = 3


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool of the request: its name and, when given, its parameters schema."""

    name: str
    schema: Mapping[str, Any] | None = None
    validate: Callable[[Any], list[str]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "validate", compile_schema(self.schema))

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


def call_problems(
    tools: ToolSet, name: str, args: Mapping[str, Any] | None
) -> tuple[list[tuple[str, str]], bool]:
    """The tool-schema check of one call, the same for every path that finds calls (the state
    machine, the canonical fast path, server-parsed calls): (reason code, detail) pairs, and
    whether the call stays usable. ``args`` None: the arguments could not be read, so only the
    name is checked.

    An unknown tool, or ``{}`` for a tool with required parameters, makes the call unusable; a
    schema mismatch is reported on a call the client still gets."""
    spec = tools.get(name)
    if spec is None:
        return [("tool_unknown", name)], False
    if args is None:
        return [], False
    if not args and spec.required:
        return [("args_empty_required", ", ".join(spec.required[:5]))], False
    errors = spec.validate(args)  # most calls: none, and no list built from them
    return ([("schema_mismatch", err) for err in errors] if errors else []), True


def _spec_of(item: object) -> ToolSpec | None:
    if isinstance(item, str):
        return ToolSpec(item)
    if not isinstance(item, Mapping):
        return None
    raw = item.get("function")
    fn: Mapping[str, Any] = raw if isinstance(raw, Mapping) else item
    name = fn.get("name")
    if not isinstance(name, str):
        return None
    schema = fn.get("parameters", fn.get("input_schema"))
    return ToolSpec(name, schema if isinstance(schema, Mapping) else None)


def schema_errors(value: Any, schema: Mapping[str, Any] | None) -> list[str]:
    """Up to ``MAX_ERRORS`` human-readable mismatches of ``value`` against ``schema``."""
    return compile_schema(schema)(value)


Path = str | tuple[Any, str | int]
"""Where a value sits: ``"$"`` or (parent path, key or index), rendered only for an error
message (most values pass, and formatting every path would cost more than the checks)."""
Check = Callable[[Any, Path, list[str]], None]


def render_path(path: Path) -> str:
    """``$.a.b[2]`` for ``((("$", "a"), "b"), 2)``."""
    parts: list[str] = []
    while isinstance(path, tuple):
        path, key = path
        parts.append(f"[{key}]" if isinstance(key, int) else f".{key}")
    return path + "".join(reversed(parts))


def compile_schema(schema: object) -> Callable[[Any], list[str]]:
    """A validator for ``schema``, built once: the schema's keywords are read here, not for every
    value checked (a :class:`ToolSpec` compiles its schema when created)."""
    check = _compile(schema, 0)

    def validate(value: Any) -> list[str]:
        errors: list[str] = []
        check(value, "$", errors)
        return errors if len(errors) <= MAX_ERRORS else errors[:MAX_ERRORS]

    return validate


def _accept(value: Any, path: Path, errors: list[str]) -> None:
    return None


def _types(schema: Mapping[str, Any]) -> list[str]:
    typ = schema.get("type")
    if isinstance(typ, str):
        return [typ]
    return [x for x in typ if isinstance(x, str)] if isinstance(typ, list) else []


def _subs(schema: Mapping[str, Any], key: str, depth: int) -> list[Check]:
    options = schema.get(key)
    if not isinstance(options, list):
        return []
    return [_compile(o, depth + 1) for o in options if isinstance(o, Mapping)]


def _compile(schema: object, depth: int) -> Check:
    if not isinstance(schema, Mapping) or depth > MAX_DEPTH:
        return _accept
    nullable = schema.get("nullable") is True
    types = _types(schema)
    enum = schema.get("enum") if isinstance(schema.get("enum"), list) else None
    has_const, const = "const" in schema, schema.get("const")
    alternatives = [(k, subs) for k in ("anyOf", "oneOf") if (subs := _subs(schema, k, depth))]
    all_of = _subs(schema, "allOf", depth)
    raw_props = schema.get("properties")
    raw_props = raw_props if isinstance(raw_props, Mapping) else {}
    props = {k: _compile(v, depth + 1) for k, v in raw_props.items() if isinstance(v, Mapping)}
    known = set(raw_props)
    raw_required = schema.get("required")
    required = (
        [k for k in raw_required if isinstance(k, str)] if isinstance(raw_required, list) else []
    )
    raw_extra = schema.get("additionalProperties", True)
    closed = raw_extra is False
    extra = _compile(raw_extra, depth + 1) if isinstance(raw_extra, Mapping) else None
    items = (
        _compile(schema["items"], depth + 1) if isinstance(schema.get("items"), Mapping) else None
    )
    useful = types or enum or has_const or alternatives or all_of or props or required
    if not (useful or closed or extra or items):
        return _accept
    simple = not (enum or has_const or alternatives or all_of or props or required or closed)
    if len(types) == 1 and simple and extra is None and items is None:
        return _type_only(types[0], nullable)

    is_object = types == ["object"]  # a tool's parameters: tested without a generator
    # properties whose schema says only "type": "string": a str there has nothing to report,
    # so the loop below passes it without calling the property's check (most arguments)
    strings = frozenset(k for k, c in props.items() if isinstance(c, _StringCheck))

    def check(value: Any, path: Path, errors: list[str]) -> None:
        if len(errors) >= MAX_ERRORS or (value is None and nullable):
            return
        if types and not (
            isinstance(value, dict) if is_object else any(_type_ok(value, x) for x in types)
        ):
            errors.append(
                f"{render_path(path)}: expected {'|'.join(types)}, got {_json_type(value)}"
            )
            return
        if enum and not any(_same(value, e) for e in enum):
            errors.append(f"{render_path(path)}: not one of the enum values")
        if has_const and not _same(value, const):
            errors.append(f"{render_path(path)}: not the const value")
        for key, subs in alternatives:
            if subs and not any(_passes(sub, value, path) for sub in subs):
                errors.append(f"{render_path(path)}: matches none of {key}")
        for sub in all_of:
            sub(value, path, errors)
        if isinstance(value, dict):
            for key in required:
                if key not in value:
                    errors.append(f"{render_path(path)}: missing required {key!r}")
            for key, item in value.items():
                if key in strings and isinstance(item, str):
                    continue
                prop = props.get(key)
                if prop is not None:
                    prop(item, (path, key), errors)
                elif closed and key not in known:
                    errors.append(f"{render_path(path)}: unexpected property {key!r}")
                elif extra is not None and key not in known:
                    extra(item, (path, key), errors)
                if len(errors) >= MAX_ERRORS:
                    return
        elif isinstance(value, list) and items is not None:
            for i, item in enumerate(value):
                items(item, (path, i), errors)
                if len(errors) >= MAX_ERRORS:
                    return

    return check


def _type_only(typ: str, nullable: bool) -> Check:
    """The check of a schema that says only ``type`` (most tool parameters): the same test and
    message as the general check, without its per-keyword branches."""

    def check(value: Any, path: Path, errors: list[str]) -> None:
        if len(errors) >= MAX_ERRORS or (value is None and nullable):
            return
        if not _type_ok(value, typ):
            errors.append(f"{render_path(path)}: expected {typ}, got {_json_type(value)}")

    return _StringCheck(nullable) if typ == "string" else check


class _StringCheck:
    """The type-only check of ``"type": "string"``, as an object the object check can tell
    apart (its ``strings``: a str value passes without the call)."""

    __slots__ = ("nullable",)

    def __init__(self, nullable: bool) -> None:
        self.nullable = nullable

    def __call__(self, value: Any, path: Path, errors: list[str]) -> None:
        if isinstance(value, str) or len(errors) >= MAX_ERRORS or (value is None and self.nullable):
            return
        errors.append(f"{render_path(path)}: expected string, got {_json_type(value)}")


def _passes(check: Check, value: Any, path: Path) -> bool:
    errors: list[str] = []
    check(value, path, errors)
    return not errors


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
