"""What a client of the framing corpus received (tests/tap/framing_cases.py): its responses,
whose requests they answer, and what is wrong with them. Shared by the differential suite over
sockets and the socket-free one (tests/tap/test_tap_wire.py)."""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass

from httptools import HttpParserError, HttpResponseParser

CASE_TAG = re.compile(rb"/c(\d{4})/")
VICTIM_TAG = re.compile(rb"/v(\d{4})/")


@dataclass
class Response:
    status: int
    body: bytes

    def echo_case(self) -> int | None:
        """The case whose request this answers (by url tag or X-Case), None: not an echo or
        untagged."""
        url = self.echo_url()
        if url is None:
            return None
        m = CASE_TAG.search(url)
        if m is not None:
            return int(m.group(1))
        with contextlib.suppress(ValueError, TypeError):
            return int(json.loads(self.body).get("case"))
        return None

    def echo_url(self) -> bytes | None:
        """The url the logging upstream echoed, or None for a proxy's own answer."""
        try:
            obj = json.loads(self.body)
        except ValueError:
            return None
        if isinstance(obj, dict) and isinstance(obj.get("url"), str):
            return str(obj["url"]).encode("latin-1")
        return None

    def upstream_error(self) -> bool:
        with contextlib.suppress(ValueError):
            obj = json.loads(self.body)
            return isinstance(obj, dict) and "upstream_error" in obj
        return False


class _Responses:
    def __init__(self) -> None:
        self.done: list[Response] = []
        self.body: list[bytes] = []
        self.parser = HttpResponseParser(self)

    def on_message_begin(self) -> None:
        self.body = []

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.done.append(Response(self.parser.get_status_code(), b"".join(self.body)))


def parse_responses(raw: bytes) -> tuple[list[Response], str | None]:
    """The complete responses in a client's byte stream, and why parsing stopped (None: the
    stream was well-formed HTTP/1.x to its end, possibly ending mid-response)."""
    got = _Responses()
    try:
        got.parser.feed_data(raw)
    except HttpParserError as exc:
        return got.done, f"{type(exc).__name__}: {exc}"
    return got.done, None


def answer_problems(raw: bytes, case_id: int) -> list[str]:
    """Why what a case's client received is wrong: not HTTP/1.x, a response to another
    case's request, or the upstream's refusal of what the proxy sent it."""
    bad = []
    responses, problem = parse_responses(raw)
    if problem is not None:
        bad.append(f"unparseable answer ({problem}): {raw[:400]!r}")
    for resp in responses:
        url = resp.echo_url()
        if url is not None and resp.echo_case() != case_id:
            bad.append(f"got the response to {url!r}")
        if resp.upstream_error():
            bad.append("the upstream could not parse what the proxy sent")
    return bad
