"""The pool table is what the model reads: every row appears in a footprint exactly in the
releases and deployments the row says, parametrised from the table itself (a release that adds
a pool adds a row, and these tests cover it without an edit)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from exporter.footprint import (
    BASE_POOLS,
    POOL_TABLE,
    PRESETS,
    RULES,
    DeploymentSettings,
    Pool,
    PoolContext,
    footprint_for_tokens,
    geometry_from_config,
    stage_slice,
)

FLASH = PRESETS["deepseek-v4-flash"]
V41 = geometry_from_config(
    json.loads((Path(__file__).parents[1] / "fixtures/deepseek-v41-shaped.config.json").read_text())
)
# Deployments between them giving every row what it needs (a model, a switch).
DEPLOYMENTS = (
    (FLASH, DeploymentSettings()),
    (FLASH, DeploymentSettings(online_compress=True, online_c128_mtp=True)),
    (V41, DeploymentSettings()),
)
FULL = 1_000_192


def _deployment_for(pool: Pool):
    newest = RULES[-1]
    for geom, settings in DEPLOYMENTS:
        if pool.exists(PoolContext(geom, stage_slice(geom), settings, newest)):
            return geom, settings
    raise AssertionError(f"no deployment in DEPLOYMENTS gives {pool.name} what it needs")


def test_names_are_unique_and_the_base_pools_come_first():
    names = [p.name for p in POOL_TABLE]
    assert len(set(names)) == len(names)
    assert tuple(names[: len(BASE_POOLS)]) == BASE_POOLS


@pytest.mark.parametrize("rules", RULES, ids=lambda r: r.name)
@pytest.mark.parametrize("pool", POOL_TABLE, ids=lambda p: p.name)
def test_a_pool_is_in_a_footprint_exactly_in_its_releases(pool, rules):
    geom, settings = _deployment_for(pool)
    fp = footprint_for_tokens(geom, settings, "legacy", FULL, stage_slice(geom), None, rules)
    assert (pool.name in fp.pools) == pool.in_release(rules)
    if pool.name in fp.pools:
        assert fp.pools[pool.name].allocated_bytes > 0


@pytest.mark.parametrize(
    "pool", [p for p in POOL_TABLE if p.name not in BASE_POOLS], ids=lambda p: p.name
)
def test_a_pool_is_absent_without_what_it_needs(pool):
    bare = next(
        (g, s)
        for g, s in DEPLOYMENTS
        if not pool.exists(PoolContext(g, stage_slice(g), s, RULES[-1]))
    )
    fp = footprint_for_tokens(bare[0], bare[1], "legacy", FULL, rules=RULES[-1])
    assert pool.name not in fp.pools
