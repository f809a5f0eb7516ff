"""The well-formed case, parsed without a token per tag.

Most sampled outputs are fine, so their cost sets the grader's throughput. A content channel
that is exactly ``{prose}{canonical block}[whitespace]`` (no other tag, special token or
marker anywhere, values free of anything tag-like, every call valid for the request's tools) is
parsed here: the block's structure by one pass (:func:`canonical_calls_python`, with
``str.startswith``/``str.find``, or its C build in ``_textscan.c``), then values decoded and
calls checked against their schemas. Anything else returns None and the general state machine
(:mod:`structure`) parses the channel from scratch and reports what deviates; so this module
never reports a reason, and a test checks it agrees with the machine on every corpus sample it
accepts.

The grader tries this path first on every channel it grades whole (not cut to head and tail):
on a damaged block it costs a failed pass before the state machine, on a well-formed one it
saves the state machine (``bench/bench_dsml.py`` measures both).
"""

from __future__ import annotations

import re
from functools import lru_cache

from exporter.dsml import accel
from exporter.dsml import markers as m
from exporter.dsml.accel import NativeSpelling, RawCall, RawParam
from exporter.dsml.quoting import Quoting
from exporter.dsml.result import ToolCall
from exporter.dsml.schema import ToolSet, call_problems
from exporter.dsml.structure import Parsed, name_problem, strict_json
from exporter.dsml.tokens import has_events

_OPEN = "<" + m.MARKER
_TRUE = '" string="true">'
_FALSE = '" string="false">'
_LT_BAR = "<" + m.BAR
_N_TRUE, _N_FALSE = len(_TRUE), len(_FALSE)


@lru_cache(maxsize=1024)
def _bad_name(name: str) -> bool:
    """``name_problem`` of a tool or parameter name, remembered: a deployment's outputs use the
    same few names over and over."""
    return bool(name_problem(name))


class _Spelling:
    """The literal pieces of one grammar's block (V4.1 puts a space after every marker)."""

    def __init__(self, grammar: str) -> None:
        prefix = m.tag_prefix(grammar)
        self.block_open = m.block_open(grammar) + "\n"
        self.block_close = m.block_close(grammar)
        self.invoke = f'<{prefix}{m.INVOKE} name="'
        self.param = f'<{prefix}{m.PARAMETER} name="'
        self.param_close = m.parameter_close(grammar)
        self.invoke_close = m.invoke_close(grammar) + "\n"
        self.self_closing = grammar != "v3.2"
        # the whole parameter opener, key and flag in one match (the key ends at the first
        # quote, as a tag's attribute value does)
        self.param_head = re.compile(
            re.escape(self.param) + '([^"]*)" string="(true|false)">'
        ).match
        # ... and with a value free of "<" and "D" (so of tags, special tokens and DSML), the
        # whole parameter up to its newline
        self.param_whole = re.compile(
            re.escape(self.param)
            + '([^"]*)" string="(true|false)">([^<D]*)'
            + re.escape(self.param_close)
            + "\n"
        ).match
        self.close_dsml = self.param_close.index("DSML")  # 3: after "</" and the bar
        # the same pieces for the C accelerator's canonical_calls
        self.native: NativeSpelling = (
            self.invoke,
            self.param,
            self.param_close,
            self.invoke_close,
            self.block_close,
            self.self_closing,
            self.close_dsml,
        )
        self.lengths = (
            len(self.invoke),
            len(self.param_close),
            len(self.invoke_close),
        )


_SPELLINGS = {g: _Spelling(g) for g in m.GRAMMARS}


