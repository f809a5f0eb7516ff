"""Every reason a source can count under ``dsv4_source_errors_total{source, reason}``, once.

Each source takes its label values from :data:`BY_SOURCE` (zero-initialised, so a reason is
exported before it first happens) and the metric's help text is generated from the same table
(:func:`help_text`, read by ``exporter.metrics.catalog``), so the documented reasons cannot
drift from the counted ones. A leaf module: the catalog imports it, and the sources, which
import the catalog, import it too, so it imports neither.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Reason:
    """One bounded label value and, where the name alone does not say it, what it means."""

    name: str
    meaning: str = ""

    def __str__(self) -> str:
        return f"{self.name} = {self.meaning}" if self.meaning else self.name


# Every source polled over HTTP (exporter.sources.poller.HttpPoller; the transport's reasons
# are exporter.outbound's and exporter.sources.bounded's label values).
HTTP: tuple[Reason, ...] = (
    Reason("unreachable"),
    Reason("timeout"),
    Reason("http_status"),
    Reason("bad_json"),
    Reason("too_large", "a body over its cap"),
    Reason("too_deep", "JSON nested too deep"),
)
# Any source: counted by the sidecar, not by the source itself.
ANY: tuple[Reason, ...] = (
    Reason("internal_error", "its loop raised, see dsv4_sidecar_task_restarts_total"),
    Reason(
        "collect_error",
        "its collect() raised at a scrape, which left it out and served the rest",
    ),
)
# What a source with a worker thread adds (exporter.sources.poller.ThreadPoller).
THREAD: tuple[Reason, ...] = (
    Reason("timeout", "the worker did not answer within its timeout and was abandoned"),
    Reason("wedged", "an abandoned call has still not returned"),
)

BY_SOURCE: Mapping[str, tuple[Reason, ...]] = {
    "nvml": (
        Reason("library_not_found"),
        Reason("driver_not_loaded"),
        Reason("gpu_lost"),
        Reason("uninitialized"),
        Reason("version_mismatch"),
        Reason("no_gpus"),
        Reason("not_found"),
        Reason("unknown", "an NVML error code without a reason of its own"),
        *THREAD,
    ),
    "sglang": (*HTTP, Reason("bad_shape"), Reason("metrics_unavailable")),
    "vllm": (
        *HTTP,
        Reason("bad_shape"),
        Reason("metrics_unavailable"),
        Reason("models_unavailable"),
    ),
    "engine": (*HTTP, Reason("undecided", "no engine has answered as itself yet")),
    "probe": (
        Reason("dir_missing"),
        Reason("dir_unreadable"),
        Reason("too_many_files", "more snapshot files than ranks"),
        *THREAD,
    ),
    # counted, not zero-initialised: the footprint view's status and the canary's result
    "footprint": (
        Reason("unknown_model"),
        Reason("no_sglang"),
        Reason("no_token_count"),
        Reason("bad_config"),
        Reason("unsupported_version"),
        Reason("not_modelled", "the engine's pools are not what the model prices"),
    ),
    "canary": (
        Reason("http_error"),
        Reason("timeout"),
        Reason("error", "a probe raised"),
        Reason("too_large"),
        Reason("too_deep"),
    ),
}


def own(source: str) -> tuple[str, ...]:
    """The label values ``source`` declares, in declaration order."""
    return tuple(r.name for r in BY_SOURCE[source])


def names(source: str) -> tuple[str, ...]:
    """The label values ``source`` zero-initialises: its own and ``internal_error`` (its loop
    is supervised); ``collect_error`` is counted at a scrape, only once it happens."""
    return tuple(dict.fromkeys(r.name for r in (*BY_SOURCE[source], ANY[0])))


def help_text(lead: str) -> str:
    """``lead`` then every source's reasons, then those of any source: the help of
    ``dsv4_source_errors_total``. A reason's meaning is given once, where it first appears."""
    said: set[str] = set()
    parts = []
    for source, reasons in (*BY_SOURCE.items(), ("any source", ANY)):
        shown = []
        for r in dict((r.name, r) for r in reasons).values():
            shown.append(r.name if r.name in said else str(r))
            said.add(r.name)
        parts.append(f"{source}: {', '.join(shown)}")
    return f"{lead} ({'; '.join(parts)})."
