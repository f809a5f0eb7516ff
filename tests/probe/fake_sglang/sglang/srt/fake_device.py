"""A simulated device with the torch.cuda calls SGLang's HiCache path makes: streams that run
in order on a virtual clock (milliseconds), events recorded at a stream's position, stream waits
on events, and buffers whose content changes when a copy kernel ends. A read kernel sees the
buffer as of the moment it starts on its stream, which is exactly the index-K race: a reader
stream that did not wait for the load event starts before the copy ended and sees old data.

The clock moves only when told (``advance``/``synchronize``), so tests are deterministic.
"""

import threading
from contextlib import contextmanager

_clock = {"now": 0.0}
_streams = []
_tls = threading.local()


def now():
    return _clock["now"]


def advance_to(t):
    _clock["now"] = max(_clock["now"], t)


def synchronize(device=None):
    """Run every stream to completion (torch.cuda.synchronize)."""
    advance_to(max([s.tail for s in _streams] + [_clock["now"]]))


def reset():
    _clock["now"] = 0.0
    for s in _streams:
        s.tail = 0.0


class Stream:
    def __init__(self, device=None, priority=0):
        self.tail = _clock["now"]
        _streams.append(self)

    def wait_event(self, event):
        if event.time is not None:
            self.tail = max(self.tail, event.time)

    def wait_stream(self, stream):
        self.tail = max(self.tail, stream.tail)

    def query(self):
        return self.tail <= _clock["now"]

    def synchronize(self):
        advance_to(self.tail)


_default = Stream()


def current_stream(device=None):
    return getattr(_tls, "stream", _default)


def default_stream(device=None):
    return _default


@contextmanager
def stream(s):
    prev = current_stream()
    _tls.stream = s
    try:
        yield s
    finally:
        _tls.stream = prev


class Event:
    def __init__(self, enable_timing=False, blocking=False, interprocess=False):
        self.enable_timing = enable_timing
        self.time = None

    def record(self, stream=None):
        s = stream if stream is not None else current_stream()
        self.time = max(s.tail, _clock["now"])

    def query(self):
        return self.time is None or self.time <= _clock["now"]

    def synchronize(self):
        if self.time is not None:
            advance_to(self.time)

    def wait(self, stream=None):
        (stream if stream is not None else current_stream()).wait_event(self)

    def elapsed_time(self, end_event):
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("Both events must be created with enable_timing=True")
        if not (self.query() and end_event.query()) or None in (self.time, end_event.time):
            raise RuntimeError("Both events must be recorded and completed")
        return end_event.time - self.time


def launch(duration_ms):
    """A kernel on the current stream: returns its (start, end) on the virtual clock."""
    s = current_stream()
    start = max(s.tail, _clock["now"])
    s.tail = start + duration_ms
    return start, s.tail


class Buffer:
    """Device memory: a value that a copy replaces when the copy ends."""

    def __init__(self, value=0):
        self._writes = [(float("-inf"), value)]

    def write_at(self, t, value):
        self._writes.append((t, value))
        self._writes.sort(key=lambda w: w[0])

    def value_at(self, t):
        value = self._writes[0][1]
        for when, v in self._writes:
            if when <= t:
                value = v
        return value
