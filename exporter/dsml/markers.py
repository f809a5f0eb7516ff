"""The literal characters and tag names of DSML, per grammar version.

Everything the grader compares byte-for-byte lives here, written with explicit escapes so that
a look-alike character (ASCII ``|`` for U+FF5C, ``_`` for U+2581) cannot sneak in by editing.
"""

from __future__ import annotations

from typing import Literal

Grammar = Literal["v3.2", "v4", "v4.1"]
GRAMMARS: tuple[str, ...] = ("v3.2", "v4", "v4.1")

BAR = "\uff5c"  # FULLWIDTH VERTICAL LINE, the DSML bar; NFKC maps it to ASCII "|"
LOW = "\u2581"  # LOWER ONE EIGHTH BLOCK, the word separator inside special-token names
MARKER = f"{BAR}DSML{BAR}"
# Look-alikes of the bar that a damaged sampler emits in its place (issue 32): Latin letter
# dental click, Hebrew paseq, divides, box-drawing light and heavy vertical, light and medium
# vertical bar ornaments, vertical line extension, CJK stroke 丨, presentation-form vertical em
# dash, halfwidth light vertical. SGLang's and vLLM's parsers match U+FF5C only, so markup
# barred with these reaches the client whole, as content, with no call.
CONFUSABLE_BARS = "\u01c0\u05c0\u2223\u2502\u2503\u2758\u2759\u23d0\u4e28\ufe31\uffe8"

# The block's tag name per grammar (SGLang 0.5.23: deepseekv32_detector.py, deepseekv4_detector.py,
# deepseekv41_detector.py `tool_calls_block_name`).
BLOCK_NAMES: dict[str, str] = {"v3.2": "function_calls", "v4": "tool_calls", "v4.1": "calls"}
GRAMMAR_OF_BLOCK: dict[str, str] = {v: k for k, v in BLOCK_NAMES.items()}
INVOKE = "invoke"
PARAMETER = "parameter"
TAG_NAMES: frozenset[str] = frozenset({*BLOCK_NAMES.values(), INVOKE, PARAMETER})

# V4.1 writes every tag name after one space (`<｜DSML｜ calls>`, `<｜DSML｜ invoke name=...>`):
# deepseekv41_detector.py spells its three names " calls", " invoke", " parameter".
SPACED_GRAMMARS: frozenset[str] = frozenset({"v4.1"})


def spaced(grammar: str) -> bool:
    """Does ``grammar`` put a space between the marker and every tag name?"""
    return grammar in SPACED_GRAMMARS


def tag_prefix(grammar: str) -> str:
    """``｜DSML｜`` plus the separator the grammar writes before a tag name."""
    return MARKER + (" " if spaced(grammar) else "")


EOS = f"<{BAR}end{LOW}of{LOW}sentence{BAR}>"
BOS = f"<{BAR}begin{LOW}of{LOW}sentence{BAR}>"
USER = f"<{BAR}User{BAR}>"
ASSISTANT = f"<{BAR}Assistant{BAR}>"
THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"

# Names that identify a DeepSeek special token even after NFKC turned the bars into ASCII.
ASCII_SPECIAL_NAMES: frozenset[str] = frozenset(
    {f"end{LOW}of{LOW}sentence", f"begin{LOW}of{LOW}sentence", "User", "Assistant"}
)


def block_open(grammar: str) -> str:
    return f"<{tag_prefix(grammar)}{BLOCK_NAMES[grammar]}>"


def block_close(grammar: str) -> str:
    return f"</{tag_prefix(grammar)}{BLOCK_NAMES[grammar]}>"


def invoke_open(name: str, grammar: str = "v4") -> str:
    return f'<{tag_prefix(grammar)}{INVOKE} name="{name}">'


def invoke_self_closing(name: str, grammar: str = "v4") -> str:
    return f'<{tag_prefix(grammar)}{INVOKE} name="{name}"/>'


def invoke_close(grammar: str = "v4") -> str:
    return f"</{tag_prefix(grammar)}{INVOKE}>"


def parameter_close(grammar: str = "v4") -> str:
    return f"</{tag_prefix(grammar)}{PARAMETER}>"


INVOKE_CLOSE = invoke_close("v4")
PARAMETER_CLOSE = parameter_close("v4")
# Anything a parameter value ends at, in either spelling (value scans must stop at both).
PARAMETER_CLOSES: tuple[str, ...] = (PARAMETER_CLOSE, parameter_close("v4.1"))


def parameter_open(name: str, is_string: bool, grammar: str = "v4") -> str:
    flag = "true" if is_string else "false"
    return f'<{tag_prefix(grammar)}{PARAMETER} name="{name}" string="{flag}">'


# Prefixes of a DSML tag or special token that a stream may end on before the rest arrives:
# `<｜`, `<｜DS`, `</｜DSM` (SGLang holds these back while streaming and then releases them).
PARTIAL_OPENERS: tuple[str, ...] = (f"<{BAR}", f"</{BAR}")
