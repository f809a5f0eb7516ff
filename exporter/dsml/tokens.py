"""One-pass tokenizer: every DSML tag, special token, think tag and bare tag in a text.

A compiled regex anchored on a literal ``<`` (no unbounded nested quantifiers) drives
``finditer`` over the text once, and a ``str.find`` loop finds every ``DSML``; canonical tags
match whole, anything else containing ``DSML`` is classified by looking at most a few
characters around it, and tag attributes are read with a bounded scan. So the cost is linear in
the text on every input (lazy ``.*?`` patterns went quadratic or cubic on repeated openers in
the measurements this design answers).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from exporter.dsml import markers as m

TagKind = Literal["block", "invoke", "parameter", "unknown"]
Variant = Literal["canonical", "ascii", "doubled", "spaced", "damaged", "confusable"]

# How far a tag's attributes may run before the tag counts as malformed (names are short).
MAX_TAG_CHARS = 512
# Events kept per channel. A real block has a few dozen tags (two per parameter); a corrupt
# 10 MB channel can have half a million, each costing microseconds of Python. Past this many the
# verdict is long settled, so the grammar stops there (reported as ``oversized``).
MAX_EVENTS = 4096

_B = m.BAR
# Every event but a damaged marker starts with "<": a regex with a literal first character lets
# the engine skip to each "<" at C speed (an alternation with different first characters made it
# try every branch at every position: 30x slower). Damaged markers are found with str.find.
_LT_EVENTS = re.compile(
    # the lookahead rejects a "<" that cannot start any event before the branches are tried
    f"<(?=[/{_B}|tipf])(?:"
    # a canonical tag, matched whole (the common case in well-formed output)
    # (one space after the marker is V4.1's spelling of the same names; the machine decides
    # whether the space belongs to the dialect in force or is damage)
    rf"(?P<canon>(?P<slash>/?){_B}DSML{_B}(?P<sp> ?)"
    r"(?P<name>tool_calls|function_calls|calls|invoke|parameter)"
    rf'(?P<attrs>(?: name="(?P<aname>[^"<>\n]{{0,256}})")?'
    rf'(?: string="(?P<aflag>[^"<>\n]{{0,16}})")?)'
    r"(?P<selfc>/?)>)"
    # DeepSeek special tokens and role markers (fullwidth bars)
    rf"|(?P<special>{_B}[^{_B}<>\n]{{1,64}}{_B}>)"
    # the same after NFKC (ASCII bars); only DeepSeek's own names count, see ASCII_SPECIAL_NAMES
    r"|(?P<aspecial>\|[^|<>\s]{1,64}\|>)"
    r"|(?P<think>/?think>)"
    # a DSML tag written without the marker
    r'|(?P<bare>(?:invoke|parameter) name="|/(?:invoke|parameter)>'
    r"|/?(?:tool_calls|function_calls)>)"
    ")"
)
_ATTR = re.compile(r"""([A-Za-z_][\w-]*)\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'=/]+))""")
_REST = re.compile(rf"[^<>\n]{{0,{MAX_TAG_CHARS}}}")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_BARS = m.BAR + "|" + m.CONFUSABLE_BARS


@dataclass(slots=True)
class Tag:
    """A DSML tag (or what is left of one). ``end`` is exclusive."""

    start: int
    end: int
    closing: bool
    name: str
    variant: Variant = "canonical"
    complete: bool = True  # False: the text ended before the tag's `>`
    self_closing: bool = False
    attr_name: str | None = None  # the name="..." attribute
    string_flag: str | None = None  # the string="..." attribute
    problems: tuple[tuple[str, str], ...] = ()  # (reason code, detail) about the attributes
    kind: TagKind = "unknown"  # from the name: see kind_of
    spaced: bool = False  # one space between the marker and the name (V4.1's spelling)


