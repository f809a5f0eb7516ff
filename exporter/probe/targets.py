"""What the probe wraps in SGLang, and the wrappers themselves.

Names and call shapes come from public SGLang sources (``LayerDoneCounter`` and
``LayerLoadingEvent`` in ``sglang.srt.managers.cache_controller``; ``DeepSeekV4TokenToKVPool``
in ``sglang.srt.mem_cache.deepseek_v4_memory_pool``; ``DSV4PoolConfigurator`` in
``sglang.srt.model_executor.pool_configurator``). docs/probe.md classifies every accessor of
the pool in every supported release (0.5.12 ... 0.5.23); tests/probe/test_release_probe.py
checks that table and these hooks against the released code. Each method is checked before it is
wrapped: a missing class or method, or a first parameter under an unexpected name, disables
only that measurement, with one log line per class naming what was not found.

Every wrapper calls the original first, unchanged, and returns its value (or lets its
exception through untouched); the probe's own work runs afterwards inside ``try`` so that a
probe bug is counted and logged, never raised into SGLang.
"""

from __future__ import annotations

import functools
import inspect
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from types import FunctionType, ModuleType
from typing import Any

from exporter.probe.memory import fixed_bytes_methods
from exporter.probe.runtime import HookSlot, Probe
from exporter.probe.snapshot import INDEX_K_HOOKS

logger = logging.getLogger("exporter.probe")

COUNTER_MODULE = "sglang.srt.managers.cache_controller"
POOL_MODULE = "sglang.srt.mem_cache.deepseek_v4_memory_pool"
CONFIG_MODULE = "sglang.srt.model_executor.pool_configurator"
CONFIG_CLASS = "DSV4PoolConfigurator"
# The configurator's sizing calls: a byte budget (start-up) or a token count (draft workers,
# --max-total-tokens). Their first parameter's names across releases.
SIZING_METHODS = (
    ("calculate_pool_sizes", ("available_bytes",)),
    ("calculate_pool_sizes_from_max_tokens", ("max_total_num_tokens", "max_tokens")),
)
WRAPPED = "__dsv4_probe_wrapped__"


@dataclass(frozen=True)
class Method:
    hook: str
    name: str
    params: tuple[str, ...]  # accepted names of the first parameter after self; () = none
    essential: bool = False


COUNTER_METHODS = (
    Method("load_start", "update_producer", (), essential=True),
    Method("consumer", "set_consumer", ("index", "indices", "consumer_index"), essential=True),
    Method("wait", "wait_until", ("threshold",), essential=True),
    Method("counter_reset", "reset", ()),
)
EVENT_METHODS = (Method("layer_done", "complete", ("layer_index",), essential=True),)
POOL_METHODS = (
    Method("index_k_with_scale", "get_index_k_with_scale_buffer", ("layer_id",), essential=True),
    Method("index_k_scale", "get_index_k_scale_buffer", ("layer_id",)),
    Method("index_k_fp4_payload", "get_index_k_fp4_payload_buffer", ("layer_id",)),
    Method("index_k_fp4_scale", "get_index_k_fp4_scale_buffer", ("layer_id",)),
    # 0.5.21+: the V4.1 indexer reads index-K rows through these (gated by the release).
    Method("index_k_low_ratio_dequant", "get_low_ratio_index_k_dequant", ("layer_id",)),
    Method("index_k_low_ratio_fp4", "get_low_ratio_index_k_fp4", ("layer_id",)),
    Method("kv_swa", "get_swa_key_buffer", ("layer_id",)),
    Method("kv_swa_radix", "get_swa_key_buffer_radix", ("layer_id",)),
    Method("kv_extra", "get_extra_key_buffer", ("layer_id",)),
    Method("kv_unified", "get_unified_kv", ("layer_id",)),
    Method("kv_unified_rope", "get_unified_kv_rope", ("layer_id",)),
    # Compress-state reads: gated like KV reads; counted with them (dsv4_hicache_kv_reads_total).
    Method("state_attention", "get_attention_compress_states", ("layer_id",)),
    Method("state_indexer", "get_indexer_compress_states", ("layer_id",)),
)
POOL_CLASS = "DeepSeekV4TokenToKVPool"
TARGETS: dict[str, tuple[tuple[str, tuple[Method, ...]], ...]] = {
    COUNTER_MODULE: (("LayerDoneCounter", COUNTER_METHODS), ("LayerLoadingEvent", EVENT_METHODS)),
    POOL_MODULE: ((POOL_CLASS, POOL_METHODS),),
    CONFIG_MODULE: ((CONFIG_CLASS, ()),),
}
REGISTER = "register_layer_transfer_counter"

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def signature_ok(func: Any, params: tuple[str, ...]) -> bool:
    """``func(self, <one of params>, ...)``, or ``func(self)`` when params is empty."""
    if not isinstance(func, FunctionType):
        return False
    try:
        parameters = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError):
        return False
    if not parameters or parameters[0].kind not in _POSITIONAL:
        return False
    rest = parameters[1:]
    if not params:
        return all(
            p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in rest
        )
    return bool(rest) and rest[0].kind in _POSITIONAL and rest[0].name in params


