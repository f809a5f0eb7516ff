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


def preset_for_served_name(served: str) -> ModelGeometry | None:
    """Match a served model name or path (e.g. ``deepseek-ai/DeepSeek-V4-Flash-0731``) to a preset.

    Pro is checked first since neither name is a substring of the other but ``flash`` is the
    more common token in custom served names.
    """
    s = served.lower().replace("_", "-")
    if "v4" not in s:
        return None
    if "pro" in s:
        return PRESETS["deepseek-v4-pro"]
    if "flash" in s:
        return PRESETS["deepseek-v4-flash"]
    return None


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
