"""The ServiceMonitor's relabelings, run by a real Prometheus: they produce the namespace,
deployment and pod target labels the fleet rules group by (alerts/fleet.py).

Kubernetes service discovery cannot run here, so each target carries the ``__meta_kubernetes_*``
labels that discovery would attach (static_configs may set them; Prometheus drops every
``__``-prefixed label after relabelling, exactly as with real discovery). The operator's
camelCase relabelings become Prometheus' relabel_configs by the operator's own mapping.
"""

from __future__ import annotations

import re

import httpx
import pytest

from alerts.fleet import KUBERNETES_LABELS
from tests.deploy.conftest import K8S, load_yaml
from tests.support import ServerThread, prometheus, wait_for

pytestmark = pytest.mark.e2e

_KEYS = {"sourceLabels": "source_labels", "targetLabel": "target_label"}


def _snake(relabel: dict) -> dict:
    return {
        _KEYS.get(k, re.sub(r"(?<!^)([A-Z])", r"_\1", k).lower()): v for k, v in relabel.items()
    }


POD_META = {
    # A Deployment's pod: ReplicaSet named <deployment>-<pod-template-hash>, generic app label.
    "deploy": {
        "__meta_kubernetes_namespace": "llm",
        "__meta_kubernetes_pod_name": "flash-bf16-6d8f7b9c5-x2x7q",
        "__meta_kubernetes_pod_controller_kind": "ReplicaSet",
        "__meta_kubernetes_pod_controller_name": "flash-bf16-6d8f7b9c5",
        "__meta_kubernetes_pod_label_app_kubernetes_io_name": "sglang-dsv4",
    },
    # A StatefulSet's pod.
    "sts": {
        "__meta_kubernetes_namespace": "llm",
        "__meta_kubernetes_pod_name": "pro-0",
        "__meta_kubernetes_pod_controller_kind": "StatefulSet",
        "__meta_kubernetes_pod_controller_name": "pro",
    },
    # A bare pod: its `app` label names the deployment.
    "bare": {
        "__meta_kubernetes_namespace": "lab",
        "__meta_kubernetes_pod_name": "try-flash",
        "__meta_kubernetes_pod_label_app": "flash-try",
    },
}
EXPECTED = {
    "deploy": {"namespace": "llm", "deployment": "flash-bf16", "pod": "flash-bf16-6d8f7b9c5-x2x7q"},
    "sts": {"namespace": "llm", "deployment": "pro", "pod": "pro-0"},
    "bare": {"namespace": "lab", "deployment": "flash-try", "pod": "try-flash"},
}


def test_relabelings_produce_the_fleet_labels() -> None:
    endpoint = load_yaml(K8S / "servicemonitor.yaml")["spec"]["endpoints"][0]
    relabels = [_snake(r) for r in endpoint["relabelings"]]
    # Any answering HTTP server will do as the target: only its labels matter here.
    from fastapi import FastAPI

    with ServerThread(FastAPI()) as target:
        addr = target.url.removeprefix("http://")
        configs = [
            {
                "job_name": f"sidecar-{name}",
                "static_configs": [{"targets": [addr], "labels": meta}],
                "relabel_configs": relabels,
            }
            for name, meta in POD_META.items()
        ]
        with prometheus([], scrape_configs=configs) as prom:

            def active() -> list[dict] | None:
                got = httpx.get(prom + "/api/v1/targets", timeout=5).json()["data"]
                return got["activeTargets"] if len(got["activeTargets"]) == 3 else None

            targets = wait_for(active, timeout=30, interval=0.5)
    by_pod = {t["labels"]["pod"]: t["labels"] for t in targets}
    for want in EXPECTED.values():
        labels = by_pod[want["pod"]]
        assert {k: labels.get(k) for k in KUBERNETES_LABELS} == want
        assert labels["job"] == "dsv4-sidecar"
        assert not any(k.startswith("__meta") for k in labels)
