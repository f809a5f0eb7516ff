"""The literal characters and tag names of DSML, per grammar version.

Everything the grader compares byte-for-byte lives here, written with explicit escapes so that
a look-alike character (ASCII ``|`` for U+FF5C, ``_`` for U+2581) cannot sneak in by editing.
"""

from __future__ import annotations

from typing import Literal

Grammar = Literal["v3.2", "v4"]
GRAMMARS: tuple[str, ...] = ("v3.2", "v4")

BAR = "\uff5c"  # FULLWIDTH VERTICAL LINE, the DSML bar; NFKC maps it to ASCII "|"
LOW = "\u2581"  # LOWER ONE EIGHTH BLOCK, the word separator inside special-token names
MARKER = f"{BAR}DSML{BAR}"

BLOCK_NAMES: dict[str, str] = {"v3.2": "function_calls", "v4": "tool_calls"}
GRAMMAR_OF_BLOCK: dict[str, str] = {v: k for k, v in BLOCK_NAMES.items()}
INVOKE = "invoke"
PARAMETER = "parameter"
TAG_NAMES: frozenset[str] = frozenset({*BLOCK_NAMES.values(), INVOKE, PARAMETER})

# Names seen after a spaced marker (`<｜DSML｜ calls>`) in the V4.1 dialect or by analogy with
# the known names; anything else after a space is a damaged tag, not a dialect.
SPACED_DIALECT_NAMES: frozenset[str] = frozenset({"calls", "call", *TAG_NAMES})

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
    return f"<{MARKER}{BLOCK_NAMES[grammar]}>"


def block_close(grammar: str) -> str:
    return f"</{MARKER}{BLOCK_NAMES[grammar]}>"


def invoke_open(name: str) -> str:
    return f'<{MARKER}{INVOKE} name="{name}">'


def invoke_self_closing(name: str) -> str:
    return f'<{MARKER}{INVOKE} name="{name}"/>'


INVOKE_CLOSE = f"</{MARKER}{INVOKE}>"
PARAMETER_CLOSE = f"</{MARKER}{PARAMETER}>"


def parameter_open(name: str, is_string: bool) -> str:
    flag = "true" if is_string else "false"
    return f'<{MARKER}{PARAMETER} name="{name}" string="{flag}">'