def parse_canonical(
    text: str, body_end: int, grammar: str | None, tools: ToolSet | None
) -> Parsed | None:
    """Calls of a perfectly canonical content channel, or None to use the state machine."""
    lt = text.find(_OPEN)
    if lt < 0 or text.find("DSML") != lt + 2 or has_events(text, 0, lt):
        return None
    found = None
    for version, sp in _SPELLINGS.items():
        if text.startswith(sp.block_open, lt):
            found = version
            break  # no opener is a prefix of another: at most one matches
    if found is None or (grammar is not None and grammar != found):
        return None
    # only a backtick or tilde before the block can quote it (fence or span, see quoting.py)
    if (text.find("`", 0, lt) >= 0 or text.find("~", 0, lt) >= 0) and Quoting(text).covers(lt):
        return None
    sp = _SPELLINGS[found]
    if text.rfind(sp.block_close, lt) < 0:  # from the end: a closer ends most blocks
        return None  # no closer at all (a cut or damaged block): nothing to parse here
    pos = lt + len(sp.block_open)
    native = accel.canonical_calls
    if native is not None:
        structure = native(text, pos, body_end, sp.native)
    else:
        structure = canonical_calls_python(text, pos, body_end, sp)
    if structure is None:
        return None
    raw_calls, end = structure
    calls: list[ToolCall] = []
    values: list[tuple[int, int]] = []
    for name, start, call_end, params in raw_calls:
        args: dict[str, object] = {}
        for key, is_string, vstart, vend in params:
            if key in args:
                return None  # a repeated key
            if is_string:
                args[key] = text[vstart:vend]
            else:
                ok, value = strict_json(text[vstart:vend])
                if not ok:
                    return None
                args[key] = value
            values.append((vstart, vend))
        calls.append(ToolCall(name, args, start, call_end))
    # schemas last: a block that fails on structure (most damage) costs no validation
    if tools is not None:
        for c in calls:  # a loop, not all() over a generator: once per call of every grade
            problems, usable = call_problems(tools, c.name, c.arguments)
            if problems or not usable:
                return None
    return Parsed(calls, [(lt, end)], values, found, dsml_seen=True)


def canonical_calls_python(
    text: str, pos: int, body_end: int, sp: _Spelling
) -> tuple[tuple[RawCall, ...], int] | None:
    """The invokes of a canonical block from ``pos`` (after its opener) and the block's end, or
    None when anything is not canonical; names are checked, values are not decoded.

    The specification of the C accelerator's ``canonical_calls`` (exporter/dsml/_textscan.c),
    which runs instead when it is built; tests/dsml/test_textscan.py holds the two equal."""
    startswith, find = text.startswith, text.find
    closer = sp.block_close
    invoke, param, param_head, close_dsml = sp.invoke, sp.param, sp.param_head, sp.close_dsml
    param_whole = sp.param_whole
    param_close, invoke_close = sp.param_close, sp.invoke_close
    n_invoke, n_param_close, n_invoke_close = sp.lengths
    calls: list[RawCall] = []
    while startswith(invoke, pos):
        start = pos
        q = find('"', pos + n_invoke, body_end)
        if q < 0:
            return None
        name = text[pos + n_invoke : q]
        if _bad_name(name):
            return None
        params: list[RawParam] = []
        if startswith('">\n', q):
            pos = q + 3
            while True:
                whole = param_whole(text, pos, body_end)
                if whole is not None:  # most values: no "<" or "D" in them, one match for all
                    key, flag, _raw = whole.groups()
                    vstart, vend = whole.span(3)
                    if _bad_name(key):
                        return None
                    next_pos = whole.end()
                else:
                    head = param_head(text, pos, body_end)
                    if head is None:
                        if startswith(param, pos):
                            return None  # a parameter opener that is not canonical
                        break
                    key, flag = head.groups()
                    vstart = head.end()
                    # the value ends at the first closer; the closer holds "DSML" after "</｜",
                    # so the first "DSML" after the opener is the closer's exactly when the
                    # value holds none (one search for both)
                    vend = find("DSML", vstart, body_end) - close_dsml
                    if (
                        vend < vstart
                        or not startswith(param_close, vend)
                        or vend + n_param_close > body_end
                        or _bad_name(key)
                        or (
                            find("<", vstart, vend) >= 0  # most values hold no "<" at all
                            and (find(_LT_BAR, vstart, vend) >= 0 or find("<|", vstart, vend) >= 0)
                        )
                    ):
                        return None  # a tag or special token inside the value: let the machine say
                    next_pos = vend + n_param_close
                    if not startswith("\n", next_pos):
                        return None
                    next_pos += 1
                params.append((key, flag == "true", vstart, vend))
                pos = next_pos
            if not startswith(invoke_close, pos):
                return None
            end = pos + n_invoke_close - 1
            pos = end + 1
        elif startswith('"/>\n', q) and sp.self_closing:
            end = q + 3
            pos = end + 1
        else:
            return None
        calls.append((name, start, end, tuple(params)))
    if not calls or not startswith(closer, pos):
        return None
    end = pos + len(closer)
    if end > body_end or text[end:body_end].strip():
        return None
    return tuple(calls), end
