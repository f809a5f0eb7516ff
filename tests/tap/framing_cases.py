"""The generated corpus of request framings for the differential suite (issue 22, item 5).

Every case is raw bytes a client writes on one connection. Its request targets are unique to
it (``/c{id}/r{k}``, a request hidden in a body ``/c{id}/smuggled``, the closing sentinel
``/c{id}/end``), so whatever reaches the upstream is attributed to its case by URL alone (a
target that cannot carry the tag, ``*``, has an ``X-Case: {id}`` header instead).

Two families:

* **header product**: one request whose framing is built from the factors below (Content-Length
  x Transfer-Encoding x Connection x version x Host x header-line form x body payload). Not the
  full product (about 10^6): the baseline, every single-factor variant of it, the pairs that
  interact in framing (CL x TE, Connection x framing, Connection x version, version x Host,
  line form x framing), and a seeded random sample of the full product.
* **structural**: pipelining (in one write, split across writes, byte by byte), chunk-size,
  chunk-extension and trailer tricks, bare LF / bare CR, NUL, obs-fold, Transfer-Encoding
  obfuscations in CL.TE and TE.CL layouts, request-line and target forms, Expect, Upgrade,
  heads near the size limit, and early closes (the client goes before its body ends).

Unless a case ends with an early close, its last write is a sentinel
``GET /c{id}/end HTTP/1.1`` with ``Connection: close``: a proxy that got that far answers it
and closes, which ends the case deterministically.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass

SEED = 22  # issue 22

HOST = b"Host: example"


@dataclass(frozen=True)
class Case:
    id: int
    name: str
    writes: tuple[bytes, ...]
    # None: read until the proxy closes (or the bounded idle wait); n: read until n responses
    # arrived (bounded), then close the connection without reading more (early close).
    close_after: int | None = None

    @property
    def tag(self) -> str:
        return f"{self.id:04d}"

    @property
    def raw(self) -> bytes:
        return b"".join(self.writes)


def _p(cid: int, what: str) -> bytes:
    return f"/c{cid:04d}/{what}".encode()


def smuggled(cid: int) -> bytes:
    """A complete request hidden where a body should be."""
    return b"GET " + _p(cid, "smuggled") + b" HTTP/1.1\r\n" + HOST + b"\r\n\r\n"


def smuggled_prefix(cid: int) -> bytes:
    """A request head whose body is whatever comes next on the connection (the next client's
    request, on a pooled upstream connection)."""
    return (
        b"POST " + _p(cid, "smuggled") + b" HTTP/1.1\r\n" + HOST + b"\r\nContent-Length: 60\r\n\r\n"
    )


def sentinel(cid: int) -> bytes:
    return b"GET " + _p(cid, "end") + b" HTTP/1.1\r\n" + HOST + b"\r\nConnection: close\r\n\r\n"


def get(cid: int, k: int, extra: bytes = b"") -> bytes:
    return b"GET " + _p(cid, f"r{k}") + b" HTTP/1.1\r\n" + HOST + b"\r\n" + extra + b"\r\n"


def post(cid: int, k: int, body: bytes, extra: bytes = b"") -> bytes:
    return (
        b"POST "
        + _p(cid, f"r{k}")
        + b" HTTP/1.1\r\n"
        + HOST
        + b"\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\n"
        + extra
        + b"\r\n"
        + body
    )


def chunked(data: bytes) -> bytes:
    return (f"{len(data):x}\r\n".encode() + data + b"\r\n" if data else b"") + b"0\r\n\r\n"


# --- the header-product factors ------------------------------------------------------------
# Each Content-Length option maps the length L of the bytes that follow the head (and the
# body itself, for the TE.CL "first chunk line" length) to the header values sent.


def _cl_first_line(length: int, body: bytes) -> list[bytes]:
    cut = body.find(b"\r\n")
    return [str(cut + 2 if cut >= 0 else length).encode()]


CL_OPTIONS: dict[str, Callable[[int, bytes], list[bytes]]] = {
    "none": lambda n, b: [],
    "valid": lambda n, b: [str(n).encode()],
    "short": lambda n, b: [str(max(n - 3, 0)).encode()],
    "long": lambda n, b: [str(n + 3).encode()],
    "dup_equal": lambda n, b: [str(n).encode(), str(n).encode()],
    "dup_different": lambda n, b: [str(n).encode(), str(n + 1).encode()],
    "list": lambda n, b: [f"{n}, {n}".encode()],
    "plus_sign": lambda n, b: [f"+{n}".encode()],
    "minus_sign": lambda n, b: [f"-{n}".encode()],
    "hex": lambda n, b: [f"0x{n:x}".encode()],
    "leading_zeros": lambda n, b: [f"000{n}".encode()],
    "whitespace": lambda n, b: [f" {n}\t".encode()],
    "inner_space": lambda n, b: [f"{n} 0".encode()],
    "first_chunk_line": _cl_first_line,
}

# (Transfer-Encoding header values, whether the body is sent chunked)
TE_OPTIONS: dict[str, tuple[list[bytes], bool]] = {
    "none": ([], False),
    "chunked": ([b"chunked"], True),
    "Chunked": ([b"Chunked"], True),
    "space_chunked": ([b" chunked"], True),
    "chunked_identity": ([b"chunked, identity"], True),
    "gzip_chunked": ([b"gzip, chunked"], True),
    "xchunked": ([b"xchunked"], True),
    "duplicated": ([b"chunked", b"chunked"], True),
    "identity": ([b"identity"], False),
}

CONN_OPTIONS: dict[str, list[bytes]] = {
    "none": [],
    "close": [b"Connection: close"],
    "keep_alive": [b"Connection: keep-alive"],
    "content_length": [b"Connection: content-length"],
    "transfer_encoding": [b"Connection: transfer-encoding"],
    "host": [b"Connection: host"],
    "close_content_length": [b"Connection: close, content-length"],
    "x_foo": [b"Connection: x-foo", b"X-Foo: bar"],
}

VERSIONS: dict[str, bytes | None] = {
    "1.1": b"HTTP/1.1",
    "1.0": b"HTTP/1.0",
    "0.9": b"HTTP/0.9",
    "missing": None,
    "2.0": b"HTTP/2.0",
    "1.2": b"HTTP/1.2",
    "lowercase": b"http/1.1",
    "rtsp": b"RTSP/1.0",
}

HOSTS: dict[str, list[bytes]] = {
    "one": [HOST],
    "none": [],
    "two": [b"Host: a.example", b"Host: b.example"],
    "empty": [b"Host:"],
    "port": [b"Host: example:8080"],
    "invalid_chars": [b"Host: ex ample/<x>"],
    "ipv6": [b"Host: [::1]:8080"],
}

# How the framing header lines (Content-Length, Transfer-Encoding) are written.
FORMS: dict[str, Callable[[bytes, bytes], bytes]] = {
    "normal": lambda name, value: name + b": " + value,
    "space_before_colon": lambda name, value: name + b" : " + value,
    "tab_before_value": lambda name, value: name + b":\t" + value,
    "upper": lambda name, value: name.upper() + b": " + value,
    "lower": lambda name, value: name.lower() + b": " + value,
}

# What follows the head: a plain body, a request hidden inside the body, or a request after
# the (chunked or short) body that a CL-honouring parser still counts as body (CL.TE).
PAYLOADS = ("plain", "inner", "after")

FACTORS: dict[str, tuple[str, ...]] = {
    "cl": tuple(CL_OPTIONS),
    "te": tuple(TE_OPTIONS),
    "conn": tuple(CONN_OPTIONS),
    "version": tuple(VERSIONS),
    "host": tuple(HOSTS),
    "form": tuple(FORMS),
    "payload": PAYLOADS,
}
BASELINE = {
    "cl": "valid",
    "te": "none",
    "conn": "none",
    "version": "1.1",
    "host": "one",
    "form": "normal",
    "payload": "plain",
}


def product_request(cid: int, f: dict[str, str]) -> bytes:
    te_values, is_chunked = TE_OPTIONS[f["te"]]
    data = smuggled(cid) if f["payload"] == "inner" else b"hello world"
    body = chunked(data) if is_chunked else data
    if f["payload"] == "after":
        body += smuggled(cid)
    form = FORMS[f["form"]]
    lines = list(HOSTS[f["host"]])
    lines += [form(b"Content-Length", v) for v in CL_OPTIONS[f["cl"]](len(body), body)]
    lines += [form(b"Transfer-Encoding", v) for v in te_values]
    lines += CONN_OPTIONS[f["conn"]]
    version = VERSIONS[f["version"]]
    line = b"POST " + _p(cid, "r0") + (b" " + version if version is not None else b"")
    return line + b"\r\n" + b"".join(x + b"\r\n" for x in lines) + b"\r\n" + body


def _product_factor_sets() -> list[dict[str, str]]:
    seen: set[tuple[str, ...]] = set()
    out: list[dict[str, str]] = []

    def add(**over: str) -> None:
        f = {**BASELINE, **over}
        key = tuple(f[k] for k in FACTORS)
        if key not in seen:
            seen.add(key)
            out.append(f)

    add()
    for factor, options in FACTORS.items():  # every single-factor variant
        for option in options:
            add(**{factor: option})
    payloads = itertools.cycle(PAYLOADS)
    for cl, te in itertools.product(CL_OPTIONS, TE_OPTIONS):  # the framing pairs
        add(cl=cl, te=te, payload=next(payloads))
    for conn, (cl, te) in itertools.product(
        CONN_OPTIONS, [("valid", "none"), ("none", "chunked"), ("valid", "chunked")]
    ):
        add(conn=conn, cl=cl, te=te, payload="inner")
    for conn, version in itertools.product(CONN_OPTIONS, VERSIONS):
        add(conn=conn, version=version)
    for version, host in itertools.product(VERSIONS, HOSTS):
        add(version=version, host=host)
    for form, (cl, te) in itertools.product(
        FORMS, [("valid", "none"), ("none", "chunked"), ("valid", "chunked"), ("dup_equal", "none")]
    ):
        add(form=form, cl=cl, te=te, payload="after")
    rng = random.Random(SEED)
    target = len(out) + 110
    while len(out) < target:  # a seeded sample of the full product
        add(**{factor: rng.choice(options) for factor, options in FACTORS.items()})
    return out


# --- structural cases ----------------------------------------------------------------------
# Each builder takes the case id and returns (writes, close_after); the sentinel is added after.

Builder = Callable[[int], tuple[list[bytes], int | None]]


def _one(raw: Callable[[int], bytes]) -> Builder:
    return lambda c: ([raw(c)], None)


def _chunk_case(body: Callable[[int], bytes]) -> Builder:
    def build(c: int) -> tuple[list[bytes], int | None]:
        head = (
            b"POST "
            + _p(c, "r0")
            + b" HTTP/1.1\r\n"
            + HOST
            + b"\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        return [head + body(c)], None

    return build


def _te_obfuscations() -> dict[str, bytes]:
    """Transfer-Encoding header lines as request-smuggling scanners mutate them."""
    return {
        "plain": b"Transfer-Encoding: chunked",
        "space_colon": b"Transfer-Encoding : chunked",
        "tab_colon": b"Transfer-Encoding\t: chunked",
        "tab_value": b"Transfer-Encoding:\tchunked",
        "no_space": b"Transfer-Encoding:chunked",
        "vtab": b"Transfer-Encoding:\x0bchunked",
        "ff": b"Transfer-Encoding:\x0cchunked",
        "quoted": b'Transfer-Encoding: "chunked"',
        "semicolon": b"Transfer-Encoding: chunked;",
        "trailing_comma": b"Transfer-Encoding: chunked,",
        "leading_comma": b"Transfer-Encoding: ,chunked",
        "x_then_chunked": b"Transfer-Encoding: x\r\nTransfer-Encoding: chunked",
        "chunked_then_x": b"Transfer-Encoding: chunked\r\nTransfer-Encoding: x",
        "underscore_name": b"Transfer_Encoding: chunked",
        "leading_space_line": b"X: y\r\n Transfer-Encoding: chunked",
        "bare_lf_before": b"X: y\nTransfer-Encoding: chunked",
        "name_lf": b"Transfer-Encoding\n: chunked",
        "high_byte": b"Transfer-Encoding: \xffchunked",
        "null_value": b"Transfer-Encoding: chunked\x00",
        "cased_name": b"tRaNsFeR-eNcOdInG: cHuNkEd",
        "chunkedx": b"Transfer-Encoding: chunkedx",
        "identity_fold": b"Transfer-Encoding: identity\r\n chunked",
    }


def _cl_te(te_line: bytes) -> Builder:
    """CL.TE: Content-Length covers a request after the chunked terminator."""

    def build(c: int) -> tuple[list[bytes], int | None]:
        body = b"0\r\n\r\n" + smuggled(c)
        head = (
            b"POST "
            + _p(c, "r0")
            + b" HTTP/1.1\r\n"
            + HOST
            + b"\r\nContent-Length: "
            + str(len(body)).encode()
            + b"\r\n"
            + te_line
            + b"\r\n\r\n"
        )
        return [head + body], None

    return build


def _te_cl(te_line: bytes) -> Builder:
    """TE.CL: Content-Length covers only the first chunk-size line; the chunk data is a
    request."""

    def build(c: int) -> tuple[list[bytes], int | None]:
        inner = smuggled(c)
        body = f"{len(inner):x}\r\n".encode() + inner + b"\r\n0\r\n\r\n"
        first = str(len(f"{len(inner):x}\r\n")).encode()
        head = (
            b"POST "
            + _p(c, "r0")
            + b" HTTP/1.1\r\n"
            + HOST
            + b"\r\nContent-Length: "
            + first
            + b"\r\n"
            + te_line
            + b"\r\n\r\n"
        )
        return [head + body], None

    return build


def _te_only(te_line: bytes) -> Builder:
    """TE alone, a request after the chunked terminator (TE.TE: one parser sees it as the
    next request, one that ignores the obfuscated header sees it as the body of nothing)."""

    def build(c: int) -> tuple[list[bytes], int | None]:
        head = b"POST " + _p(c, "r0") + b" HTTP/1.1\r\n" + HOST + b"\r\n" + te_line + b"\r\n\r\n"
        return [head + b"5\r\nhello\r\n0\r\n\r\n" + smuggled(c)], None

    return build


def _split(raw: Callable[[int], bytes], cuts: Callable[[bytes], list[int]]) -> Builder:
    def build(c: int) -> tuple[list[bytes], int | None]:
        data = raw(c)
        points = [0, *sorted(set(p for p in cuts(data) if 0 < p < len(data))), len(data)]
        return [data[a:b] for a, b in itertools.pairwise(points)], None

    return build


def _structural() -> dict[str, Builder]:
    b: dict[str, Builder] = {}
    body = b"hello world"
    # pipelining: several requests in one write
    b["pipe_two_gets"] = _one(lambda c: get(c, 0) + get(c, 1))
    b["pipe_three_mixed"] = _one(lambda c: get(c, 0) + post(c, 1, body) + get(c, 2))
    b["pipe_five_gets"] = _one(lambda c: b"".join(get(c, k) for k in range(5)))
    b["pipe_two_posts"] = _one(lambda c: post(c, 0, b"a" * 10) + post(c, 1, b"b" * 20))
    b["pipe_get_with_body_cl"] = _one(lambda c: get(c, 0, b"Content-Length: 5\r\n") + b"hello")
    b["pipe_chunked_then_get"] = _one(
        lambda c: (
            get(c, 0)[:-2].replace(b"GET ", b"POST ", 1)
            + b"Transfer-Encoding: chunked\r\n\r\n"
            + chunked(body)
            + get(c, 1)
        )
    )
    b["pipe_twenty_gets"] = _one(lambda c: b"".join(get(c, k) for k in range(20)))
    b["pipe_leading_crlf"] = _one(lambda c: b"\r\n\r\n" + get(c, 0))
    b["pipe_crlf_between"] = _one(lambda c: get(c, 0) + b"\r\n" + get(c, 1))
    b["pipe_keepalive_10"] = _one(
        lambda c: get(c, 0, b"Connection: keep-alive\r\n") + get(c, 1, b"Connection: close\r\n")
    )
    b["pipe_http10_then_get"] = _one(
        lambda c: b"GET " + _p(c, "r0") + b" HTTP/1.0\r\n" + HOST + b"\r\n\r\n" + get(c, 1)
    )
    b["pipe_http10_keepalive_then_get"] = _one(
        lambda c: (
            b"GET "
            + _p(c, "r0")
            + b" HTTP/1.0\r\n"
            + HOST
            + b"\r\nConnection: keep-alive\r\n\r\n"
            + get(c, 1)
        )
    )
    # pipelining split across writes
    b["split_head_mid_line"] = _split(lambda c: get(c, 0) + get(c, 1), lambda d: [7, 20])
    b["split_between_cr_lf"] = _split(lambda c: get(c, 0), lambda d: [d.find(b"\r\n") + 1])
    b["split_before_final_crlf"] = _split(lambda c: get(c, 0), lambda d: [len(d) - 2, len(d) - 1])
    b["split_body"] = _split(lambda c: post(c, 0, b"x" * 40), lambda d: [len(d) - 30, len(d) - 5])
    b["split_second_request"] = _split(
        lambda c: get(c, 0) + get(c, 1) + get(c, 2), lambda d: [len(d) // 2, len(d) * 3 // 4]
    )
    b["split_chunks"] = _split(
        lambda c: (
            post(c, 0, b"").replace(b"Content-Length: 0", b"Transfer-Encoding: chunked")
            + b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
        ),
        lambda d: [len(d) - 20, len(d) - 12, len(d) - 3],
    )
    b["byte_at_a_time"] = _split(lambda c: post(c, 0, b"hi"), lambda d: list(range(1, len(d))))
    b["split_chunked_then_get"] = _split(
        lambda c: (
            post(c, 0, b"").replace(b"Content-Length: 0", b"Transfer-Encoding: chunked")
            + chunked(body)
            + get(c, 1)
        ),
        lambda d: [d.find(b"GET ")],
    )
    # chunk-size, extension and trailer tricks
    for name, chunks in {
        "ext_plain": lambda c: b"5;ext=1\r\nhello\r\n0\r\n\r\n",
        "ext_quoted": lambda c: b'5;ext="a b"\r\nhello\r\n0\r\n\r\n',
        "ext_empty": lambda c: b"5;\r\nhello\r\n0\r\n\r\n",
        "ext_space_before": lambda c: b"5 ;ext\r\nhello\r\n0\r\n\r\n",
        "ext_bare_lf": lambda c: b"5;ext\nhello\r\n0\r\n\r\n",
        "ext_long": lambda c: b"5;" + b"e" * 4000 + b"\r\nhello\r\n0\r\n\r\n",
        "ext_hides_request": lambda c: (
            b"5;" + smuggled(c).replace(b"\r\n", b" ") + b"\r\nhello\r\n0\r\n\r\n"
        ),
        "size_upper_hex": lambda c: b"B\r\nhello world\r\n0\r\n\r\n",
        "size_leading_zeros": lambda c: b"0005\r\nhello\r\n0\r\n\r\n",
        "size_0x": lambda c: b"0x5\r\nhello\r\n0\r\n\r\n",
        "size_negative": lambda c: b"-5\r\nhello\r\n0\r\n\r\n",
        "size_trailing_space": lambda c: b"5 \r\nhello\r\n0\r\n\r\n",
        "size_overflow": lambda c: b"ffffffffffffffffffff\r\nhello\r\n0\r\n\r\n",
        "size_too_small": lambda c: b"3\r\nhello\r\n0\r\n\r\n",
        "size_too_large": lambda c: b"8\r\nhello\r\n0\r\n\r\n",
        "data_no_crlf": lambda c: b"5\r\nhello0\r\n\r\n",
        "bare_lf_chunks": lambda c: b"5\nhello\n0\n\n",
        "bare_cr_chunks": lambda c: b"5\rhello\r0\r\r",
        "last_chunk_ext": lambda c: b"5\r\nhello\r\n0;x=y\r\n\r\n",
        "last_chunk_00": lambda c: b"5\r\nhello\r\n00\r\n\r\n",
        "trailer": lambda c: b"5\r\nhello\r\n0\r\nX-Trailer: 1\r\n\r\n",
        "trailer_cl": lambda c: b"5\r\nhello\r\n0\r\nContent-Length: 50\r\n\r\n",
        "trailer_te": lambda c: b"5\r\nhello\r\n0\r\nTransfer-Encoding: chunked\r\n\r\n",
        "trailer_obs_fold": lambda c: b"5\r\nhello\r\n0\r\nX-T: 1\r\n folded\r\n\r\n",
        "trailer_hides_request": lambda c: b"5\r\nhello\r\n0\r\n" + smuggled(c),
        "trailer_no_colon": lambda c: b"5\r\nhello\r\n0\r\nnocolon\r\n\r\n",
        "missing_last_crlf": lambda c: b"5\r\nhello\r\n0\r\n" + get(c, 1),
        "smuggle_after_terminator": lambda c: b"5\r\nhello\r\n0\r\n\r\n" + smuggled(c),
        "smuggle_prefix_after": lambda c: b"0\r\n\r\n" + smuggled_prefix(c),
        "nul_in_size": lambda c: b"5\x00\r\nhello\r\n0\r\n\r\n",
    }.items():
        b[f"chunk_{name}"] = _chunk_case(chunks)
    # bare LF / CR, NUL, obs-fold, odd header lines
    for name, raw in {
        "bare_lf_request_line": lambda c: (
            b"GET " + _p(c, "r0") + b" HTTP/1.1\n" + HOST + b"\r\n\r\n"
        ),
        "bare_lf_everywhere": lambda c: b"GET " + _p(c, "r0") + b" HTTP/1.1\n" + HOST + b"\n\n",
        "bare_lf_header": lambda c: (
            b"GET " + _p(c, "r0") + b" HTTP/1.1\r\n" + HOST + b"\nX: y\r\n\r\n"
        ),
        "bare_cr_header": lambda c: (
            b"GET " + _p(c, "r0") + b" HTTP/1.1\r\n" + HOST + b"\rX: y\r\n\r\n"
        ),
        "bare_cr_in_value": lambda c: get(c, 0, b"X: a\rb\r\n"),
        "cr_cr_lf": lambda c: b"GET " + _p(c, "r0") + b" HTTP/1.1\r\r\n" + HOST + b"\r\n\r\n",
        "lf_crlf_end": lambda c: b"GET " + _p(c, "r0") + b" HTTP/1.1\r\n" + HOST + b"\r\n\n",
        "bare_lf_cl_smuggle": lambda c: (
            b"POST "
            + _p(c, "r0")
            + b" HTTP/1.1\r\n"
            + HOST
            + b"\r\nX: y\nContent-Length: "
            + str(len(smuggled(c))).encode()
            + b"\r\n\r\n"
            + smuggled(c)
        ),
        "nul_in_value": lambda c: get(c, 0, b"X: a\x00b\r\n"),
        "nul_in_name": lambda c: get(c, 0, b"X\x00Y: b\r\n"),
        "nul_in_target": lambda c: (
            b"GET " + _p(c, "r0") + b"\x00x HTTP/1.1\r\n" + HOST + b"\r\n\r\n"
        ),
        "nul_in_method": lambda c: (
            b"G\x00ET " + _p(c, "r0") + b" HTTP/1.1\r\n" + HOST + b"\r\n\r\n"
        ),
        "nul_before_request": lambda c: b"\x00" + get(c, 0),
        "obs_fold_header": lambda c: get(c, 0, b"X-Foo: a\r\n b\r\n"),
        "obs_fold_cl": lambda c: post(c, 0, b"hello").replace(
            b"Content-Length: 5\r\n", b"Content-Length:\r\n 5\r\n"
        ),
        "obs_fold_cl_digits": lambda c: post(c, 0, b"hello" * 10).replace(
            b"Content-Length: 50\r\n", b"Content-Length: 5\r\n 0\r\n"
        ),
        "obs_fold_host": lambda c: (
            b"GET " + _p(c, "r0") + b" HTTP/1.1\r\nHost: a\r\n .example\r\n\r\n"
        ),
        "obs_fold_tab": lambda c: get(c, 0, b"X-Foo: a\r\n\tb\r\n"),
        "obs_fold_first_line": lambda c: (
            b"GET " + _p(c, "r0") + b" HTTP/1.1\r\n X: y\r\n" + HOST + b"\r\n\r\n"
        ),
        "header_no_colon": lambda c: get(c, 0, b"NoColonHere\r\n"),
        "header_empty_name": lambda c: get(c, 0, b": value\r\n"),
        "header_space_in_name": lambda c: get(c, 0, b"X Y: z\r\n"),
        "header_high_bytes": lambda c: get(c, 0, b"X: \xc3\xa9\xff\r\n"),
        "header_del_char": lambda c: get(c, 0, b"X: a\x7fb\r\n"),
        "header_ctl_in_value": lambda c: get(c, 0, b"X: a\x01b\r\n"),
        "host_space_before_colon": lambda c: (
            b"GET " + _p(c, "r0") + b" HTTP/1.1\r\nHost : example\r\n\r\n"
        ),
        "host_and_host_underscore": lambda c: get(c, 0, b"Host_: other\r\n"),
        "cl_underscore": lambda c: (
            b"POST "
            + _p(c, "r0")
            + b" HTTP/1.1\r\n"
            + HOST
            + b"\r\nContent_Length: "
            + str(len(smuggled(c))).encode()
            + b"\r\n\r\n"
            + smuggled(c)
        ),
    }.items():
        b[name] = _one(raw)
    # TE obfuscations in the three classic layouts (CL.TE, TE.CL, TE.TE)
    for name, line in _te_obfuscations().items():
        b[f"cl_te_{name}"] = _cl_te(line)
        b[f"te_cl_{name}"] = _te_cl(line)
        b[f"te_te_{name}"] = _te_only(line)
    # smuggling through Connection (the case) and the swallowing prefix
    for conn in (
        b"content-length",
        b"Content-Length",
        b"close, content-length",
        b"keep-alive, content-length",
        b"transfer-encoding",
        b"host",
        b"expect",
    ):
        b[f"connection_{conn.decode().replace(', ', '_').replace('-', '_').lower()}_smuggle"] = (
            _one(lambda c, conn=conn: post(c, 0, smuggled(c), b"Connection: " + conn + b"\r\n"))
        )
        b[f"connection_{conn.decode().replace(', ', '_').replace('-', '_').lower()}_prefix"] = _one(
            lambda c, conn=conn: post(c, 0, smuggled_prefix(c), b"Connection: " + conn + b"\r\n")
        )
    b["connection_te_chunked_smuggle"] = _one(
        lambda c: (
            post(c, 0, b"").replace(
                b"Content-Length: 0\r\n",
                b"Transfer-Encoding: chunked\r\nConnection: transfer-encoding\r\n",
            )
            + chunked(smuggled(c))
            + smuggled(c)
        )
    )
    b["connection_two_headers"] = _one(
        lambda c: post(
            c, 0, smuggled(c), b"Connection: keep-alive\r\nConnection: content-length\r\n"
        )
    )
    b["body_hides_request"] = _one(lambda c: post(c, 0, smuggled(c)))
    b["body_hides_prefix"] = _one(lambda c: post(c, 0, smuggled_prefix(c)))
    b["get_body_hides_request"] = _one(
        lambda c: (
            get(c, 0, b"Content-Length: " + str(len(smuggled(c))).encode() + b"\r\n") + smuggled(c)
        )
    )
    b["cl_zero_then_request"] = _one(lambda c: post(c, 0, b"") + smuggled(c))
    b["cl_short_smuggle"] = _one(
        lambda c: (
            post(c, 0, b"hello").replace(b"Content-Length: 5", b"Content-Length: 2") + smuggled(c)
        )
    )
    # request line and target forms
    for name, raw in {
        "absolute_form": lambda c: (
            b"GET http://evil.example" + _p(c, "r0") + b" HTTP/1.1\r\n" + HOST + b"\r\n\r\n"
        ),
        "authority_form_connect": lambda c: (
            b"CONNECT example:443 HTTP/1.1\r\n" + HOST + b"\r\n\r\n"
        ),
        "asterisk_options": lambda c: (
            b"OPTIONS * HTTP/1.1\r\n" + HOST + b"\r\nX-Case: %04d\r\n\r\n" % c
        ),
        "double_space": lambda c: b"GET  " + _p(c, "r0") + b" HTTP/1.1\r\n" + HOST + b"\r\n\r\n",
        "tab_separator": lambda c: b"GET\t" + _p(c, "r0") + b"\tHTTP/1.1\r\n" + HOST + b"\r\n\r\n",
        "trailing_space": lambda c: b"GET " + _p(c, "r0") + b" HTTP/1.1 \r\n" + HOST + b"\r\n\r\n",
        "fragment": lambda c: b"GET " + _p(c, "r0") + b"#frag HTTP/1.1\r\n" + HOST + b"\r\n\r\n",
        "query": lambda c: b"GET " + _p(c, "r0") + b"?a=1&b=%20 HTTP/1.1\r\n" + HOST + b"\r\n\r\n",
        "lowercase_method": lambda c: b"get " + _p(c, "r0") + b" HTTP/1.1\r\n" + HOST + b"\r\n\r\n",
        "unknown_method": lambda c: b"FROB " + _p(c, "r0") + b" HTTP/1.1\r\n" + HOST + b"\r\n\r\n",
        "no_version_two_hosts": lambda c: b"GET " + _p(c, "r0") + b"\r\nHost: a\r\nHost: b\r\n\r\n",
        "http09_bare": lambda c: b"GET " + _p(c, "r0") + b"\r\n",
        "http10_no_host": lambda c: b"GET " + _p(c, "r0") + b" HTTP/1.0\r\n\r\n",
        "http10_chunked": lambda c: (
            b"POST "
            + _p(c, "r0")
            + b" HTTP/1.0\r\n"
            + HOST
            + b"\r\nTransfer-Encoding: chunked\r\n\r\n"
            + chunked(b"hello")
            + smuggled(c)
        ),
        "version_digits_long": lambda c: (
            b"GET " + _p(c, "r0") + b" HTTP/01.1\r\n" + HOST + b"\r\n\r\n"
        ),
        "expect_continue": lambda c: post(c, 0, b"hello", b"Expect: 100-continue\r\n"),
        "expect_unknown": lambda c: post(c, 0, b"hello", b"Expect: something\r\n"),
        "upgrade_websocket": lambda c: (
            get(c, 0, b"Connection: Upgrade\r\nUpgrade: websocket\r\n") + smuggled(c)
        ),
        "upgrade_h2c": lambda c: get(
            c,
            0,
            b"Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
            b"HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n",
        ),
        "h2_preface": lambda c: b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        # paths nginx refuses once percent-decoded (issue 31: the tap forwarded them)
        **{
            f"target_{label}": (
                lambda c, t=tail: b"GET " + _p(c, "r0") + t + b" HTTP/1.1\r\n" + HOST + b"\r\n\r\n"
            )
            for label, tail in (
                ("pct00", b"%00"),
                ("pct00_mid", b"%00x"),
                ("pct_bad_hex", b"%zz"),
                ("pct_short", b"%2"),
                ("pct_trailing", b"%"),
                ("dots_above_root", b"/../../../x"),
                ("pct_dots_above_root", b"/%2e%2e/%2E%2E/.%2e/x"),
                ("pct_slash_dots", b"%2f..%2f..%2f..%2fx"),
                ("dots_then_pct00", b"/..%00"),
                ("dots_within", b"/../x"),
                ("query_pct00", b"?q=%00"),
                ("query_bad_pct", b"?q=%zz"),
                ("pct_high_byte", b"%ff%c0%ae"),
            )
        },
        "head_60k": lambda c: get(c, 0, b"X-Big: " + b"a" * 60000 + b"\r\n"),
        "head_70k": lambda c: get(c, 0, b"X-Big: " + b"a" * 70000 + b"\r\n"),
        "many_headers": lambda c: get(c, 0, b"".join(b"X-%d: v\r\n" % i for i in range(90))),
    }.items():
        b[f"line_{name}"] = _one(raw)

    # early closes: the client goes before its request ends (after the responses it is owed)
    def early(raw: Callable[[int], bytes], owed: int) -> Builder:
        return lambda c: ([raw(c)], owed)

    def chunk_head(c: int) -> bytes:
        return post(c, 0, b"").replace(b"Content-Length: 0", b"Transfer-Encoding: chunked")

    b["early_close_cl_body"] = early(lambda c: post(c, 0, b"x" * 100)[:-95], 0)
    b["early_close_chunked_body"] = early(lambda c: chunk_head(c) + b"5\r\nhello\r\n", 0)
    b["early_close_mid_head"] = early(lambda c: get(c, 0)[:-4], 0)
    b["early_close_after_head"] = early(lambda c: post(c, 0, b"x" * 50)[:-50], 0)
    b["early_close_mid_chunk_size"] = early(lambda c: chunk_head(c) + b"5\r\nhello\r\n1", 0)
    b["early_close_second_request"] = early(lambda c: get(c, 0) + post(c, 1, b"x" * 100)[:-60], 1)
    b["early_close_smuggle_partial"] = early(
        lambda c: post(c, 0, smuggled(c) * 2)[: -len(smuggled(c))], 0
    )
    b["early_close_connection_cl"] = early(
        lambda c: post(c, 0, smuggled(c) + b"x" * 40, b"Connection: content-length\r\n")[:-40],
        0,
    )
    return b


def build_corpus() -> list[Case]:
    """The whole corpus, deterministic (seeded): the same bytes on every run."""
    cases: list[Case] = []
    for f in _product_factor_sets():
        cid = len(cases) + 1
        name = "product:" + ",".join(f"{k}={f[k]}" for k in FACTORS)
        cases.append(Case(cid, name, (product_request(cid, f), sentinel(cid))))
    for name, build in _structural().items():
        cid = len(cases) + 1
        writes, close_after = build(cid)
        if close_after is None:
            writes = [*writes, sentinel(cid)]
        cases.append(Case(cid, name, tuple(writes), close_after))
    return cases
