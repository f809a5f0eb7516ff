"""SGLang's ``/server_info`` (``/get_server_info`` before 0.5.x) as validated facts.

A pure parser: a decoded JSON object in, :class:`ServerFacts` out, no I/O. Field names move
between SGLang versions, so extraction is defensive and tested against recorded shapes from
several releases (tests/fixtures/sglang). Everything is bounded before it is used: parallel
sizes to ``0..MAX_PARALLEL`` and ranks to ``MAX_RANKS`` (``tp_size: 10**8`` once froze the event
loop), numbers finite, strings that become label values or log text matched or length-capped.
A value out of bounds raises :class:`ShapeError` naming the field (the source is then down
with ``bad_shape``); an odd optional value is absent, never an error.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from exporter.sources.sglang.memory import RankMemory, memory_usage_of

DSV4_DEFAULT_SWA_RATIO = 0.1
GLOBAL_DEFAULT_SWA_RATIO = 0.8
DSV4_DEFAULT_MAX_RUNNING = 256
# /server_info strings that become label values or log text: a release string, a model path.
_VERSION = re.compile(r"[0-9A-Za-z.+_-]{1,64}")
MAX_MODEL_PATH = 512


class ShapeError(ValueError):
    """The JSON parsed but lacks what the sidecar needs; the message names the field."""


@dataclass(frozen=True)
class ServerFacts:
    """What the sidecar needs from /server_info, normalised across versions."""

    version: str
    model_path: str
    served_model_name: str
    tp_size: int
    dp_size: int
    pp_size: int
    mem_fraction_static: float | None
    page_size: int
    swa_full_tokens_ratio: float
    max_running_requests: int
    speculative: bool
    speculative_algorithm: str | None
    fp4_indexer: bool
    hicache: bool
    max_total_num_tokens: int | None
    weights_gb: float | None = None
    # SGLang's --nnodes (a server arg, so /server_info has it); --node-rank there is the
    # head's own (0): each node's rank comes from its pod (the node_rank setting).
    nnodes: int = 1
    memory: RankMemory | None = None  # internal_states[0].memory_usage (DP worker 0)
    # Server args that size the SWA pool in cap mode (0.5.21+, footprint.pricing.swa_cap_tokens);
    # None where /server_info lacks them (the footprint then assumes SGLang's defaults).
    chunked_prefill_size: int | None = None
    swa_prefix_tails: int | None = None
    disable_radix_cache: bool = False
    disable_overlap_schedule: bool = False
    # Attention DP (--enable-dp-attention; 0.5.23 also attn_dp_size): SGLang's
    # max_running_requests is global and divided per attention-DP worker.
    enable_dp_attention: bool = False
    attn_dp_size: int | None = None
    # max_running_requests as /server_info reports it (global) or None when only the per-DP
    # effective value was reported (then max_running_requests above is already per worker).
    max_running_requests_global: int | None = None
    speculative_num_draft_tokens: int | None = None

    @property
    def model(self) -> str:
        return self.served_model_name or self.model_path

    def server_args(self) -> dict[str, object]:
        """The pool-sizing server args under SGLang's own names (``ServerArgs`` fields, as
        ``footprint.launch.LAUNCH_FIELDS`` names them), for ``launch_from_server_args``. When
        /server_info reported only the per-worker request count, that count is given with
        attention DP left out, so that it is not divided again."""
        args: dict[str, object] = {
            "tp_size": self.tp_size,
            "pp_size": self.pp_size,
            "dp_size": self.dp_size,
            "enable_dp_attention": self.enable_dp_attention,
            "attn_dp_size": self.attn_dp_size,
            "max_running_requests": self.max_running_requests_global,
            "speculative_algorithm": self.speculative_algorithm if self.speculative else None,
            "speculative_num_draft_tokens": self.speculative_num_draft_tokens,
            "page_size": self.page_size,
            "chunked_prefill_size": self.chunked_prefill_size,
            "swa_full_tokens_ratio": self.swa_full_tokens_ratio,
            "swa_prefix_tails": self.swa_prefix_tails,
            "disable_radix_cache": self.disable_radix_cache,
            "disable_overlap_schedule": self.disable_overlap_schedule,
            "enable_deepseek_v4_fp4_indexer": self.fp4_indexer,
            "mem_fraction_static": self.mem_fraction_static,
        }
        if self.max_running_requests_global is None:
            args.update(
                max_running_requests=self.max_running_requests,
                enable_dp_attention=False,
                attn_dp_size=None,
            )
        return args


# Most ranks one deployment can have along any parallel axis (TP, PP, DP): far past any
# published DSV4 launch (TP 16 over two nodes, PP 4, DP 16), and the bound on what a hostile
# /server_info can make the sidecar iterate over or export (tp_size: 10**8 froze the loop).
MAX_PARALLEL = 256
_PARALLEL = ("tp_size", "dp_size", "pp_size", "nnodes")
# Most GPUs one deployment's pipeline can span (TP x PP): every rank is a series and a loop
# iteration per refresh, so the product is bounded as well as each axis (256 x 256 is 65,536).
MAX_RANKS = 1024


def _num(d: Mapping[str, Any], key: str, kind: type, default: Any = None) -> Any:
    v = d.get(key, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ShapeError(f"server_info field {key!r} should be a finite number, got {v!r:.64}")
    if key in _PARALLEL and not 0 <= v <= MAX_PARALLEL:
        raise ShapeError(f"server_info field {key!r} is {v!r:.64}, outside 0..{MAX_PARALLEL}")
    return kind(v)


def _served_name(value: Any, model_path: str) -> str:
    """The name clients send as ``model`` (the canary too): SGLang's, when it is a sane one."""
    if isinstance(value, str) and 0 < len(value) <= MAX_MODEL_PATH:
        return value
    return model_path


