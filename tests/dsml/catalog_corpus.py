"""A false-alarm corpus in many scripts, built at test time from text nobody here wrote (issue 32).

The grader must not flag clean traffic: an alarm that fires on clean answers gets muted. The
long-text corpus (:mod:`tests.dsml.long_corpus`) is mostly English code and docs; chat traffic
is also Chinese, Japanese, Korean, Russian, Arabic, Hindi... answers that end in a list item, a
URL, a heading, a log line or a table row, or a CJK sentence without its final ``。``. So the
text here comes from the translated message catalogs installed on the machine
(``/usr/share/locale/*/LC_MESSAGES/*.mo``, read with the standard library's ``gettext``; the
translations are the Debian packages' own), translated manuals (``/usr/share/man/<locale>``,
roff source), certificates (``/etc/ssl/certs``), web addresses from Debian's ``copyright``
files, log lines from ``/var/log``, and nothing from this project. Each script's messages are
shaped as chat answers (a sentence, a numbered or bulleted list, a heading, a URL at the end, a
log excerpt, a table) and as tool calls carrying them as values; short ones and long ones (at
least ``MIN_TOKENS`` estimated tokens). Deterministic: files and messages sorted, one seeded RNG.

The answers are not tuned on: each shape is a way chat answers end, and its text is whatever
the translators wrote.
"""

from __future__ import annotations

import gettext
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from exporter.samplers.length import estimate_tokens
from tests.dsml.long_corpus import _read, windows

LOCALE = Path("/usr/share/locale")
MIN_TOKENS = 4000

# script -> the locales whose catalogs are written in it (the first ones present are used)
SCRIPTS: dict[str, tuple[str, ...]] = {
    "han_simplified": ("zh_CN",),
    "han_traditional": ("zh_TW", "zh_HK"),
    "japanese": ("ja",),
    "hangul": ("ko",),
    "cyrillic": ("ru", "uk", "bg", "sr"),
    "arabic": ("ar", "fa"),
    "devanagari": ("hi", "mr", "ne"),
    "greek": ("el",),
    "thai": ("th",),
    "hebrew": ("he",),
    "georgian": ("ka",),
    "bengali": ("bn", "bn_IN"),
    "tamil": ("ta",),
    "latin": ("de", "fr", "vi", "tr"),
}
SHAPES: tuple[str, ...] = (
    "sentence",
    "numbered",
    "bullets",
    "heading",
    "url",
    "log",
    "table",
    "paragraphs",
)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ufffd]")
_URL = re.compile(r"https?://[A-Za-z0-9._~:/?#@!$&'()*+,;=%-]+[A-Za-z0-9/]")


@dataclass(frozen=True)
class Sample:
    script: str
    shape: str
    source: str  # the catalog (or files) the text came from
    text: str


def _messages(path: Path) -> list[str]:
    """The translated messages of one catalog: each translation's lines that hold a letter,
    stripped; no control characters (a catalog string with a tab or a bell is a terminal
    escape, not prose)."""
    try:
        with path.open("rb") as fh:
            catalog = gettext.GNUTranslations(fh)._catalog  # type: ignore[attr-defined]
    except (OSError, ValueError, UnicodeDecodeError):
        return []
    out: list[str] = []
    for key in sorted(catalog, key=str):
        if key == "" or (isinstance(key, tuple) and key[0] == ""):
            continue  # the header
        value = catalog[key]
        if not isinstance(value, str) or _CONTROL.search(value.replace("\n", " ")):
            continue
        for line in value.split("\n"):
            line = line.strip()
            if len(line) >= 4 and any(c.isalpha() for c in line):
                out.append(line)
    return out


@cache
def messages(script: str) -> tuple[tuple[str, str], ...]:
    """(catalog, message) pairs of one script, in order, deduplicated."""
    seen: set[str] = set()
    out: list[tuple[str, str]] = []
    for loc in SCRIPTS[script]:
        for path in sorted((LOCALE / loc / "LC_MESSAGES").glob("*.mo")):
            for msg in _messages(path):
                if msg not in seen:
                    seen.add(msg)
                    out.append((f"{loc}/{path.name}", msg))
    return tuple(out)


@cache
def urls() -> tuple[str, ...]:
    found: set[str] = set()
    for path in sorted(Path("/usr/share/doc").glob("*/copyright"))[:400]:
        try:
            found.update(_URL.findall(path.read_text("utf-8", "replace")))
        except OSError:
            continue
    return tuple(sorted(found))


