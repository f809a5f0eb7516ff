"""The checksum verifier never allocates page-locked memory inside a forward pass.

A page-locked allocation is an implicit synchronisation point in CUDA: one made while a reader's
stream races a load orders the reader after the load and hides the race (on an H200 it deadlocked
the GPU check's held load stream). The verifier allocates its pinned rows when it is created and
recycles them. Checked here with a stand-in for the few torch calls it makes, recording each
allocation; the GPU itself is exercised by ``make gpu-check``.
"""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

from exporter.probe.snapshot import ProbeCounters
from exporter.probe.verify import MAX_PENDING, Verifier


class FakeTensor:
    """A CUDA tensor whose sum is a number the test sets."""

    is_cuda = True
    device = SimpleNamespace(index=0)

    def __init__(self, value: int = 0, shape: tuple = ()) -> None:
        self.value = value
        self.shape = shape
        self.rows: dict[int, list[int]] = {}

    def reshape(self, *_: object) -> FakeTensor:
        return self

    def view(self, *_: object) -> FakeTensor:
        return self

    def sum(self, dtype: object = None) -> int:
        return self.value

    def __getitem__(self, row: int) -> SimpleNamespace:
        rows = self.rows

        def copy_(pair: tuple[int, int], non_blocking: bool = False) -> None:
            rows[row] = list(pair)

        return SimpleNamespace(copy_=copy_, tolist=lambda: rows[row])


class FakeTorch:
    int64 = "int64"
    uint8 = "uint8"
    Tensor = FakeTensor

    def __init__(self) -> None:
        self.pinned: list[tuple] = []
        self.device_allocs: list[tuple] = []
        self.events: list[SimpleNamespace] = []
        fake = self

        class Event:
            def __init__(self) -> None:
                self.done = False
                fake.events.append(self)

            def record(self, stream: object = None) -> None:
                pass

            def query(self) -> bool:
                return self.done

        self.cuda = SimpleNamespace(
            is_available=lambda: True,
            is_initialized=lambda: True,
            current_device=lambda: 0,
            Stream=lambda device=None: SimpleNamespace(
                wait_stream=lambda s: None, wait_event=lambda e: None
            ),
            stream=lambda s: contextlib.nullcontext(),
            current_stream=lambda device=None: object(),
            Event=Event,
        )

    def zeros(self, shape: tuple, dtype: object = None, pin_memory: bool = False) -> FakeTensor:
        if pin_memory:
            self.pinned.append(shape)
        return FakeTensor(shape=shape)

    def empty(self, *shape: object, dtype: object = None, device: object = None) -> FakeTensor:
        self.device_allocs.append(shape)
        return FakeTensor()

    def stack(self, pair: tuple[int, int]) -> tuple[int, int]:
        return pair


def test_pinned_rows_are_made_once_and_recycled():
    torch = FakeTorch()
    verifier = Verifier(torch, rate=1.0, rng=lambda: 0.0)
    assert torch.pinned == [(MAX_PENDING, 2)]  # at creation: the first load's start
    made = len(torch.device_allocs)  # the side stream's warm block, also at creation
    counters = ProbeCounters()
    # a read that raced its load: sums differ; one that did not: equal
    for _round in range(3):
        racing, clean = FakeTensor(), FakeTensor(7)
        sums = iter([1, 2])  # before the load landed, after it

        racing.sum = lambda dtype=None, s=sums: next(s)  # type: ignore[method-assign]
        assert verifier.maybe_check(racing, ["mark"])
        assert verifier.maybe_check(clean, ["mark"])
        for event in torch.events:
            event.done = True
        verifier.resolve(counters)
    assert torch.pinned == [(MAX_PENDING, 2)], "a check allocated page-locked memory"
    assert len(torch.device_allocs) == made
    assert counters.checks == 6 and counters.mismatches == 3
    assert len(verifier._free) == MAX_PENDING  # every row came back


def test_checks_stop_when_every_row_is_pending():
    torch = FakeTorch()
    verifier = Verifier(torch, rate=1.0, rng=lambda: 0.0)
    for _ in range(MAX_PENDING):
        assert verifier.maybe_check(FakeTensor(), ["mark"])
    assert not verifier.maybe_check(FakeTensor(), ["mark"])  # dropped, never a new allocation
    assert torch.pinned == [(MAX_PENDING, 2)]