def _first(args: tuple, kwargs: dict, names: tuple[str, ...]) -> Any:
    if args:
        return args[0]
    for name in names:
        if name in kwargs:
            return kwargs[name]
    return None


def _read_wrapper(probe: Probe, method: Method, original: FunctionType) -> Callable[..., Any]:
    slot = probe.slots[method.hook]
    index_k = method.hook in INDEX_K_HOOKS
    inside = probe.inside  # thread idents inside a wrapped accessor: nested calls count once
    states = probe.states
    on_read = probe.on_read
    get_ident = threading.get_ident

    @functools.wraps(original)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        me = get_ident()
        if me in inside:  # an override calling super(), or one accessor calling another
            return original(self, *args, **kwargs)
        inside.add(me)
        try:
            result = original(self, *args, **kwargs)
        finally:
            inside.discard(me)
        if slot.active:
            try:
                if not probe.engaged:
                    probe.engage()
                counter = getattr(self, "layer_transfer_counter", None)
                if counter is not None:
                    st = states.get(id(counter))
                    if st is not None and st.bound:  # else no load can race this read
                        layer_id = args[0] if args else kwargs.get("layer_id")
                        on_read(self, st, layer_id, index_k, result)
            except Exception as exc:
                probe.fault(slot, exc)
        return result

    setattr(wrapper, WRAPPED, original)
    return wrapper


def _wait_wrapper(probe: Probe, method: Method, original: FunctionType) -> Callable[..., Any]:
    slot = probe.slots[method.hook]
    states = probe.states
    on_wait = probe.on_wait
    names = method.params

    @functools.wraps(original)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        if slot.active:
            try:
                st = states.get(id(self))
                if st is not None and st.bound:  # SGLang's wait is a no-op outside a load
                    on_wait(st, _first(args, kwargs, names))
            except Exception as exc:
                probe.fault(slot, exc)
        return result

    setattr(wrapper, WRAPPED, original)
    return wrapper


def _after_wrapper(
    probe: Probe, method: Method, original: FunctionType, call: Callable[..., None]
) -> Callable[..., Any]:
    slot = probe.slots[method.hook]

    @functools.wraps(original)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        if slot.active:
            try:
                if not probe.engaged:
                    probe.engage()
                call(self, args, kwargs, result)
            except Exception as exc:
                probe.fault(slot, exc)
        return result

    setattr(wrapper, WRAPPED, original)
    return wrapper


def make_wrapper(probe: Probe, method: Method, original: FunctionType) -> Callable[..., Any]:
    hook, params = method.hook, method.params
    if hook == "wait":
        return _wait_wrapper(probe, method, original)
    calls: dict[str, Callable[..., None]] = {
        "load_start": lambda s, a, k, r: probe.on_update_producer(s, r),
        "consumer": lambda s, a, k, r: probe.on_set_consumer(s, a, k),
        "counter_reset": lambda s, a, k, r: probe.on_reset(s),
        "layer_done": lambda s, a, k, r: probe.on_layer_done(s, _first(a, k, params)),
    }
    if hook in calls:
        return _after_wrapper(probe, method, original, calls[hook])
    return _read_wrapper(probe, method, original)


def patch_methods(probe: Probe, cls: type, methods: Iterable[Method]) -> list[str]:
    """Wrap what matches on ``cls``; returns ``name (why)`` for each method left alone."""
    skipped = []
    for method in methods:
        raw = inspect.getattr_static(cls, method.name, None)
        if raw is None:
            skipped.append(f"{method.name} (missing)")
            continue
        if hasattr(raw, WRAPPED):
            probe.counters.hooks[method.hook] = True
            continue
        if not signature_ok(raw, method.params):
            skipped.append(f"{method.name} (unexpected signature)")
            continue
        setattr(cls, method.name, make_wrapper(probe, method, raw))
        probe.counters.hooks[method.hook] = True
    return skipped


def _patch_overrides(probe: Probe, cls: type, base: type, methods: Sequence[Method]) -> None:
    """A pool subclass that overrides an accessor (a fork, a hardware variant) gets its own
    overrides wrapped too, else its reads would bypass the probe."""
    wrapped = []
    for klass in cls.__mro__:
        if klass is base:
            break
        own = [m for m in methods if m.name in vars(klass)]
        if own:
            patch_methods(probe, klass, own)
            wrapped += [f"{klass.__name__}.{m.name}" for m in own]
    if wrapped:
        logger.info("dsv4-probe: also wrapped overrides %s", ", ".join(wrapped))


