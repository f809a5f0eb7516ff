"""`python -m exporter` is the same as the `dsv4-sidecar` console script."""

from exporter.cli import main

raise SystemExit(main())
