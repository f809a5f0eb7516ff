"""The one poller base every source runs on (issue 36, item 2): a new NVML metric is one row
and one catalog entry; a source's own bug is the supervisor's, not a reason it counts; the
help of dsv4_source_errors_total is generated from the reasons each source declares."""

from __future__ import annotations

import asyncio
import re

import pynvml
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from exporter.metrics import catalog as m
from exporter.probe.snapshot import write_snapshot
from exporter.sim.fake_nvml import FakeNvml
from exporter.sources import reasons
from exporter.sources.base import health_families
from exporter.sources.discovery import EngineDiscovery
from exporter.sources.nvml import READINGS, NvmlSource, Reading
from exporter.sources.probe_files import ProbeFileSource
from exporter.sources.sglang import SglangSource
from exporter.sources.vllm import VllmSource
from exporter.supervisor import TaskSupervisor
from tests.probe.test_probe_files import NOW, counters
from tests.support import HANG_GUARD_S, sample_value, settle

GUARD = HANG_GUARD_S  # the wedge guard, never a budget: a loaded machine is slow, not wedged

# A stand-in GPU metric: NVML's GPU temperature, which the sidecar does not export.
STAND_IN = m.MetricSpec(
    "dsv4_test_gpu_temperature_celsius",
    "gauge",
    "Stand-in GPU temperature (test only).",
    m.GPU_LABELS,
    "gpu",
)
TEMPERATURE = Reading(
    "temperature",
    lambda g: g.nvml.nvmlDeviceGetTemperature(g.handle, pynvml.NVML_TEMPERATURE_GPU),
    None,
    STAND_IN,
)


class ThermalNvml(FakeNvml):
    """The fake with nvidia-ml-py's temperature call; GPU 1 answers NotSupported, as a GPU
    without the sensor does."""

    def nvmlDeviceGetTemperature(self, handle, sensor):
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if self.nvmlDeviceGetUUID(handle) == self.nvmlDeviceGetUUID(
            self.nvmlDeviceGetHandleByIndex(1)
        ):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return 40 + self.nvmlDeviceGetCount()


def _text(src) -> str:
    class C:
        def collect(self):
            yield from health_families([src.health])
            yield from src.collect()

    reg = CollectorRegistry()
    reg.register(C())
    return generate_latest(reg).decode()


def test_a_new_gpu_metric_is_one_row_and_one_catalog_entry():
    src = NvmlSource(nvml=ThermalNvml(count=2), readings=(*READINGS, TEMPERATURE), timeout=GUARD)
    asyncio.run(src.poll_once())
    t = _text(src)
    assert src.health.up
    assert sample_value(t, "dsv4_test_gpu_temperature_celsius", rank="0") == 42
    # not supported on GPU 1: the row's fallback (None) leaves that series out, the rest stays
    assert sample_value(t, "dsv4_test_gpu_temperature_celsius", rank="1") is None
    assert sample_value(t, "dsv4_gpu_memory_used_bytes", rank="1") is not None
    assert "# HELP dsv4_test_gpu_temperature_celsius Stand-in GPU temperature" in t
    # without the row, the metric is not exported: the row is all it took
    plain = NvmlSource(nvml=ThermalNvml(count=2), timeout=GUARD)
    asyncio.run(plain.poll_once())
    assert "dsv4_test_gpu_temperature_celsius" not in _text(plain)


def test_a_row_with_a_fallback_exports_it_where_nvml_has_no_answer():
    row = Reading("temperature", TEMPERATURE.call, -1.0, STAND_IN)
    src = NvmlSource(nvml=ThermalNvml(count=2), readings=(*READINGS, row), timeout=GUARD)
    asyncio.run(src.poll_once())
    assert sample_value(_text(src), "dsv4_test_gpu_temperature_celsius", rank="1") == -1


class BuggyNvml(FakeNvml):
    def nvmlDeviceGetCount(self) -> int:
        raise ZeroDivisionError("a sidecar bug, not an NVML error")


def test_an_nvml_source_bug_is_raised_not_counted_as_a_reason():
    src = NvmlSource(nvml=BuggyNvml(count=1), timeout=GUARD)
    with pytest.raises(ZeroDivisionError):
        asyncio.run(src.poll_once())
    assert sum(src.health.errors.values()) == 0


def test_a_probe_source_bug_is_raised_not_counted_as_a_reason(tmp_path):
    write_snapshot(tmp_path, "0", counters(), written_at=NOW)

    def broken_clock() -> float:
        raise ZeroDivisionError("a sidecar bug")

    src = ProbeFileSource(tmp_path, clock=broken_clock)
    with pytest.raises(ZeroDivisionError):
        asyncio.run(src.poll_once())
    assert "internal" not in src.health.errors and sum(src.health.errors.values()) == 0


def test_the_supervisor_counts_a_source_bug_as_internal_error_and_restarts_it():
    """docs/architecture.md: the supervisor restarts on internal errors; the source's health
    says internal_error (the sidecar's crash hook, here as the sidecar wires it)."""
    src = NvmlSource(nvml=BuggyNvml(count=1), poll_interval=0.01, timeout=GUARD)

    async def scenario() -> tuple[int, bool]:
        stop = asyncio.Event()
        sup = TaskSupervisor(stop, min_backoff=0.01, max_backoff=0.02)
        sup.spawn(
            "nvml",
            lambda: src.run(stop),
            lambda exc: src.health.failure("internal_error", type(exc).__name__),
        )
        ok = await settle(lambda: sup.restarts("nvml") >= 2)
        stop.set()
        restarts = sup.restarts("nvml")
        await sup.stop(grace=1.0)
        return restarts, ok

    restarts, ok = asyncio.run(scenario())
    assert ok and restarts >= 2
    assert src.health.errors["internal_error"] >= restarts
    assert not src.health.up


def _sources(tmp_path):
    return [
        NvmlSource(nvml=FakeNvml(count=1)),
        ProbeFileSource(tmp_path),
        SglangSource("http://127.0.0.1:9"),
        VllmSource("http://127.0.0.1:9"),
        EngineDiscovery("auto", "http://127.0.0.1:9"),
    ]


def test_every_counted_reason_is_in_the_generated_help(tmp_path):
    documented = set(re.findall(r"[a-z_]+", m.SOURCE_ERRORS.help))
    for src in _sources(tmp_path):
        counted = set(src.health.errors)
        assert counted == set(reasons.names(src.health.name)), src.health.name
        assert counted <= documented, (src.health.name, counted - documented)
        assert f"{src.health.name}: " in m.SOURCE_ERRORS.help


def test_the_footprint_and_canary_count_only_declared_reasons():
    """Counted, not zero-initialised: their label values are their declared reasons."""
    from exporter.samplers.canary import RESULTS
    from exporter.sources.footprint import STATUS_REASONS

    assert ("ok", *reasons.own("footprint")) == STATUS_REASONS
    assert ("success", *reasons.own("canary")) == RESULTS
    assert "footprint: unknown_model" in m.SOURCE_ERRORS.help
    assert "canary: http_error" in m.SOURCE_ERRORS.help


def test_the_help_is_generated_from_the_declarations():
    text = reasons.help_text("Lead")
    assert text.startswith("Lead (nvml: ")
    for source, declared in reasons.BY_SOURCE.items():
        assert f"{source}: {declared[0]}" in text or f"{source}: {declared[0].name}" in text
    # a meaning is said once: too_large's appears for sglang, not again for vllm
    assert text.count("too_large = a body over its cap") == 1
    assert m.SOURCE_ERRORS.help == reasons.help_text(
        "Failed polls of the named source, by bounded reason"
    )