def _wrap_register(probe: Probe, base: type, methods: Sequence[Method]) -> bool:
    raw = inspect.getattr_static(base, REGISTER, None)
    if hasattr(raw, WRAPPED):
        return True
    if not signature_ok(raw, ("layer_transfer_counter", "counter")):
        return False
    seen = {base}
    slot = HookSlot(REGISTER)  # its faults count in the probe's errors like any hook's

    @functools.wraps(raw)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = raw(self, *args, **kwargs)
        cls = type(self)
        if cls not in seen:
            seen.add(cls)
            try:
                _patch_overrides(probe, cls, base, methods)
            except Exception as exc:
                probe.fault(slot, exc)
        return result

    setattr(wrapper, WRAPPED, raw)
    setattr(base, REGISTER, wrapper)
    return True


def patch_pool_init(probe: Probe, cls: type) -> bool:
    """Measure every pool once its constructor returned (``pool_memory``)."""
    raw = inspect.getattr_static(cls, "__init__", None)
    if hasattr(raw, WRAPPED):
        probe.counters.hooks["pool_memory"] = True
        return True
    if not isinstance(raw, FunctionType):
        return False
    slot = probe.slots["pool_memory"]

    @functools.wraps(raw)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> None:
        raw(self, *args, **kwargs)
        if slot.active:
            try:
                probe.on_pool_built(self)
            except Exception as exc:
                probe.fault(slot, exc)

    setattr(wrapper, WRAPPED, raw)
    setattr(cls, "__init__", wrapper)  # noqa: B010 (mypy rejects assigning __init__)
    probe.counters.hooks["pool_memory"] = True
    return True


def _fixed_wrapper(raw: FunctionType, name: str, calls: threading.local) -> Callable[..., Any]:
    @functools.wraps(raw)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = raw(self, *args, **kwargs)
        seen = getattr(calls, "fixed", None)
        if seen is not None and isinstance(result, (int, float)) and result == result:
            seen[name] = int(result)
        return result

    setattr(wrapper, WRAPPED, raw)
    return wrapper


def _sizing_wrapper(
    probe: Probe, raw: FunctionType, name: str, calls: threading.local
) -> Callable[..., Any]:
    slot = probe.slots["pool_sizes"]

    @functools.wraps(raw)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        outer = getattr(calls, "fixed", None)
        calls.fixed = {}
        try:
            result = raw(self, *args, **kwargs)
            fixed = calls.fixed
        finally:
            calls.fixed = outer
        if slot.active:
            try:
                probe.on_pool_sizes(self, name, args, kwargs, result, fixed)
            except Exception as exc:
                probe.fault(slot, exc)
        return result

    setattr(wrapper, WRAPPED, raw)
    return wrapper


def patch_configurator(probe: Probe, cls: type) -> list[str]:
    """Record the configurator's sizing calls (``pool_sizes``) and, during them, what its
    fixed-bytes helpers return. Returns ``name (why)`` for each sizing method left alone."""
    calls = threading.local()
    for name in fixed_bytes_methods(cls):
        raw = inspect.getattr_static(cls, name, None)
        if isinstance(raw, FunctionType) and not hasattr(raw, WRAPPED):
            setattr(cls, name, _fixed_wrapper(raw, name, calls))
    skipped = []
    for name, params in SIZING_METHODS:
        raw = inspect.getattr_static(cls, name, None)
        if raw is None:
            skipped.append(f"{name} (missing)")
        elif hasattr(raw, WRAPPED):
            probe.counters.hooks["pool_sizes"] = True
        elif not signature_ok(raw, params):
            skipped.append(f"{name} (unexpected signature)")
        else:
            setattr(cls, name, _sizing_wrapper(probe, raw, name, calls))
            probe.counters.hooks["pool_sizes"] = True
    return skipped


def patch_module(probe: Probe, module: ModuleType) -> None:
    """Post-import callback: wrap every target class this module defines."""
    for class_name, methods in TARGETS.get(module.__name__, ()):
        cls = getattr(module, class_name, None)
        where = f"{module.__name__}.{class_name}"
        if not isinstance(cls, type):
            hooks = ", ".join(m.hook for m in methods) or "pool_sizes"
            logger.warning("dsv4-probe: %s not found; not measured: %s", where, hooks)
            continue
        if class_name == CONFIG_CLASS:
            skipped = patch_configurator(probe, cls)
            if skipped:
                logger.info("dsv4-probe: %s: not measured: %s", where, ", ".join(skipped))
            continue
        skipped = patch_methods(probe, cls, methods)
        if class_name == POOL_CLASS and not patch_pool_init(probe, cls):
            skipped.append("__init__ (pool memory not measured)")
        if class_name == POOL_CLASS and not _wrap_register(probe, cls, methods):
            skipped.append(f"{REGISTER} (subclass overrides not covered)")
        if skipped:
            essential = {m.name for m in methods if m.essential}
            level = (
                logging.WARNING if any(s.split()[0] in essential for s in skipped) else logging.INFO
            )
            logger.log(level, "dsv4-probe: %s: not measured: %s", where, ", ".join(skipped))
