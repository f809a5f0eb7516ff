"""Bounded reads of what SGLang sends back: body size and JSON nesting depth.

SGLang is trusted to be SGLang, not to be small. Without a cap, one answer of 1.5 GB (a
misbehaving proxy in front of it, a wrong port, a debug endpoint) drove the poller to 2.9 GB RSS
against a 256 Mi container limit, and a 50,000-level JSON array raised ``RecursionError`` out of
``json.loads``, which nobody caught. Every body the sidecar reads from SGLang (``/server_info``,
``/metrics``, canary answers, and what ``loadgen`` and ``repro`` read) goes through
:func:`read_capped` and every JSON body through
:func:`loads_bounded`, and both fail with a :class:`BodyRejected` whose ``reason`` is one of
:data:`REASONS` (documented label values of the callers' error counters).

Local inputs of the command-line tools (``--config``, token files, ``scan``'s input) are
bounded here too, in bytes and in wall-clock time for the whole input: :func:`read_local` and
:class:`BoundedReader`.
"""

from __future__ import annotations

import json
import os
import select
import time
from collections.abc import Iterator
from typing import IO, Any

import aiohttp

# Label values a rejection is counted under (each caller lists them in its own reasons).
TOO_LARGE = "too_large"
TOO_DEEP = "too_deep"
REASONS = (TOO_LARGE, TOO_DEEP)

# Defaults: a DSV4 /server_info is ~10 KB with depth 4; SGLang's /metrics at dp=8 with
# histograms is a few MB; a canary answer (max_tokens <= a few thousand) is well under 1 MB.
SERVER_INFO_MAX_BYTES = 1 << 20
METRICS_MAX_BYTES = 16 << 20
CANARY_MAX_BYTES = 4 << 20
# A load generator's or repro's answer: streamed, up to tens of thousands of tokens at a few
# hundred bytes per SSE event.
ANSWER_MAX_BYTES = 16 << 20
MAX_JSON_DEPTH = 64

_READ_CHUNK = 64 << 10


class BodyRejected(ValueError):
    """A body over the size cap or a JSON document nested deeper than allowed."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


async def read_capped(resp: aiohttp.ClientResponse, limit: int) -> bytes:
    """The response body, read in chunks, never holding more than ``limit`` bytes.

    A declared ``Content-Length`` over the cap is refused before reading; an undeclared or
    chunked body is read until it passes the cap, then the connection is dropped (the caller's
    ``async with`` releases it), so an endless stream costs at most ``limit`` + one chunk.
    """
    declared = resp.content_length
    if declared is not None and declared > limit:
        resp.close()
        raise BodyRejected(TOO_LARGE, f"body of {declared} bytes declared, cap is {limit}")
    buf = bytearray()
    async for piece in resp.content.iter_chunked(_READ_CHUNK):
        buf += piece
        if len(buf) > limit:
            resp.close()
            raise BodyRejected(TOO_LARGE, f"body passed the cap of {limit} bytes")
    return bytes(buf)


def json_depth(value: Any) -> int:
    """Nesting depth of a decoded JSON value (scalars 0, ``[]`` 1), without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            deepest = max(deepest, depth)
            continue
        deepest = max(deepest, depth + 1)
        stack.extend((child, depth + 1) for child in children)
    return deepest


