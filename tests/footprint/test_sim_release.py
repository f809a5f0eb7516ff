"""The simulator runs a real release's rules and says which (``<version>+sim``), end to end
through a real uvicorn server and the sidecar's own /server_info parser."""

from __future__ import annotations

import httpx
import pytest
from pydantic import ValidationError

from exporter.sim.deployment import SimDeployment
from exporter.sim.server import create_sim_app
from exporter.sim.settings import SimSettings
from exporter.sources.sglang import parse_server_info
from tests.support import ServerThread


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("version", "tokens"), [("0.5.12", 3_364_608), ("0.5.20", 6_614_784), ("0.5.23", 7_192_320)]
)
def test_simulator_serves_that_releases_plan(version, tokens):
    settings = SimSettings(sglang_version=version, index_k_dtype="fp8", tp_size=2)
    with ServerThread(create_sim_app(settings)) as sim:
        facts = parse_server_info(httpx.get(sim.url + "/server_info", timeout=5).json())
    assert facts.version == f"{version}+sim"
    assert facts.max_total_num_tokens == tokens


def test_default_is_the_readme_fork_on_0_5_20():
    assert SimSettings().sglang_version == "0.5.20"


@pytest.mark.parametrize("version", ["0.5.9", "main"])
def test_release_without_dsv4_pools_is_refused(version):
    with pytest.raises(ValidationError, match="sglang_version"):
        SimSettings(sglang_version=version)


def test_simulated_pipeline_is_sized_as_plan_sizes_it():
    """The simulator's PP stages come from model.plan_pipeline (SGLang's MIN sync), as `plan`'s
    do: 0.5.21 V4-Flash PP 4 at 37.7 GiB, every stage re-sized to SGLang's 20,465,920 tokens
    (tests/conformance), rank 0's own 27,410,176 not used."""
    dep = SimDeployment(
        SimSettings(sglang_version="0.5.21", index_k_dtype="fp8", available_gib=37.7, pp_size=4)
    )
    assert dep.pipeline.own_full_tokens[0] == 27_410_176
    assert dep.max_total_num_tokens == 20_465_920
    assert [fp.full_tokens for fp in dep.footprints] == [20_465_920] * 4
