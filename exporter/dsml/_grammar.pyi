"""Types of the C accelerator exporter/dsml/_grammar.c: the grammar pass of one content
channel (tokens.scan and structure.Machine), tested equal to structure.parse_channel_python."""

from collections.abc import Callable
from typing import Any

from exporter.dsml.result import ToolCall
from exporter.dsml.schema import ToolSet
from exporter.dsml.structure import Report

GRAMMAR_OF_BLOCK: dict[str, str]
ASCII_SPECIAL_NAMES: tuple[str, ...]
MAX_TAG_CHARS: int

def parse(
    text: str,
    body_end: int,
    limit: int,
    grammar: str | None,
    length: bool,
    gap: int | None,
    report: Report,
    covers: Callable[[int], bool],
    check_call: Callable[[ToolSet, Report, str, dict[str, Any], bool, int, int], bool],
    tools: ToolSet | None,
    strict_json: Callable[[str], tuple[bool, Any]],
    tool_call: type[ToolCall],
    /,
) -> tuple[
    list[ToolCall],
    list[tuple[int, int]],
    list[tuple[int, int]],
    str | None,
    bool,
    int,
    bool,
    int,
    int,
]:
    """structure.parse_channel_python's work: (calls, blocks, values, grammar, open_at_end,
    open_block_start, dsml_seen, events kept, end of the last event)."""

def events(text: str, limit: int, /) -> list[tuple[Any, ...]]:
    """tokens.scan, each event as (kind, *its dataclass fields)."""
