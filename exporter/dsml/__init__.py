"""The DSML grader: is a DeepSeek tool-call output well-formed or degenerate?

A pure library (text in, verdict out; no I/O, no logging). Entry points:

- :func:`grade_text` — a raw completion (``/generate`` text, or what a tap reassembled).
- :func:`grade_openai_response` — a chat completion object, a list of SSE chunk objects, or
  raw SSE bytes; :func:`reassemble` gives the channels without grading.
- :func:`grade_tool_calls` — parsed tool calls alone.
- :class:`StreamingGrader` / :class:`StreamingResponseGrader` — the same, fed chunk by chunk.
- :data:`VERDICTS` and :data:`REASONS` — the closed label sets for metrics (pre-create at 0).
- :data:`KERNEL` — ``c`` when the grader's character-level passes run compiled
  (exporter/dsml/_textscan.c), ``python`` when the install had no C compiler or
  ``DSV4_DSML_KERNEL=python`` (same results, slower); chosen at import by :mod:`accel`.

See ``docs/dsml-grading.md`` for every verdict, reason code and threshold.
"""

from exporter.dsml import accel
from exporter.dsml.assemble import Assembled, Assembler, reassemble
from exporter.dsml.catalog import (
    DEGENERATE,
    ERROR,
    FAMILIES,
    NO_TOOL_CALL,
    REASON_SPECS,
    REASONS,
    SUSPECT,
    TRUNCATED,
    VERDICTS,
    WELL_FORMED,
    ReasonSpec,
)
from exporter.dsml.encode import render_block, render_completion, render_invoke
from exporter.dsml.grader import grade_text
from exporter.dsml.openai import StreamingResponseGrader, grade_openai_response, grade_tool_calls
from exporter.dsml.result import ChannelSpan, Finding, Result, ToolCall, decide_verdict
from exporter.dsml.schema import ToolSet, ToolSpec
from exporter.dsml.streaming import StreamingGrader
from exporter.dsml.thresholds import DEFAULT_MAX_CHARS

KERNEL: str = accel.kernel()

__all__ = [
    "DEFAULT_MAX_CHARS",
    "DEGENERATE",
    "ERROR",
    "FAMILIES",
    "KERNEL",
    "NO_TOOL_CALL",
    "REASONS",
    "REASON_SPECS",
    "SUSPECT",
    "TRUNCATED",
    "VERDICTS",
    "WELL_FORMED",
    "Assembled",
    "Assembler",
    "ChannelSpan",
    "Finding",
    "ReasonSpec",
    "Result",
    "StreamingGrader",
    "StreamingResponseGrader",
    "ToolCall",
    "ToolSet",
    "ToolSpec",
    "decide_verdict",
    "grade_openai_response",
    "grade_text",
    "grade_tool_calls",
    "reassemble",
    "render_block",
    "render_completion",
    "render_invoke",
]