def loads_bounded(data: bytes | str, max_bytes: int, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads`` with a size and a depth bound.

    Raises :class:`BodyRejected` (``too_large`` / ``too_deep``) or ``ValueError`` (not JSON,
    not UTF-8). The C decoder recurses once per level and raises ``RecursionError`` near the
    interpreter's limit (~1000); that is turned into ``too_deep``, and anything that decoded is
    then held to ``max_depth``.
    """
    if len(data) > max_bytes:
        raise BodyRejected(TOO_LARGE, f"JSON of {len(data)} bytes, cap is {max_bytes}")
    try:
        value = json.loads(data)
    except RecursionError:
        raise BodyRejected(TOO_DEEP, "JSON nested deeper than the decoder allows") from None
    depth = json_depth(value)
    if depth > max_depth:
        raise BodyRejected(TOO_DEEP, f"JSON nested {depth} levels deep, limit is {max_depth}")
    return value


# What ``triage`` reads from the sidecar and Prometheus (a server it was pointed at, maybe the
# wrong one): a parsed exposition or JSON answer takes tens of times its size in memory, and a
# 45 MB metrics page took triage past 1.8 GB. The sidecar's own /metrics is a few hundred KB.
TRIAGE_METRICS_MAX_BYTES = 4 << 20
TRIAGE_ANSWER_MAX_BYTES = 16 << 20
"""A Prometheus query answer or a sidecar API answer read by triage."""

# Local inputs of the command-line tools: files an operator names, which may be anything a path
# can be (``/dev/zero``, a FIFO nobody writes, a 30 GB log), so each read is bounded in bytes
# and in wall-clock time as a whole, never per read.
CONFIG_FILE_MAX_BYTES = 1 << 20
"""A YAML config file: a few KB in practice."""
TOKEN_FILE_MAX_BYTES = 4096
"""A bearer token file (a mounted Secret): a token is tens of bytes."""
LOCAL_READ_SECONDS = 10.0
"""A config or token file must be read whole within this time (a FIFO with a slow writer)."""
SCAN_LINE_MAX_BYTES = 64 << 20
"""One JSON Lines sample for ``scan``: eight times the ingest API's default body cap."""
SCAN_MAX_BYTES = 64 << 30
"""The whole input of one ``scan`` (``--max-bytes``): far above any real capture."""
SCAN_MAX_SECONDS = 6 * 3600.0
"""The wall-clock time of one ``scan`` (``--max-seconds``)."""
TRIAGE_FILE_MAX_BYTES = 1 << 30
"""A file ``triage`` reads (``--scan`` JSON Lines, a ``--repro`` result)."""
TRIAGE_FILE_SECONDS = 600.0
"""The time ``triage`` gives one such file, whole."""


class InputRejected(ValueError):
    """A local input over its byte or time bound (the message says which, and the bound)."""


def read_local(path: str | os.PathLike[str], max_bytes: int, max_seconds: float) -> bytes:
    """The whole of ``path``, at most ``max_bytes``, within ``max_seconds`` in all.

    Opened non-blocking, so a FIFO without a writer cannot hang the open, and read with
    ``select`` against one deadline, so neither an endless device (``/dev/zero``) nor a
    writer dripping a byte a second holds the caller past its bound. Raises
    :class:`InputRejected` past a bound and ``OSError`` when it cannot be read.
    """
    fd = open_local(path)
    try:
        reader = BoundedReader(fd, max_bytes, time.monotonic() + max_seconds)
        chunks = []
        while piece := reader.read(_READ_CHUNK):
            chunks.append(piece)
        return b"".join(chunks)
    finally:
        os.close(fd)


class BoundedReader:
    """Reads a descriptor in pieces against one byte budget and one monotonic deadline.

    Given a file object without a descriptor (a test's ``BytesIO`` stdin), it reads that
    instead, checking the deadline between reads (such a stream never blocks)."""

    def __init__(self, source: int | IO[bytes], max_bytes: int, deadline: float) -> None:
        self.source = source
        self.max_bytes = max_bytes
        self.deadline = deadline
        self.total = 0
        self._was_blocking = True
        if isinstance(source, int):
            self._was_blocking = os.get_blocking(source)
            os.set_blocking(source, False)

    def restore(self) -> None:
        """Give the descriptor back as it was (stdin is shared with the shell that ran us)."""
        if isinstance(self.source, int):
            os.set_blocking(self.source, self._was_blocking)

    def read(self, size: int) -> bytes:
        """Up to ``size`` bytes; ``b""`` at the end of the input."""
        want = min(size, self.max_bytes + 1 - self.total)
        while True:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise InputRejected(f"was not read within its time limit ({self.total} bytes read)")
            if isinstance(self.source, int):
                try:  # first without waiting: a FIFO nobody opened for writing reads as EOF
                    piece = os.read(self.source, want)
                except BlockingIOError:
                    select.select([self.source], [], [], left)
                    continue
            else:
                piece = self.source.read(want) or b""
            self.total += len(piece)
            if self.total > self.max_bytes:
                raise InputRejected(f"is over {self.max_bytes} bytes")
            return piece


def read_lines(
    reader: BoundedReader, line_max: int, chunk: int = 1 << 20
) -> Iterator[tuple[int, bytes | None]]:
    """(line number, line without its newline) for every line ``reader`` gives; the line is
    None when it is over ``line_max`` bytes: its bytes are skipped to its end, never held (a
    device such as ``/dev/zero`` has no newline at all). The whole input stays within the
    reader's byte budget and deadline (:class:`InputRejected` past either)."""
    number = 0
    buf = bytearray()
    dropping = False
    while piece := reader.read(chunk):
        start = 0
        while (nl := piece.find(b"\n", start)) >= 0:
            number += 1
            if not dropping:
                buf += piece[start:nl]
            yield number, None if dropping or len(buf) > line_max else bytes(buf)
            buf.clear()
            dropping = False
            start = nl + 1
        if not dropping:
            buf += piece[start:]
            if len(buf) > line_max:
                dropping = True
                buf.clear()
    if dropping or buf:
        yield number + 1, None if dropping else bytes(buf)


def open_local(path: str | os.PathLike[str]) -> int:
    """A descriptor for a :class:`BoundedReader`: non-blocking, so a FIFO nobody writes
    cannot hang the open (reads then wait in ``select``, against the reader's deadline)."""
    return os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
