"""Types of the C module exporter/samplers/tap/_relay.c: the tap's chunked-response relay."""

from collections.abc import Callable

MAX_DIGITS: int

class Relay:
    """Base of the tap's upstream connection (see _relay.c)."""

    last_read: float
    @property
    def relaying(self) -> bool: ...
    def data_received(self, data: bytes) -> None:
        """Record the read's time; relay it, or hand it to ``self._data``."""
    def relay_begin(self, write: Callable[[bytes], object], rest: bytes, /) -> None:
        """Relay the chunked body from here (a chunk boundary), starting with ``rest``."""
    def relay_to(self, write: Callable[[bytes], object], /) -> None:
        """Where the following reads go (the head's own read went to a buffer)."""
    def relay_stop(self) -> None:
        """Stop relaying and drop the client's write."""
