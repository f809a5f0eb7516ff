"""DeepSeek-V4 model geometry: what the KV pools are sized from.

Read from a Hugging Face ``config.json`` when one is available (re-releases change the layer
mix), else from a built-in preset. Only the fields the pool configurator uses are kept, and a
config that is not DeepSeek-V4-shaped is rejected naming the field, because pricing a wrong
geometry silently is exactly the failure this project exists to expose.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class GeometryError(ValueError):
    """The config is unreadable or not DeepSeek-V4-shaped; the message names the field."""


VALID_RATIOS = (0, 4, 128)
# DeepSeek-V4.1 (sglang/srt/configs/deepseek_v41.py, served from 0.5.21) adds ratio-1 and
# ratio-2 compressed layers, whose storage lives on their kv_source layers.
V41_RATIOS = (0, 1, 2, 4, 128)
V41_MODEL_TYPES = ("deepseek_v41", "deepseek_v41_text")
V41_ARCHITECTURES = ("DeepseekV41ForCausalLM",)


@dataclass(frozen=True)
class ModelGeometry:
    """The subset of a DeepSeek-V4 config that determines KV-pool sizes."""

    name: str
    num_hidden_layers: int
    head_dim: int  # latent width: nope + rope
    qk_rope_head_dim: int
    sliding_window: int
    index_head_dim: int
    index_n_heads: int
    index_topk: int
    num_nextn_predict_layers: int
    compress_ratios: tuple[int, ...]  # main layers first, then MTP/draft entries
    model_type: str = "deepseek_v4"
    kv_source_layer_ids: tuple[int, ...] = ()
    index_source_layer_ids: tuple[int, ...] = ()

    @property
    def is_v41(self) -> bool:
        return self.model_type in V41_MODEL_TYPES or any(r in (1, 2) for r in self.compress_ratios)

    @property
    def qk_nope_head_dim(self) -> int:
        """SGLang derives NoPE width as head_dim - rope rather than reading it."""
        return self.head_dim - self.qk_rope_head_dim

    @property
    def main_ratios(self) -> tuple[int, ...]:
        return self.compress_ratios[: self.num_hidden_layers]

    @property
    def draft_ratios(self) -> tuple[int, ...]:
        """Entries past the main layers belong to MTP draft layers (not priced as main layers)."""
        return self.compress_ratios[self.num_hidden_layers :]


@dataclass(frozen=True)
class LayerCounts:
    """Layer mix of one pipeline stage (or of the draft layers).

    DeepSeek-V4.1's ratio-1/2 layers: ``low_ratio`` counts them all (each has SWA KV);
    ``c1`` / ``c2`` count only their kv_source layers, which own the compressed storage
    (``collect_sources_by_ratio``, SGLang 0.5.21+).
    """

    swa_only: int
    c4: int
    c128: int
    low_ratio: int = 0
    c1: int = 0
    c2: int = 0

    @property
    def total(self) -> int:
        return self.swa_only + self.c4 + self.c128 + self.low_ratio

    @classmethod
    def of(cls, ratios: Sequence[int], sources: Sequence[int] = (), offset: int = 0) -> LayerCounts:
        """Counts of ``ratios`` (layer ``offset + i`` for entry ``i``); ``sources`` are the
        kv_source layer ids of the ratio-1/2 layers."""
        owned = {i - offset for i in sources}
        return cls(
            swa_only=sum(1 for r in ratios if r == 0),
            c4=sum(1 for r in ratios if r == 4),
            c128=sum(1 for r in ratios if r == 128),
            low_ratio=sum(1 for r in ratios if r in (1, 2)),
            c1=sum(1 for i, r in enumerate(ratios) if r == 1 and i in owned),
            c2=sum(1 for i, r in enumerate(ratios) if r == 2 and i in owned),
        )


@dataclass(frozen=True)
class StageSlice:
    """The layers one pipeline stage (one rank's pool) holds: [start, end) of the main layers."""

    start: int
    end: int
    pp_rank: int
    pp_size: int
    main: LayerCounts
    draft: LayerCounts


def pp_partition(
    num_layers: int, pp_size: int, partition: Sequence[int] | None = None
) -> list[int]:
    """Layers per PP stage, as SGLang's ``get_pp_indices`` (``srt/distributed/utils.py``,
    reached from ``models/deepseek_v4.py`` through ``make_pp_layers``; the same in every
    release 0.5.12-0.5.23) splits them: an even share each, and the remainder one apiece to
    the *last* stages (``pp_rank >= pp_size - remainder``). ``partition`` is
    ``SGLANG_PP_LAYER_PARTITION`` (comma-separated layers per stage), which replaces the
    even split when given; SGLang refuses a list of the wrong length or sum, so does this."""
    if pp_size < 1:
        raise GeometryError(f"pp_size must be >= 1, got {pp_size}")
    if partition is not None:
        parts = list(partition)
        if len(parts) != pp_size:
            raise GeometryError(
                f"SGLANG_PP_LAYER_PARTITION has {len(parts)} entries, pp_size is {pp_size} "
                "(get_pp_indices: len(partitions) does not match pp_size)"
            )
        if sum(parts) != num_layers:
            raise GeometryError(
                f"SGLANG_PP_LAYER_PARTITION sums to {sum(parts)}, the model has "
                f"{num_layers} layers (get_pp_indices: sum(partitions) does not match "
                "num_hidden_layers)"
            )
        if any(n < 1 for n in parts):
            raise GeometryError(
                f"SGLANG_PP_LAYER_PARTITION {parts}: every stage needs at least one layer"
            )
        return parts
    if pp_size > num_layers:
        raise GeometryError(f"pp_size {pp_size} exceeds num_hidden_layers {num_layers}")
    base, remainder = divmod(num_layers, pp_size)
    return [base + (1 if rank >= pp_size - remainder else 0) for rank in range(pp_size)]


def parse_pp_partition(raw: str) -> tuple[int, ...]:
    """``SGLANG_PP_LAYER_PARTITION`` as ``get_pp_indices`` reads it: comma-separated ints."""
    try:
        return tuple(int(part) for part in raw.split(","))
    except ValueError:
        raise GeometryError(
            f"SGLANG_PP_LAYER_PARTITION={raw!r} is not a comma-separated list of layer "
            "counts (get_pp_indices: Invalid partition string)"
        ) from None


def stage_slice(
    geom: ModelGeometry,
    pp_size: int = 1,
    pp_rank: int = 0,
    layer_range: tuple[int, int] | None = None,
    partition: Sequence[int] | None = None,
) -> StageSlice:
    """The stage's layer range, by SGLang's split (``partition``: SGLANG_PP_LAYER_PARTITION)
    or an explicit ``[start, end)``.

    Draft (MTP) layers are attributed to the last stage, where the draft worker runs.
    """
    if layer_range is not None:
        start, end = layer_range
        if not 0 <= start < end <= geom.num_hidden_layers:
            raise GeometryError(
                f"layer range [{start}, {end}) is outside 0..{geom.num_hidden_layers}"
            )
    else:
        if not 0 <= pp_rank < pp_size:
            raise GeometryError(f"pp_rank {pp_rank} must be in 0..{pp_size - 1}")
        parts = pp_partition(geom.num_hidden_layers, pp_size, partition)
        start = sum(parts[:pp_rank])
        end = start + parts[pp_rank]
    is_last = end == geom.num_hidden_layers
    return StageSlice(
        start=start,
        end=end,
        pp_rank=pp_rank,
        pp_size=pp_size,
        main=LayerCounts.of(geom.main_ratios[start:end], geom.kv_source_layer_ids, start),
        draft=LayerCounts.of(geom.draft_ratios if is_last else ()),
    )


_REQUIRED_INT_FIELDS = (
    "num_hidden_layers",
    "head_dim",
    "qk_rope_head_dim",
    "index_head_dim",
    "index_n_heads",
    "index_topk",
)


def _flatten_v41(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """V4.1 nests the text model under ``text_config``; SGLang merges it into the top level,
    top-level keys winning (``normalize_deepseek_v41_config``)."""
    values = dict(cfg)
    text = values.pop("text_config", None)
    if isinstance(text, Mapping):
        text = {k: v for k, v in text.items() if k != "model_type"}
        values = {**text, **values}
    return values


def _layer_ids(cfg: Mapping[str, Any], key: str, name: str) -> tuple[int, ...]:
    raw = cfg.get(key) or ()
    if not isinstance(raw, (list, tuple)) or any(
        isinstance(i, bool) or not isinstance(i, int) or i < 0 for i in raw
    ):
        raise GeometryError(f"{name}: field {key!r} must be a list of layer indices, got {raw!r}")
    return tuple(raw)


def geometry_from_config(cfg: Mapping[str, Any], name: str = "config.json") -> ModelGeometry:
    """Validate a parsed HF config and keep the pool-relevant fields."""
    if not isinstance(cfg, Mapping):
        raise GeometryError(f"{name}: expected a JSON object at the top level")
    model_type = cfg.get("model_type")
    archs = cfg.get("architectures") or []
    is_v41 = model_type in V41_MODEL_TYPES or any(a in V41_ARCHITECTURES for a in archs)
    if is_v41:
        cfg = _flatten_v41(cfg)
    elif model_type != "deepseek_v4" and "DeepseekV4ForCausalLM" not in archs:
        raise GeometryError(
            f"{name}: not a DeepSeek-V4 config (model_type={model_type!r}, "
            f"architectures={archs!r}); expected model_type 'deepseek_v4' or 'deepseek_v41'"
        )
    values: dict[str, int] = {}
    for key in _REQUIRED_INT_FIELDS:
        v = cfg.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise GeometryError(f"{name}: field {key!r} must be a positive integer, got {v!r}")
        values[key] = v
    window = cfg.get("sliding_window", cfg.get("window_size"))
    if isinstance(window, bool) or not isinstance(window, int) or window <= 0:
        raise GeometryError(
            f"{name}: field 'sliding_window' must be a positive integer, got {window!r}"
        )
    mtp = cfg.get("num_nextn_predict_layers", 0)
    if isinstance(mtp, bool) or not isinstance(mtp, int) or mtp < 0:
        raise GeometryError(f"{name}: field 'num_nextn_predict_layers' must be >= 0, got {mtp!r}")
    if values["qk_rope_head_dim"] >= values["head_dim"]:
        raise GeometryError(f"{name}: field 'qk_rope_head_dim' must be smaller than 'head_dim'")
    ratios = cfg.get("compress_ratios")
    if not isinstance(ratios, list) or not ratios:
        raise GeometryError(f"{name}: field 'compress_ratios' is missing or not a list")
    valid = V41_RATIOS if is_v41 else VALID_RATIOS
    bad = [r for r in ratios if isinstance(r, bool) or r not in valid]
    if bad:
        kind = "DeepSeek-V4.1" if is_v41 else "DeepSeek-V4"
        raise GeometryError(
            f"{name}: field 'compress_ratios' has values {sorted(set(map(repr, bad)))}; "
            f"only {valid} are {kind} layer kinds"
        )
    if len(ratios) < values["num_hidden_layers"]:
        raise GeometryError(
            f"{name}: field 'compress_ratios' has {len(ratios)} entries, fewer than "
            f"num_hidden_layers={values['num_hidden_layers']}"
        )
    return ModelGeometry(
        name=str(cfg.get("_name_or_path") or name),
        num_hidden_layers=values["num_hidden_layers"],
        head_dim=values["head_dim"],
        qk_rope_head_dim=values["qk_rope_head_dim"],
        sliding_window=window,
        index_head_dim=values["index_head_dim"],
        index_n_heads=values["index_n_heads"],
        index_topk=values["index_topk"],
        num_nextn_predict_layers=mtp,
        compress_ratios=tuple(int(r) for r in ratios),
        model_type="deepseek_v41" if is_v41 else "deepseek_v4",
        kv_source_layer_ids=_layer_ids(cfg, "kv_source_layer_ids", name),
        index_source_layer_ids=_layer_ids(cfg, "index_source_layer_ids", name),
    )


def load_config_json(path: str | Path) -> ModelGeometry:
    """Load geometry from a config.json file, or a model directory holding one."""
    p = Path(path)
    if p.is_dir():
        p = p / "config.json"
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise GeometryError(f"cannot read model config {p}: {exc.strerror or exc}") from exc
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as exc:
        raise GeometryError(f"{p}: not valid JSON ({exc.msg} at line {exc.lineno})") from exc
    geom = geometry_from_config(cfg, name=str(p))
    return geom
