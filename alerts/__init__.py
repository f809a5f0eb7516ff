"""Prometheus alerting and recording rules for the dsv4-sidecar, rendered from Python.

The rule file is generated (``python -m alerts.generate``) rather than written by hand so that
every threshold is a named, documented knob (:mod:`alerts.config`) and a deployer can render
their own rule file from a small YAML override without editing PromQL; the committed
``alerts/dsv4-sidecar.rules.yaml`` is the rendering of the defaults and is checked fresh in CI.
"""
