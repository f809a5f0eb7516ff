"""The API port's request heads, bounded: uvicorn's httptools protocol with a size and count cap.

uvicorn has no limit on request heads with httptools (h11's ``h11_max_incomplete_event_size``
does not apply), and httptools accumulates a header value inside the parser until it ends: four
unfinished 250 MB header blocks held 1 GB of the sidecar (issue 24). This protocol counts the
bytes read while a head is open and the headers it has, and answers 400 and closes past
either bound, so a head costs at most ``MAX_HEAD_BYTES`` plus the one read that began it.
Pass it to uvicorn as ``http=BoundedHttpToolsProtocol``.
"""

from __future__ import annotations

from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

# The sidecar's API takes small requests (a bearer token, a JSON ingest body): nginx allows 32
# KiB of headers by default (4 x 8k); 64 KiB and 100 headers leave room for any proxy's.
MAX_HEAD_BYTES = 64 << 10
MAX_HEADERS = 100


class _TooLarge(Exception):
    """Raised from a parser callback; uvicorn answers the parser error with 400 and closes."""


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with bounded request heads (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_open = True  # the first request's head starts with the first byte
        self._head_bytes = 0
        self._began_in_read = False
        self._header_count = 0

    def data_received(self, data: bytes) -> None:
        self._began_in_read = False
        super().data_received(data)
        if self._head_open and not self._began_in_read:
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES and not self.transport.is_closing():
                self.send_400_response("Request head too large.")

    def on_message_begin(self) -> None:
        self._head_open = True
        self._began_in_read = True
        self._head_bytes = 0
        self._header_count = 0
        super().on_message_begin()

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        if self._header_count > MAX_HEADERS:
            raise _TooLarge
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._head_open = False
        super().on_headers_complete()
