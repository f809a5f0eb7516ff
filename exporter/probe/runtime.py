"""The probe's state machine inside one SGLang process.

The wrapped SGLang methods (see ``targets``) call the ``on_*`` methods below *after* the
original returned. What the probe tracks, per LayerDoneCounter:

* loads: ``update_producer()`` starts a load in a producer slot; ``LayerLoadingEvent.complete(l)``
  means layer ``l``'s copy was enqueued on the load stream (a layer load started); the layer's
  load event completing (seen by the reporter, or implied when SGLang reuses the slot, which it
  only does once the slot's last event has fired) is a layer load completed;
* the window in which reads must be gated: ``set_consumer(i)`` with ``i >= 0`` binds the
  forward pass to a load (SGLang's ``wait_until`` is a no-op outside it); a new
  ``set_consumer`` or ``reset()`` closes it;
* gates: ``wait_until(t)`` inside the window, per stream. Layer events are recorded in order on
  one load stream, so a wait for layer ``t`` orders the waiting stream after layers ``<= t``.

A read through a wrapped accessor inside the window is *gated* when its stream waited for its
layer (or a later one) since the window opened, else *ungated*. Ungated index-K reads get a
transfer gap measured (see ``timeline``). Reads outside any window are not counted: no load
can race them.

The hot path does dictionary lookups and integer increments only; CUDA events are created
only at layer-done marks and at ungated index-K reads, i.e. on the failure path.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from typing import Any

from exporter.probe.config import ProbeConfig
from exporter.probe.memory import configurator_record, measure_pool
from exporter.probe.snapshot import HOOK_NAMES, MAX_POOLS, ProbeCounters
from exporter.probe.timeline import Timeline, detect

logger = logging.getLogger("exporter.probe")

MAX_PENDING_GAPS = 4096
GAP_GIVE_UP_S = 60.0
FAULTS_BEFORE_DISABLE = 100


class HookSlot:
    """One wrapped method's switch and fault count; a wrapper checks ``active`` first."""

    __slots__ = ("active", "faults", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self.active = True
        self.faults = 0


class LoadRecord:
    """One load in one producer slot: per-layer done marks and layers not yet seen landed."""

    __slots__ = ("done_marks", "pending", "slot")

    def __init__(self, slot: int) -> None:
        self.slot = slot
        self.done_marks: dict[int, Any] = {}
        self.pending: set[int] = set()


class CounterState:
    """What the probe knows about one LayerDoneCounter instance."""

    __slots__ = ("bound", "counter", "records", "waited")

    def __init__(self, counter: Any) -> None:
        self.counter = counter  # keeps id(counter) from being reused while we key on it
        self.bound: tuple[int, ...] = ()
        self.waited: dict[Hashable, int] = {}
        self.records: dict[int, LoadRecord] = {}


def _bound_slots(counter: Any, args: tuple, kwargs: dict) -> tuple[int, ...]:
    """The consumer slots the counter waits on, read back from the counter itself (newer
    versions keep a tuple ``consumer_indices``, older ones an int ``consumer_index``)."""
    indices = getattr(counter, "consumer_indices", None)
    if indices is None:
        index = getattr(counter, "consumer_index", None)
        if index is None:
            index = args[0] if args else next(iter(kwargs.values()), -1)
        indices = (index,) if isinstance(index, int) else tuple(index)
    return tuple(i for i in indices if isinstance(i, int) and i >= 0)


class Probe:
    """Counters and state for one process; wrappers hold a reference and call ``on_*``."""

    def __init__(self, config: ProbeConfig) -> None:
        self.config = config
        self.counters = ProbeCounters(verify_sample_rate=config.verify_rate)
        self.counters.hooks = dict.fromkeys(HOOK_NAMES, False)
        self.slots: dict[str, HookSlot] = {name: HookSlot(name) for name in HOOK_NAMES}
        self.timeline: Timeline | None = None
        self.verifier: Any = None
        self._detected = False
        # which stream the caller is on; replaced by detect() once SGLang's event type is known
        self.stream_key: Callable[[], Hashable] = lambda: 0
        self.states: dict[int, CounterState] = {}
        self._owner: dict[int, tuple[CounterState, int]] = {}
        self.pending_gaps: deque[tuple[Any, list[tuple[LoadRecord, int]], float]] = deque()
        self._lock = threading.Lock()
        self.inside: set[int] = set()  # threads inside a wrapped accessor
        self.engaged = False
        self.on_engage: Callable[[], None] | None = None
        self.reporter: Any = None  # set by boot: the Reporter writing this process's file
        self.watcher: Any = None  # set by boot: the ImportWatcher that patched SGLang
        self.wake = threading.Event()

    # --- bookkeeping -----------------------------------------------------------------------
    def reset_after_fork(self) -> None:
        """A forked child starts with zero counts and no in-flight state of its parent."""
        old = self.counters
        self.counters = ProbeCounters(
            hooks=dict(old.hooks),
            gap_source=old.gap_source,
            verify_enabled=old.verify_enabled,
            verify_sample_rate=old.verify_sample_rate,
            memory=old.memory,  # the pools were built before the fork and are still there
        )
        self.states.clear()
        self._owner.clear()
        self.inside.clear()
        self.pending_gaps.clear()
        self._lock = threading.Lock()
        self.wake = threading.Event()
        if self.verifier is not None:
            self.verifier.pending.clear()

    def engage(self) -> None:
        """First hook call in this process: it runs a model, so start reporting."""
        self.engaged = True
        if self.on_engage is not None:
            self.on_engage()

    def fault(self, slot: HookSlot, exc: BaseException) -> None:
        """An exception inside the probe: count it, log the first, disable a hook that keeps
        failing. Never re-raised: SGLang must not notice the probe."""
        self.counters.errors += 1
        slot.faults += 1
        if slot.faults == 1:
            logger.warning("dsv4-probe: error in %s hook (%r); SGLang unaffected", slot.name, exc)
        if slot.faults >= FAULTS_BEFORE_DISABLE and slot.active:
            slot.active = False
            logger.warning("dsv4-probe: %s hook failed %d times; disabled", slot.name, slot.faults)

    def state(self, counter: Any) -> CounterState:
        st = self.states.get(id(counter))
        if st is None:
            st = self.states.setdefault(id(counter), CounterState(counter))
            self._register_events(st)
        return st

    def _register_events(self, st: CounterState) -> None:
        events = getattr(st.counter, "events", None)
        if isinstance(events, (list, tuple)):
            for slot, loading_event in enumerate(events):
                self._owner[id(loading_event)] = (st, slot)

    def _detect(self, st: CounterState) -> None:
        """Pick the gap clock from SGLang's own event type, once, on the first load."""
        if self._detected:
            return
        self._detected = True
        sample = None
        for loading_event in getattr(st.counter, "events", None) or ():
            events = getattr(loading_event, "load_events", None)
            if events:
                sample = events[0]
                break
        if sample is None:
            logger.warning("dsv4-probe: no load events on LayerDoneCounter; gaps not measured")
            return
        timeline, self.stream_key, streams = detect(sample, self.config.gap_mode)
        self.timeline = timeline
        self.counters.gap_source = timeline.source if timeline is not None else "none"
        if self.config.verify_rate > 0:
            self._setup_verifier(sample)
        logger.info(
            "dsv4-probe: gap clock %s, streams: %s, verify %s",
            self.counters.gap_source,
            streams,
            "on" if self.verifier is not None else "off",
        )

    def _setup_verifier(self, sample: Any) -> None:
        if not type(sample).__module__.startswith("torch.cuda"):
            logger.warning("dsv4-probe: DSV4_PROBE_VERIFY needs CUDA events; verification off")
            return
        import torch  # already loaded: SGLang's events are torch.cuda events

        from exporter.probe.verify import Verifier

        self.verifier = Verifier(torch, self.config.verify_rate)
        self.counters.verify_enabled = True

    # --- hooks on LayerDoneCounter / LayerLoadingEvent -----------------------------------
    def on_update_producer(self, counter: Any, slot: Any) -> None:
        if not isinstance(slot, int):
            return
        st = self.state(counter)
        self.counters.load_ops += 1
        self._register_events(st)
        old = st.records.get(slot)
        if old is not None:
            self._complete_all(old)
        st.records[slot] = LoadRecord(slot)
        self._detect(st)

    def on_layer_done(self, loading_event: Any, layer: Any) -> None:
        if not isinstance(layer, int):
            return
        self.counters.layer(layer).loads_started += 1
        owner = self._owner.get(id(loading_event))
        if owner is None:
            return  # a load we never saw start: counted, not timed
        st, slot = owner
        record = st.records.get(slot)
        if record is None:
            record = st.records.setdefault(slot, LoadRecord(slot))
        mark = None
        timeline = self.timeline
        if timeline is not None and not timeline.capturing():
            events = getattr(loading_event, "load_events", None)
            load_event = events[layer] if events is not None and layer < len(events) else None
            if load_event is not None:
                mark = timeline.done_mark(load_event)
        record.done_marks[layer] = mark
        record.pending.add(layer)

    def on_set_consumer(self, counter: Any, args: tuple, kwargs: dict) -> None:
        st = self.state(counter)
        st.bound = _bound_slots(counter, args, kwargs)
        st.waited = {}
        if st.bound and not self._detected:
            self._detect(st)

    def on_reset(self, counter: Any) -> None:
        st = self.states.get(id(counter))
        if st is not None:
            st.bound = ()
            st.waited = {}

    def on_wait(self, st: CounterState, threshold: Any) -> None:
        """A stream waited for layer ``threshold`` of the bound load (the wrapper checked that
        a load is bound)."""
        if not isinstance(threshold, int):
            return
        key = self.stream_key()
        if st.waited.get(key, -1) < threshold:
            st.waited[key] = threshold

    # --- hooks on the KV pool's accessors --------------------------------------------------
    def on_read(
        self, pool: Any, st: CounterState, layer_id: Any, index_k: bool, result: Any
    ) -> None:
        """A read through a wrapped accessor while a load is bound (checked by the wrapper)."""
        if not isinstance(layer_id, int):
            return
        local = layer_id - (getattr(pool, "start_layer", 0) or 0)
        gated = st.waited.get(self.stream_key(), -1) >= local
        counts = self.counters.layer(local)
        if not index_k:
            if gated:
                counts.kv_gated += 1
            else:
                counts.kv_ungated += 1
            return
        if gated:
            counts.index_k_gated += 1
        else:
            counts.index_k_ungated += 1
        timeline = self.timeline
        if timeline is None or (gated and self.verifier is None) or timeline.capturing():
            return
        refs = [(r, local) for r in map(st.records.get, st.bound) if r is not None]
        marks = [m for m in (r.done_marks.get(local) for r, _ in refs) if m is not None]
        if not gated:
            if len(self.pending_gaps) >= MAX_PENDING_GAPS:
                self.counters.gap.dropped += 1
            elif refs:
                read_mark = timeline.read_mark(marks)
                self.pending_gaps.append((read_mark, refs, time.monotonic()))
                if timeline.polls:
                    self.wake.set()
        if self.verifier is not None:
            self.verifier.maybe_check(result, marks)

    # --- start-up memory (configurator, pool constructor) ----------------------------------
    def on_pool_sizes(
        self, configurator: Any, method: str, args: tuple, kwargs: dict, result: Any, fixed: dict
    ) -> None:
        """The configurator sized the pools: keep its arguments and result (the last call)."""
        if not self.engaged:
            self.engage()
        record = configurator_record(configurator, method, args, kwargs, result, fixed)
        previous = self.counters.memory.get("configurator")
        if record["available_bytes"] is None and previous and previous.get("available_bytes"):
            return  # a token-count call (draft worker) does not replace the budget call
        self.counters.memory["configurator"] = record

    def on_pool_built(self, pool: Any) -> None:
        """A DeepSeekV4TokenToKVPool finished its constructor: measure its tensors."""
        if not self.engaged:
            self.engage()
        pools = [*self.counters.memory.get("pools", ()), measure_pool(pool)]
        self.counters.memory["pools"] = pools[-MAX_POOLS:]

    # --- resolution (reporter thread) ------------------------------------------------------
    def _complete_all(self, record: LoadRecord) -> None:
        with self._lock:
            for layer in list(record.pending):
                self.counters.layer(layer).loads_completed += 1
            record.pending.clear()

    def resolve(self) -> None:
        """Turn finished loads and resolvable gaps into counts. Called by the reporter."""
        timeline = self.timeline
        if timeline is None:
            return
        for st in list(self.states.values()):
            for record in list(st.records.values()):
                for layer in list(record.pending):
                    mark = record.done_marks.get(layer)
                    if mark is None or not timeline.completed(mark):
                        continue
                    with self._lock:
                        if layer in record.pending:
                            record.pending.discard(layer)
                            self.counters.layer(layer).loads_completed += 1
        now = time.monotonic()
        for _ in range(len(self.pending_gaps)):
            read_mark, refs, queued = self.pending_gaps.popleft()
            gap = self._gap(timeline, read_mark, refs)
            if gap is not None:
                self.counters.gap.observe(gap)
            elif now - queued > GAP_GIVE_UP_S:
                self.counters.gap.dropped += 1
            else:
                self.pending_gaps.append((read_mark, refs, queued))
        if self.verifier is not None:
            self.verifier.resolve(self.counters)

    @staticmethod
    def _gap(
        timeline: Timeline, read_mark: Any, refs: list[tuple[LoadRecord, int]]
    ) -> float | None:
        """The largest gap over the loads the read was bound to; None until all resolve."""
        worst = 0.0
        for record, layer in refs:
            mark = record.done_marks.get(layer)
            if mark is None:
                return None
            gap = timeline.gap_s(read_mark, mark)
            if gap is None:
                return None
            worst = max(worst, gap)
        return worst

    @property
    def has_polling_work(self) -> bool:
        timeline = self.timeline
        return bool(timeline is not None and timeline.polls and self.pending_gaps)