def parse_server_info(d: Any) -> ServerFacts:
    """Normalise a /server_info JSON object (any supported version) into ServerFacts."""
    if not isinstance(d, Mapping):
        raise ShapeError("server_info is not a JSON object")
    states = d.get("internal_states")
    state0: Mapping[str, Any] = {}
    if isinstance(states, list) and states and isinstance(states[0], Mapping):
        state0 = states[0]
    tokens = _num(d, "max_total_num_tokens", int)
    if tokens is None:
        tokens = _num(state0, "max_total_num_tokens", int)
    if tokens is None and isinstance(state0.get("memory_usage"), Mapping):
        tokens = _num(state0["memory_usage"], "token_capacity", int)
    swa = _num(d, "swa_full_tokens_ratio", float)
    if swa is None or swa == GLOBAL_DEFAULT_SWA_RATIO:
        swa = DSV4_DEFAULT_SWA_RATIO  # SGLang's DSV4 override of the global default
    mrr_global = _num(d, "max_running_requests", int)
    mrr = mrr_global
    if mrr is None:
        mrr = _num(state0, "effective_max_running_requests_per_dp", int, DSV4_DEFAULT_MAX_RUNNING)
    weights = None
    if isinstance(state0.get("memory_usage"), Mapping):
        weights = _num(state0["memory_usage"], "weight", float)
    model_path = d.get("model_path")
    if not isinstance(model_path, str) or not model_path:
        raise ShapeError("server_info has no 'model_path'")
    if len(model_path) > MAX_MODEL_PATH:
        raise ShapeError(f"server_info 'model_path' is {len(model_path)} characters long")
    version = str(d.get("version") or "unknown")
    if not _VERSION.fullmatch(version):
        version = "unparseable"  # read as an unknown release (legacy rules), never a label
    algo = d.get("speculative_algorithm")
    tp, pp = _num(d, "tp_size", int, 1), _num(d, "pp_size", int, 1)
    if tp * pp > MAX_RANKS:
        raise ShapeError(f"server_info tp_size x pp_size is {tp * pp}, more than {MAX_RANKS} GPUs")
    return ServerFacts(
        version=version,
        model_path=model_path,
        served_model_name=_served_name(d.get("served_model_name"), model_path),
        tp_size=tp,
        dp_size=_num(d, "dp_size", int, 1),
        pp_size=pp,
        mem_fraction_static=_num(d, "mem_fraction_static", float),
        page_size=_num(d, "page_size", int, 256) or 256,
        swa_full_tokens_ratio=swa,
        max_running_requests=mrr,
        speculative=bool(algo) and str(algo).upper() != "NONE",
        speculative_algorithm=str(algo) if algo else None,
        fp4_indexer=bool(d.get("enable_deepseek_v4_fp4_indexer", False)),
        hicache=bool(d.get("enable_hierarchical_cache", False)),
        max_total_num_tokens=tokens,
        weights_gb=weights,
        nnodes=max(_num(d, "nnodes", int, 1) or 1, 1),
        memory=memory_usage_of(state0),
        chunked_prefill_size=_num(d, "chunked_prefill_size", int),
        swa_prefix_tails=_num(d, "swa_prefix_tails", int),
        disable_radix_cache=bool(d.get("disable_radix_cache", False)),
        disable_overlap_schedule=bool(d.get("disable_overlap_schedule", False)),
        enable_dp_attention=bool(d.get("enable_dp_attention", False)),
        attn_dp_size=_num(d, "attn_dp_size", int),
        max_running_requests_global=mrr_global,
        speculative_num_draft_tokens=_num(d, "speculative_num_draft_tokens", int),
    )


def tool_call_parser_of(d: Any) -> str | None:
    """``tool_call_parser`` from a /server_info object (SGLang reports every server arg there),
    or None when absent or not a string. Kept apart from :func:`parse_server_info`: only the
    DSML grader needs it, and a missing or odd value must never fail the poll."""
    if not isinstance(d, Mapping):
        return None
    value = d.get("tool_call_parser")
    return value if isinstance(value, str) and value else None
