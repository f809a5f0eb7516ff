"""The ``fake`` GPU backend (exporter/sim/gpus.py) against a real simulator on loopback: the
node's GPUs are the simulator's ground truth, read at most once per poll; zero GPUs before
the simulator first answers, the last answer kept while it is unreachable; NVML faults still
come from the fault script."""

from __future__ import annotations

import threading

import httpx
import pynvml
import pytest

from exporter.config_loader import load_settings
from exporter.sim.deployment import SimDeployment
from exporter.sim.gpus import SimulatedNvml, SimulatorGpus, backend
from exporter.sim.server import create_sim_app
from exporter.sim.settings import SimSettings
from exporter.sources.nvml import NvmlSource
from tests.support import ServerThread


def _settings(**kw: object) -> SimSettings:
    return SimSettings(index_k_dtype="bf16", tp_size=4, available_gib=50, **kw)  # type: ignore[arg-type]


def _used(nv: SimulatedNvml, index: int) -> int:
    handle = nv.nvmlDeviceGetHandleByIndex(index)
    return int(nv.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2).used)


def test_gpus_are_the_simulators_ground_truth():
    sim_settings = _settings()
    truth = SimDeployment(sim_settings)
    with ServerThread(create_sim_app(sim_settings)) as sim:
        nv = backend.create(load_settings({"sglang_url": sim.url, "gpu_backend": "fake"}))
        nv.nvmlInit()
        assert nv.nvmlDeviceGetCount() == 4
        spec = truth.gpu_spec()
        for i in range(4):
            pools = truth.true_footprint(i).allocated_bytes
            base = spec.context_bytes + spec.weights_bytes + spec.graph_bytes
            assert _used(nv, i) == base + pools
        # running requests the server reports add activations on every GPU
        httpx.post(sim.url + "/_sim/control", json={"background_running": 10}, timeout=5)
        nv.gpus.max_age = 0.0
        expected = base + truth.true_footprint(0).allocated_bytes
        assert _used(nv, 0) == expected + 10 * spec.activation_per_request_bytes


def test_each_node_reads_its_own_ranks():
    sim_settings = _settings(nnodes=2, pp_size=2)  # 8 GPUs, 4 per node
    with ServerThread(create_sim_app(sim_settings)) as sim:
        body = httpx.get(sim.url + "/_sim/gpus", params={"node_rank": 1}, timeout=5).json()
        assert [g["rank"] for g in body["gpus"]] == [4, 5, 6, 7]
        missing = httpx.get(sim.url + "/_sim/gpus", params={"node_rank": 2}, timeout=5)
        assert missing.status_code == 404 and "node_rank 2" in missing.json()["error"]


def test_zero_gpus_until_the_simulator_answers_then_the_last_answer_is_kept():
    server = ServerThread(create_sim_app(_settings()))  # bound, not yet listening
    gpus = SimulatorGpus(server.url, max_age=0.0, timeout=0.5)
    nv = SimulatedNvml(gpus)
    nv.nvmlInit()
    assert nv.nvmlDeviceGetCount() == 0 and gpus.failures == 1
    with server:
        assert nv.nvmlDeviceGetCount() == 4
        used = _used(nv, 3)
    assert nv.nvmlDeviceGetCount() == 4  # the simulator is gone; its GPUs are not
    assert _used(nv, 3) == used and gpus.failures >= 2


def test_one_fetch_per_poll(monkeypatch: pytest.MonkeyPatch):
    import exporter.sim.gpus as sim_gpus

    fetches = []
    real = sim_gpus.urllib.request.urlopen
    me = threading.get_ident()

    def counted(*args, **kw):
        if threading.get_ident() == me:  # not another test's poller left running
            fetches.append(args[0])
        return real(*args, **kw)

    monkeypatch.setattr(sim_gpus.urllib.request, "urlopen", counted)
    with ServerThread(create_sim_app(_settings())) as sim:
        settings = load_settings({"sglang_url": sim.url, "gpu_backend": "fake"})
        nv = backend.create(settings)
        # time stands still within the poll (on a loaded machine the cycle may outlast the
        # answer's max_age, and a refetch then is right): the poll's reads share one answer
        nv.gpus._clock = lambda: 0.0
        source = NvmlSource(nvml=nv)
        snap = source._cycle()  # init, count, 4 handles (each counts), 4 memory reads
        assert len(snap.gpus) == 4
        assert fetches == [sim.url + "/_sim/gpus?node_rank=0"]
        nv.gpus._clock = lambda: nv.gpus.max_age  # the next poll, once the answer is old
        source._cycle()
        assert fetches == [sim.url + "/_sim/gpus?node_rank=0"] * 2


def test_fault_script_still_applies(monkeypatch):
    """The fault script is the backend's own setting, read from its environment."""
    monkeypatch.setenv("DSV4_FAKE_GPU_FAULTS", "lost=2@0")
    with ServerThread(create_sim_app(_settings())) as sim:
        s = load_settings({"sglang_url": sim.url, "gpu_backend": "fake"})
        nv = backend.create(s)
        nv.nvmlInit()
        with pytest.raises(pynvml.NVMLError_GpuIsLost):
            nv.nvmlDeviceGetHandleByIndex(2)


def test_a_bad_fault_script_is_named(monkeypatch):
    monkeypatch.setenv("DSV4_FAKE_GPU_FAULTS", "melt=1")
    with pytest.raises(ValueError, match="unknown fault 'melt'"):
        backend.check_settings()
