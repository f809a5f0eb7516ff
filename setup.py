"""What pyproject.toml cannot say:

- the entry points: the ``dsv4-sidecar`` command, and the one below that only some installs
  get (a static table in pyproject.toml would replace what is passed here).

- ship the probe's start-up hook at the top of site-packages (a ``.pth`` file works only
  there), so ``pip install dsv4-sidecar[probe]`` loads the probe in every SGLang process. The
  hook is inert unless DSV4_PROBE=1.
- build the C accelerators: the DSML grader's (exporter/dsml/_textscan.c) and the tap's
  chunked-response relay (exporter/samplers/tap/_relay.c). Both are
  optional: without a C compiler the install still succeeds and the pure-Python reference
  runs (slower; the sidecar's build-info metric says which one a process uses).
  DSV4_SIDECAR_NO_NATIVE=1 leaves it out altogether, for a pure ``py3-none-any`` wheel:
  the probe image installs the wheel into SGLang's own Python, whose version the build stage
  cannot know, and the probe never grades.
- declare the simulator's GPUs as the ``fake`` GPU backend (``exporter/sim/gpus.py``) in the
  development installs only (``make venv``, ``make demo``: DSV4_SIDECAR_DEV_PLUGINS=1); a
  wheel or sdist (``make dist``, the image) does not, so a production install lists no
  test-only backend. There ``python -m exporter.sim.sidecar`` registers it for the one
  process it starts.
"""

import os

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

PTH = "dsv4_sidecar_probe.pth"


class BuildPyWithPth(build_py):
    def run(self):
        super().run()
        self.copy_file(os.path.join("exporter", "probe", PTH), os.path.join(self.build_lib, PTH))

    def get_outputs(self, include_bytecode=1):
        return [*super().get_outputs(include_bytecode), os.path.join(self.build_lib, PTH)]


TEXTSCAN = Extension(
    "exporter.dsml._textscan",
    sources=["exporter/dsml/_textscan.c"],
    optional=True,
    extra_compile_args=["-O2"] if os.name == "posix" else [],
)

RELAY = Extension(
    "exporter.samplers.tap._relay",
    sources=["exporter/samplers/tap/_relay.c"],
    optional=True,
    extra_compile_args=["-O2"] if os.name == "posix" else [],
)

NATIVE = os.environ.get("DSV4_SIDECAR_NO_NATIVE", "") not in ("1", "true", "yes")

# Set by the Makefile's development installs ($(VENV), $(DEMO_VENV)); never by `make dist`
# or the image. (An editable build cannot be told apart here: pip prepares its metadata with
# the same command as a wheel's.)
DEV_PLUGINS = os.environ.get("DSV4_SIDECAR_DEV_PLUGINS", "") in ("1", "true", "yes")
SCRIPTS = {"console_scripts": ["dsv4-sidecar = exporter.cli:main"]}
SIM_GPUS = {"dsv4_sidecar.gpu_backends": ["fake = exporter.sim.gpus:backend"]}

setup(
    cmdclass={"build_py": BuildPyWithPth},
    ext_modules=[TEXTSCAN, RELAY] if NATIVE else [],
    entry_points={**SCRIPTS, **(SIM_GPUS if DEV_PLUGINS else {})},
)
