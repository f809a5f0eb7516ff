"""Tool specs and the small JSON-schema check: what is checked, and what is left alone."""

from __future__ import annotations

import pytest

from exporter.dsml.schema import ToolSet, schema_errors

SCHEMA = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "limit": {"type": "integer"},
        "ratio": {"type": "number"},
        "mode": {"enum": ["r", "w"]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "opt": {"type": ["string", "null"]},
        "maybe": {"type": "string", "nullable": True},
        "either": {"anyOf": [{"type": "integer"}, {"type": "boolean"}]},
        "fixed": {"const": 3},
        "both": {"allOf": [{"type": "integer"}, {"enum": [1, 2]}]},
        "exotic": {"type": "string", "pattern": "^[a-z]+$", "format": "email"},
    },
    "required": ["path"],
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    "args",
    [
        {"path": "a"},
        {"path": "a", "limit": 10, "ratio": 1, "mode": "r", "tags": ["x"], "opt": None},
        {"path": "a", "limit": 10.0, "maybe": None, "either": True, "fixed": 3.0, "both": 2},
        {"path": "a", "exotic": "NOT an email"},  # pattern and format are not checked
    ],
)
def test_valid_arguments(args: dict) -> None:
    assert schema_errors(args, SCHEMA) == []


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ({}, "missing required 'path'"),
        ({"path": 1}, "expected string"),
        ({"path": "a", "limit": True}, "expected integer"),
        ({"path": "a", "limit": 1.5}, "expected integer"),
        ({"path": "a", "mode": "x"}, "enum"),
        ({"path": "a", "tags": ["x", 2]}, "$.tags[1]"),
        ({"path": "a", "either": "s"}, "anyOf"),
        ({"path": "a", "fixed": 4}, "const"),
        ({"path": "a", "both": 3}, "enum"),
        ({"path": "a", "surprise": 1}, "unexpected property"),
        ([], "expected object"),
    ],
)
def test_mismatches(args: object, needle: str) -> None:
    errors = schema_errors(args, SCHEMA)
    assert errors and any(needle in e for e in errors), errors


def test_errors_are_bounded_and_deep_schemas_are_safe() -> None:
    assert len(schema_errors({"path": 1, "limit": "x", "ratio": "y", "mode": 3}, SCHEMA)) == 3
    deep: dict = {"type": "object"}
    node = deep
    for _ in range(200):
        node["properties"] = {"a": {"type": "object"}}
        node = node["properties"]["a"]
    value: dict = {}
    cur = value
    for _ in range(200):
        cur["a"] = {}
        cur = cur["a"]
    assert schema_errors(value, deep) == []
    assert schema_errors({"x": 1}, None) == []
    assert schema_errors({"x": 1}, {"type": "object", "weird": object()}) == []


def test_toolset_accepts_every_usual_shape() -> None:
    tools = ToolSet.from_any(
        [
            "plain",
            {"type": "function", "function": {"name": "oa", "parameters": SCHEMA}},
            {"name": "fn", "parameters": {"required": ["q"]}},
            {"name": "anth", "input_schema": {"required": ["z"]}},
            {"type": "function", "function": {"description": "no name"}},
            42,
            None,
        ]
    )
    assert tools is not None
    assert tools.names == ("plain", "oa", "fn", "anth")
    assert tools.get("oa").required == ("path",)
    assert tools.get("anth").required == ("z",)
    assert "plain" in tools and "nope" not in tools
    assert ToolSet.from_any(None) is None
    assert ToolSet.from_any({"m": SCHEMA}).get("m").required == ("path",)
    assert ToolSet.from_any("single").names == ("single",)
    assert len(ToolSet.from_any(12)) == 0
    assert ToolSet.from_any(tools) is tools
