"""``python -m exporter.sim.sidecar serve ...``: the sidecar's CLI with the simulator's GPUs.

A production install (the wheel, the image) declares no ``fake`` GPU backend: the simulator's
GPUs are not something a deployment should be able to select by mistake. Where a production
install runs beside the simulator (docker/compose.yaml, the image and wheel tests), this entry
registers ``fake`` for its own process (``exporter.gpu_plugins.register``) and then runs the
sidecar's CLI unchanged. A development install declares the backend itself (setup.py), so
``dsv4-sidecar serve --gpu-backend fake`` works there as it is.
"""

from __future__ import annotations

import sys

from exporter.cli import main as cli_main
from exporter.gpu_plugins import register


def main(argv: list[str] | None = None) -> int:
    register("fake", "exporter.sim.gpus:backend")
    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
