"""Built-in geometries of the published DeepSeek-V4 checkpoints (fallback when no config.json).

Values are the published config.json fields of deepseek-ai/DeepSeek-V4-Flash and -Pro on
Hugging Face (docs/footprint.md, "Geometry").
"""

from __future__ import annotations

from exporter.footprint.geometry import GeometryError, ModelGeometry, load_config_json

_FLASH_RATIOS = (0, 0, *([4, 128] * 20), 4, 0)
_PRO_RATIOS = (128, 128, *([4, 128] * 29), 4, 0)

PRESETS: dict[str, ModelGeometry] = {
    "deepseek-v4-flash": ModelGeometry(
        name="deepseek-v4-flash",
        num_hidden_layers=43,
        head_dim=512,
        qk_rope_head_dim=64,
        sliding_window=128,
        index_head_dim=128,
        index_n_heads=64,
        index_topk=512,
        num_nextn_predict_layers=1,
        compress_ratios=_FLASH_RATIOS,
    ),
    "deepseek-v4-pro": ModelGeometry(
        name="deepseek-v4-pro",
        num_hidden_layers=61,
        head_dim=512,
        qk_rope_head_dim=64,
        sliding_window=128,
        index_head_dim=128,
        index_n_heads=64,
        index_topk=1024,
        num_nextn_predict_layers=1,
        compress_ratios=_PRO_RATIOS,
    ),
}


# Published checkpoints of each preset's geometry, by the last component of their path (the
# Hugging Face repository name): quantised or dated re-releases keep the architecture and
# the shape that size the KV pools. Matched exactly (case-insensitive), never as a substring:
# "pro" is in "/home/prod/...", "my-proxy/..." and "sgl-project/DeepSeek-V4-Flash-FP8", and a
# substring match once priced all three as V4-Pro (issue 33).
CHECKPOINTS: dict[str, str] = {
    "deepseek-v4-flash": "deepseek-v4-flash",
    "deepseek-v4-flash-fp8": "deepseek-v4-flash",
    "deepseek-v4-flash-bf16": "deepseek-v4-flash",
    "deepseek-v4-flash-0731": "deepseek-v4-flash",
    "deepseek-v4-pro": "deepseek-v4-pro",
    "deepseek-v4-pro-fp8": "deepseek-v4-pro",
    "deepseek-v4-pro-nvfp4": "deepseek-v4-pro",
}


def preset_for_served_name(served: str) -> ModelGeometry | None:
    """The preset of a served model name or path whose last component is a published
    checkpoint's name (``CHECKPOINTS``, exact, case-insensitive): ``deepseek-ai/DeepSeek-V4-Pro``
    and ``/models/DeepSeek-V4-Flash-FP8`` match, ``/home/prod/my-model`` does not. Anything
    else is None: the caller asks for a config.json or a preset name rather than guess."""
    base = served.strip().rstrip("/").rsplit("/", 1)[-1].lower().replace("_", "-")
    preset = CHECKPOINTS.get(base)
    return PRESETS[preset] if preset is not None else None


def resolve_model(spec: str) -> ModelGeometry:
    """A preset name, or a path to a config.json / model directory."""
    key = spec.strip().lower()
    if key in PRESETS:
        return PRESETS[key]
    if "/" in spec or spec.endswith(".json") or spec.startswith("."):
        return load_config_json(spec)
    raise GeometryError(
        f"unknown model {spec!r}: use a preset ({', '.join(PRESETS)}) or a path to config.json"
    )
