"""Units every part of the project shares, defined once.

``GIB`` is also SGLang's "GB": ``get_available_gpu_memory`` and the ``sglang:*_gb`` gauges divide
by ``1 << 30``, and NVML reports bytes, so one binary gibibyte converts both ways.
"""

from __future__ import annotations

GIB = 1 << 30
MIB = 1 << 20
