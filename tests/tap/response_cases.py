"""Generated hostile upstream responses for the response-side differential (issue 31, item 4).

Each :class:`RespCase` is what a misbehaving SGLang answers to one request: a list of writes
(``LATE`` between two of them means "after the proxy's connection has gone idle for a moment",
``ENDLESS`` means "repeat the next piece until the proxy stops reading"). The families are
generated from RFC 9112 §6.3 (message body length: HEAD, 1xx, 204 and 304 have none), §7.1
(chunked coding), §9.3 (persistence) and RFC 9110 §15.2 (1xx), in the shapes of public
response-splitting / desync research (James Kettle's "HTTP Desync Attacks" response queue
poisoning, the HTTP Garden's response cases). Every planted response echoes ``/stolen``: a
client that ever parses one got bytes that were not an answer to its own request.
"""

from __future__ import annotations

from dataclasses import dataclass

LATE = b"\x00LATE"  # marker: pause, then write the rest (the proxy's connection sits idle)
ENDLESS = b"\x00ENDLESS"  # marker: write the following piece again and again
STOLEN = b'{"url":"/stolen"}'
PLANTED = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(STOLEN), STOLEN)
OK_BODY = b'{"ok":true}'


@dataclass(frozen=True)
class RespCase:
    id: int
    name: str
    method: bytes
    writes: tuple[bytes, ...]

    @property
    def endless(self) -> bool:
        return ENDLESS in self.writes


def _ok(extra_headers: bytes = b"", body: bytes = OK_BODY) -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" % (len(body), extra_headers, body)


def _families() -> list[tuple[str, bytes, tuple[bytes, ...]]]:
    out: list[tuple[str, bytes, tuple[bytes, ...]]] = []
    add = out.append
    chunked_head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    # HEAD answered with a body (RFC 9112 §6.3: a HEAD response never has one)
    for split in (False, True):
        tag = "_split" if split else ""
        cl_head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(PLANTED)
        add((f"head_cl_body{tag}", b"HEAD", (cl_head, PLANTED) if split else (cl_head + PLANTED,)))
        body = b"%x\r\n%s\r\n0\r\n\r\n" % (len(PLANTED), PLANTED)
        add(
            (
                f"head_chunked_body{tag}",
                b"HEAD",
                (chunked_head, body) if split else (chunked_head + body,),
            )
        )
        add(
            (
                f"head_planted_only{tag}",
                b"HEAD",
                (_ok(body=b""), PLANTED) if split else (_ok(body=b"") + PLANTED,),
            )
        )
    # 204 / 304 with a body
    for status in (b"204 No Content", b"304 Not Modified"):
        head = b"HTTP/1.1 %s\r\n\r\n" % status
        add((f"s{status[:3].decode()}_planted", b"GET", (head + PLANTED,)))
        head = b"HTTP/1.1 %s\r\nContent-Length: %d\r\n\r\n" % (status, len(PLANTED))
        add((f"s{status[:3].decode()}_cl_planted", b"GET", (head + PLANTED,)))
    # a second response: glued, split, late (while the pooled connection is idle)
    add(("second_glued", b"GET", (_ok() + PLANTED,)))
    add(("second_split", b"GET", (_ok(), PLANTED)))
    add(("second_late", b"GET", (_ok(), LATE, PLANTED)))
    add(("second_late_head", b"HEAD", (_ok(body=b""), LATE, PLANTED)))
    add(("body_longer_than_length", b"GET", (_ok(body=OK_BODY) + b"x" * 7,)))
    # 1xx: one, a few, a flood, with headers, 101 without an upgrade
    for n in (1, 2, 4, 5, 20, 2000):
        add((f"continue_x{n}", b"GET", (b"HTTP/1.1 100 Continue\r\n\r\n" * n + _ok(),)))
    add(
        ("early_hints_x3", b"GET", (b"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" * 3 + _ok(),))
    )
    add(("continue_flood_split", b"GET", (b"HTTP/1.1 100 Continue\r\n\r\n",) * 50 + (_ok(),)))
    add(("continue_endless", b"GET", (ENDLESS, b"HTTP/1.1 100 Continue\r\n\r\n" * 64)))
    add(("switching_protocols", b"GET", (b"HTTP/1.1 101 Switching Protocols\r\n\r\n" + PLANTED,)))
    # endless / huge heads
    add(
        (
            "endless_headers",
            b"GET",
            (b"HTTP/1.1 200 OK\r\n", ENDLESS, b"X-Pad: " + b"a" * 1000 + b"\r\n"),
        )
    )
    add(("endless_status_line", b"GET", (b"HTTP/1.1 200 ", ENDLESS, b"a" * 4096)))
    add(("endless_header_value", b"GET", (b"HTTP/1.1 200 OK\r\nX-Pad: ", ENDLESS, b"a" * 4096)))
    add(
        (
            "head_200k",
            b"GET",
            (b"HTTP/1.1 200 OK\r\n" + b"X-Pad: " + b"a" * 200_000 + b"\r\n" + _ok()[17:],),
        )
    )
    # errors inside a chunked body: in the head's read, after good chunks, in a later read
    bad_chunks = {
        "bad_size": b"zz\r\nhello\r\n0\r\n\r\n",
        "size_too_long": b"5\r\nhelloEXTRA\r\n0\r\n\r\n",
        "no_crlf_after_data": b"5\r\nhelloX0\r\n\r\n",
        "after_good": b"5\r\nhello\r\nzz\r\n",
        "huge_size": b"ffffffffffffffffff\r\nhello\r\n",
        "negative_size": b"-5\r\nhello\r\n0\r\n\r\n",
    }
    for name, body in bad_chunks.items():
        add((f"chunked_{name}_same_read", b"GET", (chunked_head + body,)))
        add((f"chunked_{name}_later_read", b"GET", (chunked_head, body)))
    add(("chunked_then_planted", b"GET", (chunked_head + b"5\r\nhello\r\n0\r\n\r\n" + PLANTED,)))
    # framing conflicts and garbage
    add(
        (
            "cl_and_te",
            b"GET",
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n"
                + b"5\r\nhello\r\n0\r\n\r\n"
                + PLANTED,
            ),
        )
    )
    add(
        (
            "two_lengths",
            b"GET",
            (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 11\r\n\r\n" + OK_BODY,),
        )
    )
    add(("negative_length", b"GET", (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n" + PLANTED,)))
    add(("garbage_status", b"GET", (b"HTTP/1.1 2x0 OK\r\nContent-Length: 2\r\n\r\nok",)))
    add(("http09_body", b"GET", (b"hello there\r\n\r\n" + PLANTED,)))
    add(("lf_only_head", b"GET", (b"HTTP/1.1 200 OK\nContent-Length: 2\n\nok" + PLANTED,)))
    add(
        (
            "nul_in_header",
            b"GET",
            (b"HTTP/1.1 200 OK\r\nX-A: a\x00b\r\nContent-Length: 2\r\n\r\nok",),
        )
    )
    add(("close_delimited_10", b"GET", (b"HTTP/1.0 200 OK\r\n\r\n" + PLANTED,)))
    return out


def build_response_corpus() -> list[RespCase]:
    return [RespCase(i, name, m, w) for i, (name, m, w) in enumerate(_families(), start=1)]
