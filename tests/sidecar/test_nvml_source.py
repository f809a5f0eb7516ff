"""NVML source against the faithful fake (real pynvml error classes) and the real library."""

from __future__ import annotations

import asyncio
import threading
import time

import pynvml
import pytest

from exporter.sim.fake_nvml import FakeNvml
from exporter.sources.base import health_families
from exporter.sources.nvml import NvmlSource, visible_selectors
from tests.support import HANG_GUARD_S, sample_value


def _text(src: NvmlSource) -> str:
    from prometheus_client import CollectorRegistry, generate_latest

    class C:
        def collect(self):
            yield from health_families([src.health])  # what the sidecar adds per source
            yield from src.collect()

    reg = CollectorRegistry()
    reg.register(C())
    return generate_latest(reg).decode()


def poll(src: NvmlSource) -> float:
    return asyncio.run(src.poll_once())


@pytest.mark.parametrize(
    "error", ["library_not_found", "driver_not_loaded", "version_mismatch", "uninitialized"]
)
def test_init_failure_marks_down_then_recovers(error):
    fake = FakeNvml(count=2)
    fake.fail_init(error, times=2)
    src = NvmlSource(nvml=fake, poll_interval=1)
    assert poll(src) == 1  # first failure: retry after the base interval
    assert poll(src) == 2  # backoff doubles
    t = _text(src)
    assert sample_value(t, "dsv4_source_up", source="nvml") == 0
    assert sample_value(t, "dsv4_source_errors_total", source="nvml", reason=error) == 2
    assert sample_value(t, "dsv4_gpu_memory_used_bytes") is None  # fail closed
    assert sample_value(t, "dsv4_gpus_visible") == 0
    assert sample_value(t, "dsv4_source_last_success_timestamp_seconds", source="nvml") is None
    before = time.time()
    assert poll(src) == 1  # recovered without restart
    after = time.time()
    t = _text(src)
    assert sample_value(t, "dsv4_source_up", source="nvml") == 1
    last = sample_value(t, "dsv4_source_last_success_timestamp_seconds", source="nvml")
    assert last is not None and before <= last <= after  # this poll's success, however long
    assert sample_value(t, "dsv4_source_poll_duration_seconds", source="nvml") >= 0
    assert sample_value(t, "dsv4_gpus_visible") == 2
    assert sample_value(t, "dsv4_gpu_memory_total_bytes", rank="1") == fake.spec.memory_bytes


def test_zero_gpus():
    src = NvmlSource(nvml=FakeNvml(faults="zero"))
    poll(src)
    t = _text(src)
    assert sample_value(t, "dsv4_source_up", source="nvml") == 0
    assert sample_value(t, "dsv4_source_errors_total", source="nvml", reason="no_gpus") == 1


def test_gpu_lost_mid_run_then_recovered():
    fake = FakeNvml(count=4)
    src = NvmlSource(nvml=fake)
    poll(src)
    fake.lose_gpu(2)
    poll(src)
    t = _text(src)
    assert sample_value(t, "dsv4_source_up", source="nvml") == 0
    assert sample_value(t, "dsv4_gpus_visible") == 3
    assert sample_value(t, "dsv4_gpu_memory_used_bytes", rank="2") is None  # that GPU dropped
    assert sample_value(t, "dsv4_gpu_memory_used_bytes", rank="1") is not None  # others kept
    assert sample_value(t, "dsv4_source_errors_total", source="nvml", reason="gpu_lost") == 1
    fake.recover_gpu(2)
    poll(src)
    t = _text(src)
    assert (
        sample_value(t, "dsv4_source_up", source="nvml") == 1
        and sample_value(t, "dsv4_gpus_visible") == 4
    )


