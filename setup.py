"""Only one thing pyproject.toml cannot say: ship the probe's start-up hook at the top of
site-packages (a ``.pth`` file works only there), so ``pip install dsv4-sidecar[probe]`` loads
the probe in every SGLang process. The hook is inert unless DSV4_PROBE=1."""

import os

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "dsv4_sidecar_probe.pth"


class BuildPyWithPth(build_py):
    def run(self):
        super().run()
        self.copy_file(os.path.join("exporter", "probe", PTH), os.path.join(self.build_lib, PTH))

    def get_outputs(self, include_bytecode=1):
        return [*super().get_outputs(include_bytecode), os.path.join(self.build_lib, PTH)]


setup(cmdclass={"build_py": BuildPyWithPth})
