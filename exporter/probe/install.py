"""Install or remove the probe's start-up hook by hand: ``python -m exporter.probe.install``.

``pip install dsv4-sidecar[probe]`` (a wheel install) already puts ``dsv4_sidecar_probe.pth``
at the top of site-packages; pip removes it on uninstall. Editable installs (``pip install -e``)
and unusual layouts (``--target``, a read-only image layer with a writable venv) do not get it:
this command writes the same file into a site directory (default: the first of
``site.getsitepackages()`` of this interpreter). The hook is inert until ``DSV4_PROBE=1``.
"""

from __future__ import annotations

import argparse
import site
import sys
from importlib import resources
from pathlib import Path

PTH_NAME = "dsv4_sidecar_probe.pth"


def pth_text() -> str:
    return resources.files("exporter.probe").joinpath(PTH_NAME).read_text(encoding="utf-8")


def default_site_dir() -> Path:
    dirs = site.getsitepackages() if hasattr(site, "getsitepackages") else []
    return Path(dirs[0] if dirs else site.getusersitepackages())


def install(site_dir: Path) -> Path:
    site_dir.mkdir(parents=True, exist_ok=True)
    target = site_dir / PTH_NAME
    target.write_text(pth_text(), encoding="utf-8")
    return target


def uninstall(site_dir: Path) -> bool:
    target = site_dir / PTH_NAME
    if target.exists():
        target.unlink()
        return True
    return False


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m exporter.probe.install", description=__doc__)
    ap.add_argument("--site-dir", type=Path, help="site directory (default: this interpreter's)")
    ap.add_argument("--uninstall", action="store_true", help="remove the hook instead")
    args = ap.parse_args(argv)
    site_dir = args.site_dir or default_site_dir()
    if args.uninstall:
        removed = uninstall(site_dir)
        print(f"{'removed' if removed else 'not present'}: {site_dir / PTH_NAME}")
        return 0
    try:
        print(f"installed: {install(site_dir)}")
    except OSError as exc:
        print(f"cannot write in {site_dir}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
