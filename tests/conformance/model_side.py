"""The footprint model's side of a conformance comparison: a raw deployment (launch flags,
environment, config.json, PP rank, budget) through the same path as ``plan --``
(``launch.parse_launch`` -> ``launch.resolve`` -> ``plan_pipeline``: every PP stage, synced),
shared by tests/conformance and the GPU check (tests/gpu/pool_check.py)."""

from __future__ import annotations

import dataclasses
from typing import Any

from exporter.footprint import (
    allocated_bytes,
    geometry_from_config,
    plan_pipeline,
)
from exporter.footprint.allocation import allocated_tensors
from exporter.footprint.launch import LaunchError, parse_launch, resolve
from exporter.footprint.pricing import (
    BudgetError,
    counts_for_full_tokens,
    resolved_max_running_requests,
)
from exporter.footprint.refusals import Refused
from exporter.footprint.releases import rules_for_version


def model_for_case(
    version: str, case: dict[str, Any], index_k_dtype: str | None = None
) -> dict[str, Any]:
    """The model on the raw deployment, through plan's own path. ``index_k_dtype`` is the one
    fact a launch does not carry: what a fork stores (``bf16``), as ``plan --index-k-dtype``."""
    geom = geometry_from_config(case["config"])
    choice = rules_for_version(version)
    try:
        resolved = resolve(parse_launch(case["argv"], case["env"]), geom, choice)
        if index_k_dtype is not None:
            resolved = dataclasses.replace(
                resolved,
                settings=dataclasses.replace(resolved.settings, index_k_dtype=index_k_dtype),
            )
    except LaunchError as exc:
        return {"not_modelled": str(exc)}
    except Refused as exc:
        return {"refused": str(exc)}
    try:
        pipeline = plan_pipeline(
            geom,
            resolved.settings,
            "legacy",
            case["available_bytes"],
            choice,
            resolved.pp_size,
            resolved.partition,
            resolved.max_total_tokens,
        )
    except Refused as exc:
        return {"refused": str(exc)}
    except BudgetError as exc:  # SGLang sizes 0 tokens there (its server then cannot start)
        return {"no_tokens": str(exc)}
    stages = []
    for fp, own in zip(pipeline.stages, pipeline.own_full_tokens, strict=True):
        stage = fp.stage
        counts = counts_for_full_tokens(geom, fp.settings, fp.full_tokens, choice.rules, stage)
        stages.append(
            {
                "tensors": allocated_tensors(
                    geom, stage, fp.settings, counts, choice.rules, include_draft=False
                ),
                "layers": [stage.start, stage.end],
                "own_full": own,
                "full": fp.full_tokens,
                "counts": counts,
                "pools": allocated_bytes(
                    geom, stage, fp.settings, counts, choice.rules, include_draft=False
                ),
                "mrr": resolved_max_running_requests(fp.settings, fp.full_tokens),
            }
        )
    return {**stages[case["pp_rank"]], "stages": stages, "switches": resolved.not_modelled}