_KINDS: dict[str, TagKind] = {
    **dict.fromkeys(m.GRAMMAR_OF_BLOCK, "block"),
    m.INVOKE: "invoke",
    m.PARAMETER: "parameter",
}


def kind_of(name: str) -> TagKind:
    return _KINDS.get(name, "unknown")


@dataclass(slots=True)
class Special:
    """A special token or role marker; ``ascii`` when its bars were NFKC-normalised."""

    start: int
    end: int
    name: str
    ascii: bool = False


@dataclass(slots=True)
class Think:
    start: int
    end: int
    closing: bool


@dataclass(slots=True)
class Bare:
    """A DSML tag name used as a plain XML tag, without the marker."""

    start: int
    end: int
    text: str


Event = Tag | Special | Think | Bare


@dataclass
class _Attrs:
    name: str | None = None
    flag: str | None = None
    problems: list[tuple[str, str]] = field(default_factory=list)


def scan(text: str, limit: int = MAX_EVENTS) -> list[Event]:
    """The events of ``text`` in order (at most ``limit``); never raises, linear time."""
    out: list[Event] = []
    covered = 0  # end of the last event: a DSML inside it is part of it
    find = text.find
    d = find("DSML")
    # every other event starts with "<": most reasoning has none, and needs no regex pass
    for mt in _LT_EVENTS.finditer(text) if "<" in text else ():
        start = mt.start()
        while 0 <= d < start:
            tag = _classify(text, d)
            if tag is not None:
                out.append(tag)
                covered = tag.end
                if len(out) >= limit:
                    return out
            d = find("DSML", max(d + 4, covered))
        if start < covered:
            continue
        if mt.lastgroup == "canon":  # most events: a whole canonical tag, its shape remembered
            shape = _SHAPES.get(mt.group())
            ev: Event | None = Tag(start, mt.end(), *(shape or _shape_of(mt)))
        else:
            ev = _lt_event(text, mt)
        if ev is not None:
            out.append(ev)
            if ev.end > covered:
                covered = ev.end
            if len(out) >= limit:
                return out
            if 0 <= d < covered:
                d = find("DSML", covered)
    while d >= 0 and len(out) < limit:
        tag = _classify(text, d)
        if tag is not None:
            out.append(tag)
            covered = tag.end
        d = find("DSML", max(d + 4, covered))
    return out


def has_events(text: str, start: int, end: int) -> bool:
    """Could ``text[start:end]`` hold any event? (conservative: any ``<``-event shape, or DSML)"""
    return text.find("DSML", start, end) >= 0 or _LT_EVENTS.search(text, start, end) is not None


def _lt_event(text: str, mt: re.Match[str]) -> Event | None:
    """The event of a non-canonical ``<`` match (canonical tags are made in :func:`scan`)."""
    group = mt.lastgroup
    if group in ("special", "aspecial"):
        name = mt.group()[2:-2]
        if "DSML" in name:
            return _classify(text, mt.start() + 2 + name.index("DSML"))
        if group == "special":
            return Special(mt.start(), mt.end(), name)
        if name in m.ASCII_SPECIAL_NAMES or m.LOW in name:
            return Special(mt.start(), mt.end(), name, ascii=True)
        return None
    if group == "think":
        return Think(mt.start(), mt.end(), mt.group().startswith("</"))
    return Bare(mt.start(), mt.end(), mt.group())


# Every field of a Tag but start and end: what the text of a tag decides.
Shape = tuple[
    bool,
    str,
    Variant,
    bool,
    bool,
    str | None,
    str | None,
    tuple[tuple[str, str], ...],
    TagKind,
    bool,
]
# The shapes of the canonical tags seen, by their text: a deployment's outputs repeat the same
# few tags (a handful of tool and parameter names), so a tag costs one dict lookup instead of
# reading six groups and comparing its attributes. Bounded (emptied when it fills): a tag's text
# is at most about 300 characters, so the memory stays under a few MB whatever the input.
_SHAPES: dict[str, Shape] = {}
MAX_SHAPES = 1024


