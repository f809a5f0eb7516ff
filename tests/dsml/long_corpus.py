"""A clean long-text corpus built at test time from text nobody on this project wrote (issue 26).

Sources, all on the machine that runs the tests: the Python standard library's sources (not its
test suites, which are full of deliberately malformed strings: escaped byte vectors, U+FFFD,
pickles) and its test data (tables of numbers in ``decimaltestdata``, multilingual
``cjkencodings``, e-mail messages), the sources (test suites left out likewise), licences and
docs of the packages installed in the virtual environment,
``/usr/share/common-licenses``, Debian changelogs (``/usr/share/doc/*/changelog*.gz``: dated
lists, log-like), man pages (``/usr/share/man``, roff source) and the dpkg log. Each file is cut
at line boundaries into windows of at least ``MIN_TOKENS`` tokens, estimated as the sidecar
estimates them (:func:`exporter.samplers.length.estimate_tokens`), and each kind is capped so
that no one kind dominates. Deterministic: files sorted by path, windows taken in order.
"""

from __future__ import annotations

import gzip
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from exporter.samplers.length import CHARS_PER_TOKEN, estimate_tokens

MIN_TOKENS = 4000
WINDOW_CHARS = MIN_TOKENS * CHARS_PER_TOKEN + 400
ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class LongText:
    kind: str
    source: str  # path of the file it came from, and the window's index
    text: str


_BINARY = bytes(c for c in range(32) if c not in (9, 10, 12, 13))


def _read(path: Path) -> str:
    """A clean text file's text: valid UTF-8 with no control byte but tab, newline, form feed
    and carriage return (the usual test for a text file) and no U+FFFD (a file that holds one
    was already damaged by a decoder); anything else is "" (not clean text)."""
    try:
        data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        if len(data.translate(None, _BINARY)) != len(data):
            return ""
        text = data.decode("utf-8")
    except (OSError, EOFError, gzip.BadGzipFile, UnicodeDecodeError):
        return ""
    return "" if "\ufffd" in text else text


def windows(text: str) -> Iterator[str]:
    """Consecutive windows of whole lines, each of at least ``MIN_TOKENS`` estimated tokens."""
    start = 0
    while len(text) - start >= WINDOW_CHARS:
        end = text.find("\n", start + WINDOW_CHARS)
        end = len(text) if end < 0 else end + 1
        piece = text[start:end]
        if estimate_tokens(piece) >= MIN_TOKENS:
            yield piece
        start = end


def _files(kind: str) -> list[Path]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    site = Path(sysconfig.get_paths()["purelib"])
    if kind == "stdlib_code":
        return sorted(
            p for p in stdlib.rglob("*.py") if not {"site-packages", "test", "tests"} & set(p.parts)
        )
    if kind == "stdlib_data":
        test = stdlib / "test"
        return sorted(
            p
            for sub in ("decimaltestdata", "cjkencodings", "test_email")
            for p in (test / sub).rglob("*")
            if p.is_file() and p.suffix not in (".py", ".pyc")
        )
    if kind == "package_code":
        return sorted(p for p in site.rglob("*.py") if not {"test", "tests"} & set(p.parts))
    if kind == "package_docs":
        return sorted(
            p
            for p in site.rglob("*")
            if p.is_file()
            and (p.suffix in (".txt", ".md", ".rst") or p.name.startswith(("LICENSE", "COPYING")))
        )
    if kind == "licences":
        return sorted(p for p in Path("/usr/share/common-licenses").glob("*") if p.is_file())
    if kind == "changelogs":
        return sorted(Path("/usr/share/doc").glob("*/changelog*.gz"))
    if kind == "man_pages":
        return sorted(Path("/usr/share/man").glob("man*/*.gz"))
    if kind == "logs":
        return [p for p in (Path("/var/log/dpkg.log"),) if p.is_file()]
    raise ValueError(kind)


# windows taken per kind at most, and per file (a big file gives several)
CAPS: dict[str, int] = {
    "stdlib_code": 600,
    "stdlib_data": 150,
    "package_code": 650,
    "package_docs": 150,
    "licences": 20,
    "changelogs": 500,
    "man_pages": 400,
    "logs": 30,
}
PER_FILE = 5


def build() -> list[LongText]:
    out: list[LongText] = []
    for kind, cap in CAPS.items():
        taken = 0
        for path in _files(kind):
            if taken >= cap:
                break
            try:
                if path.suffix != ".gz" and path.stat().st_size < WINDOW_CHARS:
                    continue
            except OSError:
                continue
            for i, piece in enumerate(windows(_read(path))):
                if i >= PER_FILE or taken >= cap:
                    break
                out.append(LongText(kind, f"{path}#{i}", piece))
                taken += 1
    return out