@cache
def log_lines() -> tuple[str, ...]:
    lines: list[str] = []
    for name in ("dpkg.log", "alternatives.log", "apt/history.log", "apt/term.log"):
        try:
            text = (Path("/var/log") / name).read_text("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        lines += [ln for ln in text.splitlines() if ln.strip() and not _CONTROL.search(ln)]
    return tuple(lines)


def _take(rng: random.Random, pool: tuple[tuple[str, str], ...], k: int) -> tuple[str, list[str]]:
    """``k`` consecutive messages of one catalog region (as a translator wrote them together)."""
    i = rng.randrange(max(1, len(pool) - k))
    picked = pool[i : i + k]
    return picked[0][0], [m for _, m in picked]


def _shape(rng: random.Random, script: str, shape: str) -> tuple[str, str]:
    pool = messages(script)
    if shape == "sentence":
        src, ms = _take(rng, pool, rng.randint(1, 3))
        return src, " ".join(ms)
    if shape in ("numbered", "bullets"):
        src, ms = _take(rng, pool, rng.randint(3, 6))
        marks = [f"{i}." for i in range(1, len(ms))] if shape == "numbered" else ["-"] * len(ms)
        body = "\n".join(f"{mk} {m}" for mk, m in zip(marks, ms[1:], strict=False))
        return src, f"{ms[0]}\n{'' if rng.random() < 0.5 else chr(10)}{body}"
    if shape == "heading":
        src, ms = _take(rng, pool, 4)
        return src, f"## {ms[0]}\n\n{ms[1]} {ms[2]}\n\n### {ms[3]}"
    if shape == "url":
        src, ms = _take(rng, pool, rng.randint(1, 2))
        link = rng.choice(urls() or ("https://www.debian.org/",))
        return src, f"{' '.join(ms)}{rng.choice(['：', ': ', ' ', chr(10)])}{link}"
    if shape == "log":
        src, ms = _take(rng, pool, 1)
        logs = log_lines() or ("2024-01-01 00:00:00 status installed base-files:amd64 13",)
        i = rng.randrange(len(logs))
        return src, ms[0] + "\n\n" + "\n".join(logs[i : i + rng.randint(1, 6)])
    if shape == "table":
        src, ms = _take(rng, pool, rng.randint(2, 6))
        rows = "\n".join(f"| {i} | {m.replace('|', '/')} |" for i, m in enumerate(ms, 1))
        return src, f"| # | {script} |\n|---|---|\n{rows}"
    if shape == "paragraphs":
        src, ms = _take(rng, pool, rng.randint(4, 10))
        cut = rng.randint(1, len(ms) - 1)
        return src, " ".join(ms[:cut]) + "\n\n" + " ".join(ms[cut:])
    raise ValueError(shape)


def short(per_shape: int = 24, seed: int = 32) -> Iterator[Sample]:
    """``per_shape`` answers of every shape in every script present on the machine."""
    rng = random.Random(seed)
    for script in SCRIPTS:
        if len(messages(script)) < 50:
            continue
        for shape in SHAPES:
            for _ in range(per_shape):
                src, text = _shape(rng, script, shape)
                yield Sample(script, shape, src, text)


def long(per_script: int = 3, seed: int = 4000) -> Iterator[Sample]:
    """Answers of at least ``MIN_TOKENS`` estimated tokens: shapes of one script strung
    together, a blank line between them, as a long answer is."""
    rng = random.Random(seed)
    for script in SCRIPTS:
        if len(messages(script)) < 50:
            continue
        for k in range(per_script):
            parts: list[str] = []
            while estimate_tokens("\n\n".join(parts)) < MIN_TOKENS:
                parts.append(_shape(rng, script, rng.choice(SHAPES))[1])
            yield Sample(script, "long", f"{script}#{k}", "\n\n".join(parts))


# script -> translated manual directories
MANUALS: dict[str, tuple[str, ...]] = {
    "japanese": ("ja",),
    "hangul": ("ko",),
    "han_simplified": ("zh_CN",),
    "han_traditional": ("zh_TW",),
    "cyrillic": ("ru", "uk", "sr"),
}


def manuals(per_script: int = 6) -> Iterator[Sample]:
    """Translated man pages (roff source, as a model quoting or writing one would give it):
    whole pages when short, windows of at least ``MIN_TOKENS`` tokens when long."""
    for script, locs in MANUALS.items():
        taken = 0
        for loc in locs:
            for path in sorted(Path("/usr/share/man", loc).glob("man*/*.gz")):
                if taken >= per_script:
                    break
                text = _read(path)
                if not text.strip():
                    continue
                pieces = list(windows(text))[:1] or [text]
                yield Sample(script, "manual", str(path), pieces[0])
                taken += 1


def certificates(count: int = 24) -> Iterator[Sample]:
    """PEM certificates, alone and a few together (base64 blocks between armour lines)."""
    pems = sorted(Path("/etc/ssl/certs").glob("*.pem"))
    for i in range(min(count, len(pems))):
        text = "".join(_read(p) for p in pems[i * 3 : i * 3 + 1 + i % 3])
        if text:
            yield Sample("latin", "certificate", str(pems[i * 3]), text.strip())


def scripts_present() -> list[str]:
    return [s for s in SCRIPTS if len(messages(s)) >= 50]
