"""Which read path the tap's upstream connections take: the C relay, or Python only.

The only place that decides. ``exporter/samplers/tap/_relay.c`` forwards a streamed answer's
chunked body verbatim, reading only its framing, so a chunk costs no Python call (issue 31:
the Python per-chunk path kept the tap's CPU per chunk above 1.25x nginx's). Its reference is
the Python path, llhttp re-framing each piece, which every response still takes when the
module was not built (an install without a C compiler), when ``DSV4_TAP_RELAY=python``, and
for every response the relay does not take (sampled, not chunked as ``chunked`` alone, HEAD,
a head split across reads, HTTP/1.0 clients: ``exchange.Exchange._may_relay``).
``DSV4_TAP_RELAY`` unset or ``auto`` takes the module when built; ``c`` asks for it (a build
without it runs Python, and :data:`WHY` says so).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable

ENV = "DSV4_TAP_RELAY"
_mono = time.monotonic


def _load() -> type | None:
    try:
        from exporter.samplers.tap._relay import Relay
    except ImportError:  # built without a C compiler: the Python path serves every response
        return None
    return Relay


NativeRelay = _load()


class PythonReads(asyncio.Protocol):
    """The upstream connection's reads without the C module: each read goes to ``_data``."""

    __slots__ = ("last_read",)

    relaying = False
    _data: Callable[[bytes], None]  # the read path: UpstreamConnection._data

    def __init__(self) -> None:
        self.last_read = 0.0

    def data_received(self, data: bytes) -> None:
        self.last_read = _mono()
        self._data(data)

    def relay_begin(self, write: object, rest: bytes) -> None:
        raise RuntimeError("the tap's C relay is not built")

    def relay_to(self, write: object) -> None:
        raise RuntimeError("the tap's C relay is not built")

    def relay_stop(self) -> None:
        return None


def _choose() -> tuple[bool, str]:
    wanted = os.environ.get(ENV, "auto").strip().lower() or "auto"
    if wanted == "python":
        return False, f"{ENV}=python"
    if NativeRelay is None:
        return False, "exporter/samplers/tap/_relay.c was not built (no C compiler at install)"
    if wanted not in ("auto", "c"):
        return True, f"{ENV}={wanted!r} is not auto, c or python: the built relay runs"
    return True, "built"


ENABLED, WHY = _choose()
"""Whether new taps relay chunked bodies in C (``TapCore.relay``), and why."""
KERNEL = "c" if ENABLED else "python"
