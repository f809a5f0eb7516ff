"""A source whose collect() raises never fails a scrape (issue 24, node_exporter's model): the
sidecar marks that source down with the reason ``collect_error`` and serves everything else.
A hostile /server_info's parallel sizes are refused before they can size anything."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from prometheus_client import generate_latest
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families

from exporter.config import SidecarSettings
from exporter.sidecar import Sidecar
from exporter.sim.server import create_sim_app
from exporter.sim.settings import SimSettings
from exporter.sources.sglang import MAX_PARALLEL, ShapeError, parse_server_info
from tests.support import ServerThread


@pytest.fixture(scope="module")
def sim() -> Iterator[ServerThread]:
    with ServerThread(create_sim_app(SimSettings())) as srv:
        yield srv


def _scrape(sc: Sidecar) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(sc.registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def test_a_raising_collect_leaves_that_source_out_and_serves_the_rest(sim: ServerThread) -> None:
    sc = Sidecar(SidecarSettings(sglang_url=sim.url, gpu_backend="fake", canary=False))

    async def poll() -> None:
        await sc.servers["sglang"].poll_once()
        await sc.servers["sglang"].close()

    asyncio.run(poll())
    before = _scrape(sc)
    assert before[("dsv4_source_up", (("source", "sglang"),))] == 1.0
    assert any(name.startswith("dsv4_sglang_") for name, _ in before)

    def broken() -> Iterator[Metric]:
        yield from ()
        raise RuntimeError("a bug in one source")

    sc.servers["sglang"].collect = broken  # type: ignore[method-assign]
    after = _scrape(sc)
    assert after[("dsv4_source_up", (("source", "sglang"),))] == 0.0
    key = ("dsv4_source_errors_total", (("reason", "collect_error"), ("source", "sglang")))
    assert after[key] == 1.0
    assert not any(name.startswith("dsv4_sglang_") for name, _ in after)
    # everything else is still there: every other source's and part's families
    others = {name for name, _ in before if not name.startswith("dsv4_sglang_")}
    assert others <= {name for name, _ in after}
    assert _scrape(sc)[key] == 2.0  # counted once per failing scrape


@pytest.mark.parametrize("field", ["tp_size", "pp_size", "dp_size", "nnodes"])
@pytest.mark.parametrize("value", [10**8, MAX_PARALLEL + 1, float("inf"), float("nan"), -1])
def test_parallel_sizes_past_any_deployment_are_refused(field: str, value: float) -> None:
    with pytest.raises(ShapeError, match=field):
        parse_server_info({"model_path": "deepseek-ai/DeepSeek-V4-Flash", field: value})


def test_parallel_sizes_a_deployment_can_have_are_read() -> None:
    facts = parse_server_info(
        {"model_path": "deepseek-ai/DeepSeek-V4-Flash", "tp_size": 16, "pp_size": 4}
    )
    assert (facts.tp_size, facts.pp_size) == (16, 4)