def _shape_of(mt: re.Match[str]) -> Shape:
    """The shape of the canonical tag ``mt`` matched (remembered in ``_SHAPES``: its
    attributes are compared with their canonical form once per distinct tag)."""
    slash, sp, name, attrs, selfc = mt.group("slash", "sp", "name", "attrs", "selfc")
    closing = slash == "/"
    parsed = _check_attrs(name, closing, attrs, bool(selfc))
    shape: Shape = (
        closing,
        name,
        "canonical",
        True,
        bool(selfc),
        parsed.name,
        parsed.flag,
        tuple(parsed.problems),
        _KINDS[name],
        sp == " ",
    )
    if len(_SHAPES) >= MAX_SHAPES:
        _SHAPES.clear()
    _SHAPES[mt.group()] = shape
    return shape


# What _read_marker makes of a DSML by the text around it: (offset of the DSML in the window,
# the window) -> the Tag's start and end relative to the DSML and its shape, or None (prose).
# Damaged output repeats its damage on every tag (a look-alike bar, ASCII pipes), so a marker
# costs one match and one lookup instead of the character walks. Bounded like _SHAPES (a window
# is at most _MARKER_BACK + 4 + _MARKER_AHEAD + 2 characters).
_MARKERS: dict[tuple[int, str], tuple[int, int, Shape] | None] = {}
MAX_MARKERS = 1024
# _read_marker looks at most this far back from the DSML: three bars, "/" and "<"
_MARKER_BACK = 5
# the longest window remembered after the DSML (a tag's bars, spaces, name and attributes)
_MARKER_AHEAD = 256
_TO_STOP = re.compile(rf"[^<>\n]{{0,{_MARKER_AHEAD + 1}}}")


def _classify(text: str, d: int) -> Tag | None:
    """:func:`_read_marker`, remembered by the text it reads.

    _read_marker reads the characters from ``d - 5`` (or the text's start) up to the first
    ``<``, ``>`` or newline after the DSML, that character included (or the text's end): the
    attributes it reads (at most ``MAX_TAG_CHARS``) stop there when the window is shorter than
    that. So equal windows, with the DSML at the same offset in them, read alike."""
    stop = _TO_STOP.match(text, d + 4).end()  # type: ignore[union-attr]  # matches "" at least
    if stop - d - 4 > _MARKER_AHEAD:
        return _read_marker(text, d)  # a long tag: not remembered
    lo = d - _MARKER_BACK if d > _MARKER_BACK else 0
    key = (d - lo, text[lo : stop + 1])
    try:
        rel = _MARKERS[key]
    except KeyError:
        tag = _read_marker(text, d)
        rel = None if tag is None else (tag.start - d, tag.end - d, _fields(tag))
        if len(_MARKERS) >= MAX_MARKERS:
            _MARKERS.clear()
        _MARKERS[key] = rel
        return tag
    if rel is None:
        return None
    return Tag(d + rel[0], d + rel[1], *rel[2])


def _fields(tag: Tag) -> Shape:
    """A Tag's shape: its fields after start and end, in order."""
    return (
        tag.closing,
        tag.name,
        tag.variant,
        tag.complete,
        tag.self_closing,
        tag.attr_name,
        tag.string_flag,
        tag.problems,
        tag.kind,
        tag.spaced,
    )


