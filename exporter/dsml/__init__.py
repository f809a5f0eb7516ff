"""The DSML grader: is a DeepSeek tool-call output well-formed or degenerate?

A pure library (text in, verdict out; no I/O, no logging). Entry points:

- :func:`grade_text` — a raw completion (``/generate`` text, or what a tap reassembled).
- :func:`grade_openai_response` — a chat completion object, a list of SSE chunk objects, or
  raw SSE bytes; :func:`reassemble` gives the channels without grading.
- :func:`grade_tool_calls` — parsed tool calls alone.
- :class:`StreamingGrader` / :class:`StreamingResponseGrader` — the same, fed chunk by chunk.
- :data:`VERDICTS` and :data:`REASONS` — the closed label sets for metrics (pre-create at 0).
- :data:`KERNEL` — ``c`` when the grader's hot passes run compiled (the text checks,
  exporter/dsml/_textscan.c, and the grammar, _grammar.c), ``python`` when the install had no C
  compiler (same results, slower); :data:`TEXTCHECK_KERNEL` and :data:`GRAMMAR_KERNEL` each.

See ``docs/dsml-grading.md`` for every verdict, reason code and threshold.
"""

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
from exporter.dsml.openai import (
    Assembled,
    Assembler,
    StreamingResponseGrader,
    grade_openai_response,
    grade_tool_calls,
    reassemble,
)
from exporter.dsml.result import ChannelSpan, Finding, Result, ToolCall, decide_verdict
from exporter.dsml.schema import ToolSet, ToolSpec
from exporter.dsml.streaming import StreamingGrader
from exporter.dsml.structure import KERNEL as GRAMMAR_KERNEL
from exporter.dsml.textcheck import KERNEL as TEXTCHECK_KERNEL
from exporter.dsml.thresholds import DEFAULT_MAX_CHARS

# both compiled, or the reference somewhere (a build that lost one module is reported as such)
KERNEL = "c" if TEXTCHECK_KERNEL == GRAMMAR_KERNEL == "c" else "python"

__all__ = [
    "DEFAULT_MAX_CHARS",
    "DEGENERATE",
    "ERROR",
    "FAMILIES",
    "GRAMMAR_KERNEL",
    "KERNEL",
    "NO_TOOL_CALL",
    "REASONS",
    "REASON_SPECS",
    "SUSPECT",
    "TEXTCHECK_KERNEL",
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
