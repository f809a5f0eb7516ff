"""The bounded vocabulary of the grader: verdicts and reason codes.

Metrics pre-create one series per verdict and per reason at zero (a dead code path must be
visible), so both sets are closed, module-level tuples. Each reason carries its family and
severity; the verdict is a pure function of the severities found (see ``decide_verdict`` in
:mod:`exporter.dsml.result`). Severity ``signal`` is a shape that the client may be harmed by
but that clean traffic also has, measured on independent text (issue 32: answers that end
without a full stop, the same call twice): an alarm that fires on clean traffic gets muted, so
a signal is counted (``dsv4_dsml_reasons_total``, its own line in triage) and never changes
the verdict. ``docs/dsml-grading.md`` documents every entry and a test keeps
the two in step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Severity = Literal["hard", "soft", "info", "signal", "error"]
Family = Literal["marker", "structure", "attribute", "channel", "text", "end", "input"]

WELL_FORMED = "well_formed"
NO_TOOL_CALL = "no_tool_call"
SUSPECT = "suspect"
TRUNCATED = "truncated"
DEGENERATE = "degenerate"
ERROR = "error"

# `error` is never a judgement about the model: it means the input object could not be read.
VERDICTS: tuple[str, ...] = (WELL_FORMED, NO_TOOL_CALL, SUSPECT, TRUNCATED, DEGENERATE, ERROR)


@dataclass(frozen=True)
class ReasonSpec:
    """One reason code: what it means, how bad it is, and what trips it."""

    code: str
    family: Family
    severity: Severity
    summary: str


_SPECS: tuple[ReasonSpec, ...] = (
    # --- marker: the ｜DSML｜ marker itself is damaged or missing -----------------------------
    ReasonSpec("marker_ascii_pipe", "marker", "soft", "ASCII | instead of U+FF5C (NFKC dialect)"),
    ReasonSpec("marker_doubled_bar", "marker", "hard", "doubled bars around DSML"),
    ReasonSpec("marker_spaced", "marker", "hard", "space after the marker in V3.2/V4 output"),
    ReasonSpec("marker_damaged", "marker", "hard", "marker without `<`, bars missing or mixed"),
    ReasonSpec("marker_missing", "marker", "soft", "DSML tag written without the marker"),
    ReasonSpec("marker_confusable", "marker", "hard", "both bars a look-alike of U+FF5C"),
    ReasonSpec("tag_unknown", "marker", "hard", "a DSML tag name that does not exist"),
    ReasonSpec("dialect_mismatch", "marker", "hard", "block in a dialect the parser cannot read"),
    # --- structure: tags in the wrong place or order ----------------------------------------
    ReasonSpec("version_mismatch", "structure", "soft", "other grammar version's block/syntax"),
    ReasonSpec("bare_invoke", "structure", "hard", "invoke outside a block or param outside"),
    ReasonSpec("nested_tag", "structure", "hard", "an opener inside an open tag or a value"),
    ReasonSpec("unbalanced", "structure", "hard", "wrong closer, or a tag left open at stop"),
    ReasonSpec("orphan_closer", "structure", "hard", "a closing tag with nothing open"),
    ReasonSpec("stray_text", "structure", "hard", "non-whitespace text between block tags"),
    ReasonSpec("empty_block", "structure", "hard", "a block with no invoke"),
    ReasonSpec("text_after_block", "structure", "hard", "text after the closing block tag"),
    ReasonSpec("multiple_blocks", "structure", "hard", "more than one tool-call block"),
    ReasonSpec("whitespace_layout", "structure", "soft", "whitespace between tags not one \\n"),
    ReasonSpec("duplicate_call", "structure", "soft", "the same call 3+ times back to back"),
    ReasonSpec("repeated_call", "structure", "signal", "the same call twice in one response"),
    # --- attribute: names, flags and values -------------------------------------------------
    ReasonSpec("attr_malformed", "attribute", "hard", "attribute syntax, order or extras"),
    ReasonSpec("string_flag_missing", "attribute", "hard", "parameter without string="),
    ReasonSpec("string_flag_invalid", "attribute", "hard", "string= neither true nor false"),
    ReasonSpec("param_duplicate", "attribute", "hard", "a parameter name twice in one invoke"),
    ReasonSpec("name_invalid", "attribute", "hard", "empty or impossible tool/param name"),
    ReasonSpec("tool_unknown", "attribute", "hard", "tool name not among the request's tools"),
    ReasonSpec("json_invalid", "attribute", "hard", 'string="false" value/arguments not JSON'),
    ReasonSpec("args_empty_required", "attribute", "hard", "{} for a tool with required params"),
    ReasonSpec("schema_mismatch", "attribute", "soft", "arguments do not match the schema"),
    # --- channel: the right text in the wrong channel ---------------------------------------
    ReasonSpec("dsml_in_reasoning", "channel", "hard", "a DSML tag inside reasoning"),
    ReasonSpec("think_tag_leak", "channel", "hard", "<think>, or </think> in visible content"),
    ReasonSpec("special_token_leak", "channel", "hard", "special token or role marker in output"),
    ReasonSpec("unparsed_block", "channel", "soft", "well-formed block returned as content"),
    ReasonSpec("template_token_leak", "channel", "soft", "another chat template's token in text"),
    ReasonSpec("think_in_value", "channel", "soft", "<think> or </think> inside a tool value"),
    ReasonSpec("quoted_block", "channel", "soft", "a block opener quoted in prose: parsed"),
    # --- text: degeneration of the text itself ----------------------------------------------
    ReasonSpec("ngram_loop", "text", "hard", "the same unit repeated back to back"),
    ReasonSpec("symbol_salad", "text", "hard", "a long run of punctuation with no words"),
    ReasonSpec("script_mix", "text", "hard", "words of 3+ scripts switching mid-sentence"),
    ReasonSpec("token_soup", "text", "hard", "a run of bare word pieces (suffixes, stems)"),
    ReasonSpec("replacement_char", "text", "soft", "U+FFFD in the output"),
    ReasonSpec("bpe_mojibake", "text", "hard", "byte-level BPE / double-encoded UTF-8"),
    ReasonSpec("control_chars", "text", "hard", "C0/C1 control characters"),
    ReasonSpec("prose_loop", "text", "hard", "a long passage repeated verbatim in prose"),
    ReasonSpec("phrase_loop", "text", "hard", "one sentence 3+ times back to back in prose"),
    ReasonSpec("value_loop", "text", "hard", "a short run repeated, glued to a word, in a value"),
    ReasonSpec("value_salad", "text", "hard", "words of 3+ scripts switching inside one value"),
    ReasonSpec("script_glued", "text", "soft", "two alphabets glued inside one word"),
    # --- end: how the generation ended ------------------------------------------------------
    ReasonSpec("length_in_block", "end", "info", "finish_reason length inside a block"),
    ReasonSpec("length_no_call", "end", "info", "finish_reason length before any call"),
    ReasonSpec("empty_stop", "end", "hard", "finish_reason stop with no visible output"),
    ReasonSpec("length_tools_no_call", "end", "soft", "length with tools offered and no call"),
    ReasonSpec("cut_under_stop", "end", "signal", "prose ends unpunctuated under stop, tools"),
    ReasonSpec("oversized", "end", "info", "over the size cap: head and tail graded"),
    # --- input: the object handed to the grader could not be read ---------------------------
    ReasonSpec("bad_input", "input", "error", "input is not a response the grader can read"),
)

REASON_SPECS: dict[str, ReasonSpec] = {s.code: s for s in _SPECS}
REASONS: tuple[str, ...] = tuple(s.code for s in _SPECS)
FAMILIES: tuple[str, ...] = ("marker", "structure", "attribute", "channel", "text", "end", "input")
# finish_reason values that say the model ended the answer itself (SGLang says ``stop`` or
# ``tool_calls``; a raw /generate meta says ``eos``): what empty_stop and cut_under_stop judge
STOPS: tuple[str, ...] = ("stop", "tool_calls", "eos")
HARD: frozenset[str] = frozenset(s.code for s in _SPECS if s.severity == "hard")
SOFT: frozenset[str] = frozenset(s.code for s in _SPECS if s.severity == "soft")
# counted, never a verdict (see the module docstring)
SIGNALS: frozenset[str] = frozenset(s.code for s in _SPECS if s.severity == "signal")
# Soft reasons about how the generation ended: ``finish_reason == "length"`` does not excuse them
# (it is their subject), so alone they give ``suspect``, never ``truncated``.
END_SOFT: frozenset[str] = frozenset(c for c in SOFT if REASON_SPECS[c].family == "end")


def severity(code: str) -> Severity:
    """Severity of a reason code (KeyError for an unknown code: codes are a closed set)."""
    return REASON_SPECS[code].severity