def test_scheduled_loss_from_fault_script():
    now = [0.0]
    fake = FakeNvml(count=2, faults="lost=1@10-20", clock=lambda: now[0])
    src = NvmlSource(nvml=fake)
    poll(src)
    assert len(src.snapshot.gpus) == 2
    now[0] = 15
    poll(src)
    assert [g.rank for g in src.snapshot.gpus] == [0]
    now[0] = 25
    poll(src)
    assert len(src.snapshot.gpus) == 2


def test_hung_call_is_abandoned_and_not_piled_up():
    fake = FakeNvml(count=1)
    released = threading.Event()
    fake.hang_next(60, release=released)  # wedged until the test lets it go
    src = NvmlSource(nvml=fake, timeout=0.3)

    async def scenario():
        await src.poll_once()  # returns by its own timeout: the call is still blocked
        timed_out = src.health.last_error
        await src.poll_once()  # the wedged thread has not returned: no second thread
        wedged_reason = src.health.last_error
        released.set()
        assert src._inflight is not None
        await asyncio.wait_for(asyncio.wrap_future(src._inflight), HANG_GUARD_S)  # the freed call
        await src.poll_once()
        return timed_out, wedged_reason

    timed_out, wedged = asyncio.run(scenario())
    assert timed_out.startswith("timeout")
    assert wedged.startswith("wedged")
    assert src.health.up
    t = _text(src)
    assert sample_value(t, "dsv4_source_errors_total", source="nvml", reason="timeout") == 1
    assert sample_value(t, "dsv4_source_errors_total", source="nvml", reason="wedged") == 1


def test_v1_memory_info_fallback_omits_reserved():
    class OldDriver(FakeNvml):
        def nvmlDeviceGetMemoryInfo(self, handle, version=None):
            if version is not None:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
            return super().nvmlDeviceGetMemoryInfo(handle)

    src = NvmlSource(nvml=OldDriver(count=1))
    poll(src)
    t = _text(src)
    assert sample_value(t, "dsv4_gpu_memory_reserved_bytes") is None
    assert sample_value(t, "dsv4_gpu_memory_free_bytes", rank="0") > 0


def test_gpu_info_and_per_process_opt_in():
    src = NvmlSource(nvml=FakeNvml(count=1), per_process=True)
    poll(src)
    t = _text(src)
    assert sample_value(t, "dsv4_gpu_info", rank="0", driver_version="560.35.03") == 1
    assert sample_value(t, "dsv4_gpu_process_memory_used_bytes", pid="1000") > 0
    src2 = NvmlSource(nvml=FakeNvml(count=1))
    poll(src2)
    assert "dsv4_gpu_process_memory_used_bytes" not in _text(src2)


def test_visible_devices_mapping():
    assert visible_selectors({"CUDA_VISIBLE_DEVICES": "3,1"}) == ["3", "1"]
    assert visible_selectors({"NVIDIA_VISIBLE_DEVICES": "all"}) is None
    assert visible_selectors({}) is None
    fake = FakeNvml(count=4)
    src = NvmlSource(nvml=fake, env={"CUDA_VISIBLE_DEVICES": "3,1"})
    poll(src)
    assert [(g.rank, g.index) for g in src.snapshot.gpus] == [(0, 3), (1, 1)]
    uuid = "GPU-5140a1de-0000-4000-8000-000000000002"
    src = NvmlSource(nvml=fake, env={"NVIDIA_VISIBLE_DEVICES": uuid})
    poll(src)
    assert [g.uuid for g in src.snapshot.gpus] == [uuid]
    src = NvmlSource(nvml=fake, rank_map=[2, 0])
    poll(src)
    assert [(g.rank, g.index) for g in src.snapshot.gpus] == [(0, 2), (1, 0)]


def test_real_nvml_library_absent_marks_down():
    """On a machine without the NVIDIA driver, the real nvidia-ml-py must fail closed."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("a real NVML library is present on this machine")
    src = NvmlSource()
    poll(src)
    assert not src.health.up
    assert src.health.last_error.split(":")[0] in ("library_not_found", "driver_not_loaded")
