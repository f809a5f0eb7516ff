"""Pass-through tap: a reverse proxy in front of SGLang's HTTP API that samples responses.

Usage from the sidecar app (same event loop)::

    tap = Tap(TapConfig(upstream="http://127.0.0.1:30000", sample_rate=0.05),
              on_sample=TapHandoff(pipeline))  # a Handoff: straight into the grading queue
    port = await tap.start("0.0.0.0", 30001)
    registry.register(tap)          # or yield from tap.collect() in the app's collector
    ...
    await tap.stop()

Bytes pass through unchanged and unbuffered (SSE chunks are forwarded as they arrive);
sampling and grading run beside the byte path and fail open.
"""

from exporter.samplers.tap.config import TapConfig
from exporter.samplers.tap.sampling import CapturedExchange, Handoff, Sampler
from exporter.samplers.tap.server import Tap

__all__ = ["CapturedExchange", "Handoff", "Sampler", "Tap", "TapConfig"]
