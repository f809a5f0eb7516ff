"""Grafana dashboards for the dsv4-sidecar, generated with grafana-foundation-sdk (Grafana 11.6).

The JSON under ``dashboards/`` is the committed output of ``python -m dashboards.generate``
(``make dashboards``); CI fails when it is stale. :mod:`dashboards.queries` hands the panels'
PromQL, with template variables substituted, to the end-to-end test against a real Prometheus.
"""
