"""Deployments SGLang refuses to start, refused here the same way, naming SGLang's check.

A number for a deployment SGLang will not run is worse than none: the operator would plan
capacity for a server that fails at start-up. Each check below is one SGLang assertion or
ValueError, read from the released wheels (docs/footprint.md, "Refusals"), with the first
release that makes it; ``tests/conformance`` runs each release's own code on deployments that
trip them and holds the model to refusing exactly when SGLang does.
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.footprint.geometry import ModelGeometry, StageSlice
from exporter.footprint.releases import RuleChoice, parse_release
from exporter.footprint.settings import DeploymentSettings

Release = tuple[int, int, int]

# Largest draft count a speculative compress-state ring serves (get_compress_state_write_pad:
# ring - window + 2, the window being 8 for c4 and 128 for c128): c4 ring 16 -> 10, c128 256 -> 130.
_C4_WINDOW, _C128_WINDOW = 8, 128


@dataclass(frozen=True)
class Refusal:
    """One refusal: SGLang's check (module and function), the releases making it, why."""

    check: str
    since: str
    message: str

    def __str__(self) -> str:
        return f"SGLang {self.since} refuses this deployment ({self.check}): {self.message}"


class Refused(ValueError):
    """SGLang would refuse to start this deployment; ``refusal`` says which check."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(str(refusal))
        self.refusal = refusal


def write_pad(compress_ratio: int, ring: int) -> int:
    """``get_compress_state_write_pad``: draft tokens a ring serves (0 for a one-window ring)."""
    window = _C4_WINDOW if compress_ratio == 4 else _C128_WINDOW
    return ring - window + 2 if ring > window else 0


def _at_least(release: Release, first: Release) -> bool:
    return release >= first


def _since(first: Release) -> str:
    return ".".join(map(str, first)) + "+"


# SGLang's built-in speculative algorithms (``SpeculativeAlgorithm``; --speculative-algorithm
# is a free string, so none of them is an argparse error). NEXTN is EAGLE's alias, resolved
# from the command line before any hook runs (``_resolve_speculative_algorithm_alias``).
SGLANG_SPECULATIVE_ALGORITHMS = (
    "EAGLE",
    "NEXTN",
    "EAGLE3",
    "STANDALONE",
    "NGRAM",
    "DFLASH",
    "DSPARK",
    "FROZEN_KV_MTP",
)
DSPARK_SINCE: Release = (0, 5, 16)


def dsv4_speculative_algorithms(release: Release) -> tuple[str, ...]:
    """The algorithms ``apply_deepseek_v4_defaults`` lets a DeepSeek-V4 launch run: EAGLE in
    every release, DSPARK too from 0.5.16 (``deepseek_v4_hook.py``)."""
    return ("EAGLE", "DSPARK") if _at_least(release, DSPARK_SINCE) else ("EAGLE",)


def speculative_refusals(
    algorithm: str, eagle_topk: int | None, choice: RuleChoice
) -> list[Refusal]:
    """``apply_deepseek_v4_defaults``' assertions on speculative decoding (every release):
    only EAGLE (and DSPARK from 0.5.16), EAGLE with top-k 1. NGRAM, EAGLE3, STANDALONE,
    DFLASH and FROZEN_KV_MTP are refused whatever their pools would be: SGLang never sizes
    a DeepSeek-V4 KV pool for them. ``algorithm`` is upper-case, NEXTN already EAGLE."""
    release = parse_release(choice.version)
    check = "deepseek_v4_hook.apply_deepseek_v4_defaults"
    allowed = dsv4_speculative_algorithms(release)
    if algorithm not in allowed:
        since = "0.5.12+" if algorithm != "DSPARK" else "0.5.12-0.5.15"
        return [
            Refusal(
                check,
                since,
                f"--speculative-algorithm {algorithm}: DeepSeek-V4 runs only "
                f"{' or '.join(allowed)} speculative decoding",
            )
        ]
    if algorithm == "EAGLE" and eagle_topk not in (None, 1):
        return [
            Refusal(
                check,
                "0.5.12+",
                f"--speculative-eagle-topk {eagle_topk}: only EAGLE with topk == 1 is "
                "supported for DeepSeek-V4",
            )
        ]
    return []


def config_refusals(
    geom: ModelGeometry,
    settings: DeploymentSettings,
    stage: StageSlice,
    choice: RuleChoice,
) -> list[Refusal]:
    """Refusals decided before any sizing: server arguments, the configurator's constructor
    and the device pool's layer mapping, in the order SGLang reaches them."""
    release = parse_release(choice.version)
    out: list[Refusal] = []
    spec = settings.speculative
    if geom.is_v41 and not _at_least(release, (0, 5, 21)):
        out.append(
            Refusal(
                "deepseek_v4_memory_pool.DeepSeekV4TokenToKVPool",
                "0.5.12-0.5.20",
                "Unsupported compression ratio: DeepSeek-V4.1's ratio-1/2 layers are served "
                "from 0.5.21",
            )
        )
    if geom.is_v41 and _at_least(release, (0, 5, 21)):
        # arg_groups/deepseek_v4_hook.py validate_deepseek_v41_features ("unsupported").
        check = "deepseek_v4_hook.validate_deepseek_v41_features"
        if spec:
            out.append(
                Refusal(
                    check,
                    "0.5.21+",
                    "DeepSeek-V4.1 does not support speculative decoding other than DSpark",
                )
            )
        if stage.pp_size > 1:
            out.append(
                Refusal(check, "0.5.21+", "DeepSeek-V4.1 does not support pipeline parallelism")
            )
    if settings.online_compress and spec:
        if not _at_least(release, (0, 5, 14)):
            out.append(
                Refusal(
                    "deepseek_v4_memory_pool.get_compress_state_ring_size",
                    "0.5.12-0.5.13",
                    "online c128 does not support MTP (SGLANG_OPT_USE_ONLINE_COMPRESS with "
                    "--speculative-algorithm)",
                )
            )
        elif not settings.online_c128_mtp:
            out.append(
                Refusal(
                    "pool_configurator.DSV4PoolConfigurator.__init__",
                    "0.5.14+",
                    "SGLANG_OPT_USE_ONLINE_COMPRESS does not support speculative decode (MTP) "
                    "without SGLANG_EXPERIMENTAL_ONLINE_C128_MTP=1",
                )
            )
        elif settings.num_draft_tokens < 1:
            out.append(
                Refusal(
                    "pool_configurator.DSV4PoolConfigurator.__init__",
                    "0.5.14+",
                    "SGLANG_EXPERIMENTAL_ONLINE_C128_MTP requires speculative_num_draft_tokens",
                )
            )
    if (
        settings.online_compress
        and settings.compress_state_dtype == "bfloat16"
        and (0, 5, 14) <= release <= (0, 5, 15)
    ):
        out.append(
            Refusal(
                "pool_configurator._get_dsv4_compress_state_dtype_sizes",
                "0.5.14-0.5.15",
                "SGLANG_DSV4_COMPRESS_STATE_DTYPE=bf16 is not supported with "
                "SGLANG_OPT_USE_ONLINE_COMPRESS=1; online c128 state must stay float32",
            )
        )
    if spec and _at_least(release, (0, 5, 18)):
        for ratio, ring, layers in (
            (4, settings.ring_c4, stage.main.c4),
            (128, settings.ring_c128, stage.main.c128),
        ):
            if not layers or (ratio == 128 and settings.online_compress):
                continue
            most = write_pad(ratio, ring)
            if settings.num_draft_tokens > most:
                out.append(
                    Refusal(
                        "pool_configurator.DSV4PoolConfigurator._assert_ring_serves_draft_tokens",
                        _since((0, 5, 18)),
                        f"speculative_num_draft_tokens={settings.num_draft_tokens} exceeds what "
                        f"the c{ratio} compress state ring keeps resident (ring_size={ring} "
                        f"serves at most {most} draft tokens)",
                    )
                )
    if geom.is_v41 and _at_least(release, (0, 5, 21)):
        out.extend(_kv_source_refusals(geom, stage))
    return out


