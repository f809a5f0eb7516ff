"""A device-side gate: a CUDA stream held until the host opens it, whatever the CPU's speed.

The race harness needs the load stream's copies to start only after the forward pass has
enqueued its reads. A GPU sleep of N cycles (the first harness) is a guess about how long the
CPU takes to enqueue; on a real H200 the CPU's own work (pinning host buffers) outlasted it and
the race never happened. A gate removes the guess: the load stream waits on a 32-bit flag in
pinned, device-mapped host memory, and the host writes the flag once the reads are queued.

Two ways to hold a stream, tried in order:

* ``cuStreamWaitValue32`` (CUDA driver API, through ctypes on ``libcuda.so.1``): the stream's
  front end waits for ``flag >= 1``; no kernel, no SM.
* a one-thread spin kernel (compiled with NVRTC through CuPy) that polls the flag with a
  ``%globaltimer`` bound, so a host that never opens cannot hang the GPU past ``max_hold_s``.

``Gate.self_test()`` proves the hold on the machine at hand: an event recorded after the gate
must stay pending while the gate is shut and complete once it opens.
"""

from __future__ import annotations

import ctypes
import time
from typing import Any

CU_STREAM_WAIT_VALUE_GEQ = 0x0
SPIN_SOURCE = r"""
extern "C" __global__ void dsv4_gate(const volatile unsigned int* flag,
                                     unsigned long long max_ns,
                                     unsigned int* timed_out) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    while (*flag == 0u) {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        if (t - t0 > max_ns) { *timed_out = 1u; return; }
        __nanosleep(2000);
    }
}
"""


class GateError(RuntimeError):
    """No way to hold a stream on this machine."""


class Gate:
    """One reusable gate: ``hold(stream)`` enqueues the wait, ``open()`` releases every wait
    enqueued since the last ``close()``."""

    def __init__(self, torch: Any, max_hold_s: float = 30.0) -> None:
        self.torch = torch
        self.max_hold_s = max_hold_s
        # pinned host memory is device-mapped under UVA (every 64-bit CUDA platform)
        self.flag = torch.zeros(1, dtype=torch.int32).pin_memory()
        self.timed_out = torch.zeros(1, dtype=torch.int32).pin_memory()
        self.mechanism = ""
        self._wait_value: Any = None
        self._kernel: Any = None
        self._cupy: Any = None
        self._pick()

    # --- mechanisms -------------------------------------------------------------------------
    def _pick(self) -> None:
        errors = []
        try:
            self._wait_value = self._driver_wait_value()
            self.mechanism = "cuStreamWaitValue32"
            return
        except Exception as exc:  # not exported / not supported by this driver
            errors.append(f"cuStreamWaitValue32: {exc}")
        try:
            import cupy

            self._cupy = cupy
            self._kernel = cupy.RawKernel(SPIN_SOURCE, "dsv4_gate")
            self.mechanism = "spin kernel (NVRTC)"
            return
        except Exception as exc:
            errors.append(f"spin kernel: {exc}")
        raise GateError("; ".join(errors))

    def _driver_wait_value(self) -> Any:
        lib = ctypes.CDLL("libcuda.so.1")
        fn = getattr(lib, "cuStreamWaitValue32_v2", None) or lib.cuStreamWaitValue32
        fn.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
        fn.restype = ctypes.c_int
        get_dptr = lib.cuMemHostGetDevicePointer_v2
        get_dptr.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_void_p, ctypes.c_uint]
        get_dptr.restype = ctypes.c_int
        dptr = ctypes.c_uint64(0)
        rc = get_dptr(ctypes.byref(dptr), ctypes.c_void_p(self.flag.data_ptr()), 0)
        # under UVA the host address is the device address; the driver's answer is preferred
        self._dptr = dptr.value if rc == 0 else self.flag.data_ptr()
        return fn

    # --- use ----------------------------------------------------------------------------------
    def close(self) -> None:
        self.torch.cuda.synchronize()  # no earlier wait may still read the flag
        self.flag[0] = 0

    def hold(self, stream: Any) -> None:
        """Enqueue the wait on ``stream``: work enqueued after it runs once ``open()``."""
        if self._wait_value is not None:
            rc = self._wait_value(
                ctypes.c_void_p(stream.cuda_stream),
                ctypes.c_uint64(self._dptr),
                1,
                CU_STREAM_WAIT_VALUE_GEQ,
            )
            if rc != 0:
                raise GateError(f"cuStreamWaitValue32 returned CUresult {rc}")
            return
        cp = self._cupy
        with cp.cuda.ExternalStream(stream.cuda_stream):
            self._kernel(
                (1,),
                (1,),
                (
                    cp.uint64(self.flag.data_ptr()),
                    cp.uint64(int(self.max_hold_s * 1e9)),
                    cp.uint64(self.timed_out.data_ptr()),
                ),
            )

    def open(self) -> None:
        self.flag[0] = 1

    @property
    def expired(self) -> bool:
        """The spin kernel gave up before the host opened (its hold is not what was asked)."""
        return bool(int(self.timed_out[0]))

    def self_test(self, shut_s: float = 0.05, deadline_s: float = 10.0) -> dict[str, Any]:
        """Prove the hold here: an event after the gate pends while shut, completes once open."""
        torch = self.torch
        stream = torch.cuda.Stream()
        self.close()
        self.hold(stream)
        after = torch.cuda.Event()
        after.record(stream)
        time.sleep(shut_s)  # the hold under test, not a wait for a precondition
        held = not after.query()
        self.open()
        end = time.monotonic() + deadline_s
        while not after.query() and time.monotonic() < end:
            time.sleep(0.001)
        released = bool(after.query())
        return {"mechanism": self.mechanism, "held_while_shut": held, "released": released}


if __name__ == "__main__":
    import json

    import torch

    print(json.dumps(Gate(torch).self_test()))
