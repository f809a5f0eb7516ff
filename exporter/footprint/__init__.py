"""Pure domain core: the fixed DSV4 pool-footprint model (no I/O beyond reading a config file).

Three layers, each kept separate so every number can be explained:
geometry (what the model is) -> pricing (what the configurator plans) -> allocation (what the
device pool takes). ``model`` combines them into a per-rank :class:`Footprint`. Every sub-pool
is one row of ``pools.POOL_TABLE``, which all three read.
"""

from exporter.footprint.allocation import allocated_bytes
from exporter.footprint.geometry import (
    GeometryError,
    LayerCounts,
    ModelGeometry,
    StageSlice,
    geometry_from_config,
    load_config_json,
    parse_pp_partition,
    pp_partition,
    stage_slice,
)
from exporter.footprint.model import (
    Footprint,
    PipelinePlan,
    PoolFootprint,
    footprint_for_tokens,
    not_modelled,
    plan_for_budget,
    plan_pipeline,
)
from exporter.footprint.pools import BASE_POOLS, POOL_TABLE, Pool, PoolContext, pools_in
from exporter.footprint.presets import PRESETS, preset_for_served_name, resolve_model
from exporter.footprint.pricing import (
    BudgetError,
    available_bytes_from_gpu,
    indexer_bytes_per_token,
    kv_bytes_per_token,
    token_coefficient,
)
from exporter.footprint.releases import (
    NEWEST_RELEASE,
    RULES,
    ReleaseRules,
    RuleChoice,
    VersionError,
    rules_for_version,
)
from exporter.footprint.settings import (
    CONFIGURATORS,
    INDEX_K_DTYPES,
    NOT_MODELLED_SWITCHES,
    Configurator,
    DeploymentSettings,
    IndexKDtype,
    SettingsError,
)

__all__ = [
    "BASE_POOLS",
    "CONFIGURATORS",
    "INDEX_K_DTYPES",
    "NEWEST_RELEASE",
    "NOT_MODELLED_SWITCHES",
    "POOL_TABLE",
    "PRESETS",
    "RULES",
    "BudgetError",
    "Configurator",
    "DeploymentSettings",
    "Footprint",
    "GeometryError",
    "IndexKDtype",
    "LayerCounts",
    "ModelGeometry",
    "PipelinePlan",
    "Pool",
    "PoolContext",
    "PoolFootprint",
    "ReleaseRules",
    "RuleChoice",
    "SettingsError",
    "StageSlice",
    "VersionError",
    "allocated_bytes",
    "available_bytes_from_gpu",
    "footprint_for_tokens",
    "geometry_from_config",
    "indexer_bytes_per_token",
    "kv_bytes_per_token",
    "load_config_json",
    "not_modelled",
    "parse_pp_partition",
    "plan_for_budget",
    "plan_pipeline",
    "pools_in",
    "pp_partition",
    "preset_for_served_name",
    "resolve_model",
    "rules_for_version",
    "stage_slice",
    "token_coefficient",
]