def _read_marker(text: str, d: int) -> Tag | None:
    """Classify the ``DSML`` at ``d``: a damaged or dialect marker, or plain prose (None)."""
    i = d
    before = ""
    while i > 0 and text[i - 1] in _BARS and len(before) < 3:
        i -= 1
        before = text[i] + before
    closing = i > 0 and text[i - 1] == "/"
    if closing:
        i -= 1
    has_angle = i > 0 and text[i - 1] == "<"
    if has_angle:
        i -= 1
    start = i
    j = d + 4
    after = ""
    while j < len(text) and text[j] in _BARS and len(after) < 3:
        after += text[j]
        j += 1
    spaces = 0
    while j < len(text) and text[j] == " " and spaces < 8:
        spaces += 1
        j += 1
    if not (has_angle or m.BAR in before or m.BAR in after or (before and after)):
        return None  # the word "DSML" in prose
    if not has_angle and not (before + after).strip(m.CONFUSABLE_BARS):
        return None  # │DSML│ in a box-drawn table: look-alikes are bars only after `<`
    nm = _NAME.match(text, j)
    name = nm.group() if nm else ""
    j = nm.end() if nm else j
    if before == after == m.BAR and has_angle and spaces <= 1:
        # canonical marker (one space: V4.1's spelling), non-canonical attributes or name
        variant: Variant = "canonical"
    elif before == after == "|" and has_angle and spaces <= 1:
        variant = "ascii"
    elif len(before) >= 2 or len(after) >= 2:
        variant = "doubled"
    elif before == after and before in m.CONFUSABLE_BARS and (has_angle or closing):
        variant = "confusable"  # <ǀDSMLǀinvoke ...>: one look-alike for both bars
    elif has_angle and spaces and len(before) == 1 and len(after) == 1:
        variant = "spaced"
    else:
        variant = "damaged"
    rest = _REST.match(text, j)
    q = rest.end() if rest else j
    body = text[j:q]
    if q < len(text) and text[q] == ">":
        complete, end, malformed = True, q + 1, False
    elif q >= len(text):
        complete, end, malformed = False, q, False
    else:  # stopped at `<`, a newline or the length limit
        complete, end, malformed = True, q, True
    selfc = body.endswith("/")
    if selfc:
        body = body[:-1]
    parsed = _check_attrs(name, closing, body, selfc) if complete else _Attrs()
    if malformed:
        parsed.problems.append(("attr_malformed", "tag not closed by `>` on its line"))
    return Tag(
        start,
        end,
        closing,
        name,
        variant,
        complete,
        selfc,
        parsed.name,
        parsed.flag,
        tuple(parsed.problems),
        kind_of(name),
        spaces == 1 and variant in ("canonical", "ascii"),
    )


def _check_attrs(name: str, closing: bool, attrs: str, selfc: bool) -> _Attrs:
    """Compare a tag's attribute text with the one canonical form for its kind."""
    out = _Attrs()
    if name not in m.TAG_NAMES:
        return out  # an unknown tag is reported as such; its attributes mean nothing
    if closing or name in m.GRAMMAR_OF_BLOCK:
        if attrs.strip() or selfc:
            out.problems.append(("attr_malformed", "this tag takes no attributes"))
        return out
    pairs: list[tuple[str, str]] = []
    for am in _ATTR.finditer(attrs):
        pairs.append((am.group(1), _first(am.group(2), am.group(3), am.group(4))))
    values = dict(pairs)
    out.name = values.get("name")
    if out.name is None:
        out.problems.append(("name_invalid", "no name attribute"))
    if name == m.PARAMETER:
        out.flag = values.get("string")
        if out.flag is None:
            out.problems.append(("string_flag_missing", "parameter without string="))
        elif out.flag not in ("true", "false"):
            out.problems.append(("string_flag_invalid", f"string={out.flag[:16]!r}"))
        if selfc:
            out.problems.append(("attr_malformed", "self-closing parameter"))
    # The canonical rendering of what is present; any other spelling (order, quotes, spacing,
    # extra or repeated attributes, leftover text) is malformed.
    expected = "" if out.name is None else f' name="{out.name}"'
    if name == m.PARAMETER and out.flag is not None:
        expected += f' string="{out.flag}"'
    if attrs != expected or len(pairs) != len(values):
        out.problems.append(("attr_malformed", "attributes not in canonical form"))
    return out


def _first(*values: str | None) -> str:
    for v in values:
        if v is not None:
            return v
    return ""
