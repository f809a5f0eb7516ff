"""A two-node deployment end to end: one simulated SGLang head (node 0, the only one serving
HTTP) running V4-Pro at TP 8 x PP 2 over two nodes, and two real sidecars (uvicorn, fake
NVML), one per node, both reading SGLang through the head's URL. Each labels its own GPUs with
the deployment-wide rank and prices its own PP stage's layer slice."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.app import create_app
from exporter.config import load_settings
from exporter.footprint import pp_partition, resolve_model
from exporter.sim.deployment import SimDeployment
from exporter.sim.server import create_sim_app
from exporter.sim.settings import SimSettings
from tests.support import ServerThread, sample_value, scrape, wait_for

pytestmark = pytest.mark.e2e

SIM = SimSettings(
    model="deepseek-v4-pro", tp_size=8, pp_size=2, nnodes=2, index_k_dtype="bf16", port=0
)


def _sidecar(head_url: str, node_rank: int, probe_dir: Path | None = None):
    return create_app(
        load_settings(
            {
                "sglang_url": head_url,
                "probe_dir": probe_dir,
                "gpu_backend": "fake",
                "node_rank": node_rank,
                "index_k_dtype": "bf16",
                "canary": node_rank == 0,  # canaries from the head's sidecar only
                "canary_interval": 3600,
                "sglang_poll_interval": 0.2,
                "nvml_poll_interval": 0.2,
                "nvml_timeout": 0.5,
            }
        )
    )


def _series(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    return [
        (s.labels, s.value)
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name == name
    ]


def _labels(text: str, name: str) -> list[dict[str, str]]:
    return [labels for labels, _ in _series(text, name)]


def _alloc(text: str, rank: int) -> float:
    """Every pool's allocated bytes on ``rank``."""
    series = _series(text, "dsv4_kv_pool_allocated_bytes")
    return sum(v for labels, v in series if labels["rank"] == str(rank))


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    probe = tmp_path_factory.mktemp("probe")  # the sim's ranks write into node-<k>/
    with (
        ServerThread(create_sim_app(SIM.model_copy(update={"probe_dir": probe}))) as head,
        ServerThread(_sidecar(head.url, 0, probe / "node-0")) as node0,
        ServerThread(_sidecar(head.url, 1, probe / "node-1")) as node1,
    ):
        for sc, last in ((node0, "7"), (node1, "15")):
            wait_for(
                lambda sc=sc, last=last: (
                    sample_value(scrape(sc.url), "dsv4_kv_pool_overcommit_bytes", rank=last)
                    is not None
                    and sample_value(scrape(sc.url), "dsv4_gpu_memory_used_bytes", rank=last)
                )
            )
        yield head, node0, node1


def test_each_node_labels_its_gpus_globally(two_nodes):
    _, node0, node1 = two_nodes
    for sc, ranks in ((node0, range(0, 8)), (node1, range(8, 16))):
        text = scrape(sc.url)
        assert sample_value(text, "dsv4_gpus_visible") == 8  # tp*pp / nnodes fake GPUs
        gpus = _labels(text, "dsv4_gpu_memory_total_bytes")
        assert sorted(int(g["rank"]) for g in gpus) == list(ranks)
        assert sorted(int(g["gpu"]) for g in gpus) == list(range(8))  # local NVML index
        pools = {int(lab["rank"]) for lab in _labels(text, "dsv4_kv_pool_allocated_bytes")}
        assert pools == set(ranks), "only this node's ranks, never the other node's"


def test_rank_info_maps_global_ranks_to_node_tp_and_pp(two_nodes):
    _, node0, node1 = two_nodes
    info = _labels(scrape(node1.url), "dsv4_rank_info")
    assert sorted(info, key=lambda d: int(d["rank"])) == [
        {
            "rank": str(8 + i),
            "node_rank": "1",
            "local_rank": str(i),
            "tp_rank": str(i),
            "pp_rank": "1",
        }
        for i in range(8)
    ]
    assert {d["pp_rank"] for d in _labels(scrape(node0.url), "dsv4_rank_info")} == {"0"}


