"""How the probe measures the transfer gap, and how it tells streams apart.

Two clocks, picked from the kind of event SGLang's LayerLoadingEvent holds:

* ``EventTimeline`` (device events, CUDA or any backend whose Event takes ``enable_timing``):
  the probe records its own timing event on the load stream right after each layer's load
  event, and another on the reading stream at an ungated read. ``read.elapsed_time(done)`` is
  how long the layer was still being copied when the reader's stream reached the read; zero or
  less means the copy had landed. Exact, and costs one event record per mark.
* ``HostTimeline`` (events that only answer ``query()``): the gap is bounded from the host:
  from the read's enqueue time to the first time the probe sees the layer's event complete.
  An upper bound; the probe's reporter polls every millisecond while such reads are pending.

Nothing here imports torch at module level; torch is touched only when SGLang's events are
torch events, i.e. inside the SGLang process where torch is already loaded.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Any


class EventTimeline:
    source = "device_events"
    polls = False

    def __init__(
        self,
        make_event: Callable[[], Any],
        thread_setup: Callable[[], None] | None = None,
        capturing: Callable[[], bool] | None = None,
    ) -> None:
        self._make = make_event
        self._thread_setup = thread_setup
        self.capturing = capturing or (lambda: False)

    def _mark(self) -> Any:
        event = self._make()
        event.record()
        return event

    def done_mark(self, load_event: Any) -> Any:
        """Called on the load stream right after SGLang recorded ``load_event``."""
        return self._mark()

    def read_mark(self, done_marks: Sequence[Any]) -> Any:
        return self._mark()

    def completed(self, done_mark: Any) -> bool:
        return bool(done_mark.query())

    def gap_s(self, read_mark: Any, done_mark: Any) -> float | None:
        """Seconds the layer was still loading when the read ran; None while unresolved."""
        if not (done_mark.query() and read_mark.query()):
            return None
        return max(0.0, float(read_mark.elapsed_time(done_mark)) / 1000.0)

    def prepare_thread(self) -> None:
        """Run once on the reporter thread before it queries events (binds the right GPU, so
        the thread does not create a context on device 0)."""
        if self._thread_setup is not None:
            self._thread_setup()


class HostDone:
    """A layer's load event plus the first host time it was seen complete."""

    __slots__ = ("event", "observed")

    def __init__(self, event: Any) -> None:
        self.event = event
        self.observed: float | None = None

    def poll(self, now: float) -> float | None:
        if self.observed is None and self.event.query():
            self.observed = now
        return self.observed


class HostTimeline:
    source = "host_bound"
    polls = True

    def __init__(self) -> None:
        self.capturing: Callable[[], bool] = lambda: False

    def done_mark(self, load_event: Any) -> HostDone:
        return HostDone(load_event)

    def read_mark(self, done_marks: Sequence[HostDone]) -> float:
        now = time.perf_counter()
        for mark in done_marks:
            mark.poll(now)  # a layer already landed counts as landed before the read
        return time.perf_counter()

    def completed(self, done_mark: HostDone) -> bool:
        return done_mark.poll(time.perf_counter()) is not None

    def gap_s(self, read_mark: float, done_mark: HostDone) -> float | None:
        observed = done_mark.poll(time.perf_counter())
        if observed is None:
            return None
        return max(0.0, observed - read_mark)

    def prepare_thread(self) -> None:
        return None


Timeline = EventTimeline | HostTimeline


def _constant_key() -> int:
    return 0


def _torch_stream_key() -> Callable[[], Hashable]:
    import torch

    current_device = torch.cuda.current_device
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        try:
            if isinstance(raw(current_device()), int):
                return lambda: raw(current_device())
        except Exception:  # private API moved: fall back to the public one
            pass
    current_stream = torch.cuda.current_stream
    return lambda: current_stream().cuda_stream


def detect(sample_event: Any, mode: str) -> tuple[Timeline | None, Callable[[], Hashable], str]:
    """Pick the timeline and the stream-key function for SGLang's event type.

    Returns (timeline or None when gaps are off/unmeasurable, stream_key, how the streams are
    told apart). ``mode`` is DSV4_PROBE_GAP: auto, events, host or off.
    """
    cls = type(sample_event)
    module_name = getattr(cls, "__module__", "") or ""
    stream_key: Callable[[], Hashable] = _constant_key
    streams = "single stream assumed"
    thread_setup = None
    capturing = None
    if module_name.startswith("torch.cuda"):
        import torch

        stream_key = _torch_stream_key()
        streams = "torch.cuda current stream"
        if torch.cuda.is_initialized():
            device = torch.cuda.current_device()
            thread_setup = lambda: torch.cuda.set_device(device)  # noqa: E731
        capturing = torch.cuda.is_current_stream_capturing
    else:
        module = sys.modules.get(module_name)
        current = getattr(module, "current_stream", None)
        if callable(current):
            stream_key = current
            streams = f"{module_name}.current_stream"
    if mode == "off":
        return None, stream_key, streams
    if mode in ("auto", "events"):
        try:
            probe_event = cls(enable_timing=True)
            usable = all(hasattr(probe_event, a) for a in ("record", "query", "elapsed_time"))
        except Exception:
            usable = False
        if usable:
            timeline = EventTimeline(lambda: cls(enable_timing=True), thread_setup, capturing)
            return timeline, stream_key, streams
    if callable(getattr(sample_event, "query", None)):
        return HostTimeline(), stream_key, streams
    return None, stream_key, streams