def _kv_source_refusals(geom: ModelGeometry, stage: StageSlice) -> list[Refusal]:
    """``DeepSeekV4TokenToKVPool.source_layer_of`` (0.5.21+): every ratio-1/2 layer of the
    stage reads the nearest kv_source layer of its ratio at or before it, within the stage
    (``collect_sources_by_ratio`` keeps only the stage's own sources)."""
    ratios = geom.main_ratios
    sources = set(geom.kv_source_layer_ids)
    for idx in range(stage.start, stage.end):
        ratio = ratios[idx]
        if ratio not in (1, 2):
            continue
        owned = [i for i in range(stage.start, idx + 1) if i in sources and ratios[i] == ratio]
        if not owned:
            return [
                Refusal(
                    "deepseek_v4_memory_pool.DeepSeekV4TokenToKVPool.source_layer_of",
                    "0.5.21+",
                    f"layer {idx} (ratio {ratio}) has no kv_source layer on PP stage "
                    f"{stage.pp_rank} (layers [{stage.start}, {stage.end}))",
                )
            ]
    return []


def size_refusals(
    settings: DeploymentSettings, window: int, swa_tokens: int, cap_mode: bool, choice: RuleChoice
) -> list[Refusal]:
    """Refusals of the sized pools: ``validate_swa_pool_size`` (0.5.20+, ratio mode): an SWA
    pool of at most window + page slots cannot admit one request."""
    release = parse_release(choice.version)
    if not _at_least(release, (0, 5, 20)) or cap_mode:
        return []
    if window + settings.page_size >= swa_tokens:
        return [
            Refusal(
                "pool_configurator.MemoryPoolConfigurator.validate_swa_pool_size",
                "0.5.20+",
                f"SWA pool ({swa_tokens} tokens) cannot hold even one request: the prefill "
                f"admission floor is sliding_window_size ({window}) + page_size "
                f"({settings.page_size}); raise --swa-full-tokens-ratio or the KV budget",
            )
        ]
    return []