def test_each_node_prices_its_own_stage(two_nodes):
    _, node0, node1 = two_nodes
    dep = SimDeployment(SIM)
    split = pp_partition(resolve_model("deepseek-v4-pro").num_hidden_layers, 2)
    assert split == [30, 31]  # get_pp_indices gives the remainder to the last stage
    fp0 = httpx.get(f"{node0.url}/api/v1/footprint").json()
    fp1 = httpx.get(f"{node1.url}/api/v1/footprint").json()
    assert fp1["topology"] == {
        "tp_size": 8,
        "pp_size": 2,
        "nnodes": 2,
        "node_rank": 1,
        "gpus_per_node": 8,
        "ranks": list(range(8, 16)),
        "pp_ranks": [1],
    }
    assert {r["stage"]["pp_rank"] for r in fp0["ranks"]} == {0}
    assert {tuple(r["stage"]["layers"]) for r in fp0["ranks"]} == {(0, 30)}
    assert {tuple(r["stage"]["layers"]) for r in fp1["ranks"]} == {(30, 61)}
    # The last stage holds one layer more (get_pp_indices): SGLang sizes every stage to the
    # smallest token count (stage 1's), so stage 1 allocates exactly what the simulated SGLang
    # did, and stage 0 less (one layer fewer, and two more c4 layers there: V4-Pro's first two
    # layers are c128).
    a0, a1 = _alloc(scrape(node0.url), 0), _alloc(scrape(node1.url), 8)
    assert a1 == dep.footprints[1].allocated_bytes
    assert dep.footprints[1].full_tokens == dep.max_total_num_tokens
    assert 0 < a0 < a1
    # Fake NVML on each node carries that node's own stage allocation.
    used0 = sample_value(scrape(node0.url), "dsv4_gpu_memory_used_bytes", rank="0")
    used1 = sample_value(scrape(node1.url), "dsv4_gpu_memory_used_bytes", rank="8")
    assert used0 - used1 == pytest.approx(a0 - a1, rel=1e-6)


def test_each_nodes_probe_measures_what_its_stage_predicts(two_nodes):
    """The probe on each node measures that node's ranks (the torch.distributed rank, global);
    the sidecar's per-stage prediction matches them pool by pool: no drift on either node. A
    worker pricing stage 0 instead of its own would show about one layer's pools as drift."""
    _, node0, node1 = two_nodes
    for sc, ranks in ((node0, range(0, 8)), (node1, range(8, 16))):
        wait_for(lambda sc=sc: _series(scrape(sc.url), "dsv4_footprint_model_drift_bytes"))
        text = scrape(sc.url)
        measured = {int(lab["rank"]) for lab in _labels(text, "dsv4_probe_pool_bytes")}
        assert measured == set(ranks)
        drift = _series(text, "dsv4_footprint_model_drift_bytes")
        assert {int(lab["rank"]) for lab, _ in drift} == set(ranks)
        assert all(v == 0 for _, v in drift), drift


def test_the_head_reports_nnodes_and_its_own_node_rank(two_nodes):
    head, _, _ = two_nodes
    info = httpx.get(f"{head.url}/server_info").json()
    assert (info["nnodes"], info["node_rank"], info["tp_size"], info["pp_size"]) == (2, 0, 8, 2)


def test_a_node_rank_outside_nnodes_is_a_named_bad_config(two_nodes):
    head, _, _ = two_nodes
    with ServerThread(_sidecar(head.url, 2)) as bad:
        wait_for(
            lambda: sample_value(scrape(bad.url), "dsv4_footprint_up", reason="bad_config") == 0
        )
        fp = httpx.get(f"{bad.url}/api/v1/footprint").json()
        assert "node_rank 2 must be in 0..1" in fp["detail"]
        assert "node_rank" in fp["topology"]["error"]
        assert _labels(scrape(bad.url), "dsv4_kv_pool_allocated_bytes") == []
