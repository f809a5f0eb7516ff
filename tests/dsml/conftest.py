"""Every DSML test runs twice: on the C accelerator and on its pure-Python twin.

As CPython's json tests run with and without ``_json``: the twin is what an install without a C
compiler runs, so it must give the same results on the whole suite, not only where a test
compares the two. :func:`dsml_kernel` switches :mod:`exporter.dsml.accel` for the module and
sets ``DSV4_DSML_KERNEL`` for the subprocesses it starts (the CLI, the differential run). A
module whose tests compare both builds themselves runs once: ``DSML_KERNELS = ("c",)``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from exporter.dsml import accel


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "dsml_kernel" in metafunc.fixturenames:
        kernels = getattr(metafunc.module, "DSML_KERNELS", accel.KERNELS)
        metafunc.parametrize("dsml_kernel", kernels, indirect=True, scope="module")


@pytest.fixture(scope="module", autouse=True)
def dsml_kernel(request: pytest.FixtureRequest) -> Iterator[str]:
    """The kernel this module's tests run on (``c`` is skipped where it was not built)."""
    kernel: str = request.param
    if kernel == "c" and not accel.available():
        pytest.skip("exporter/dsml/_textscan.c is not built here (no C compiler)")
    saved, saved_env = accel.kernel(), os.environ.get(accel.ENV)
    accel.select(kernel)
    os.environ[accel.ENV] = kernel
    try:
        yield kernel
    finally:
        accel.select(saved)
        if saved_env is None:
            os.environ.pop(accel.ENV, None)
        else:
            os.environ[accel.ENV] = saved_env
