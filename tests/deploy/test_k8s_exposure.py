"""Who can reach the pod and feed the sidecar (issue 15, item 6): ingest needs a token from a
Secret, a NetworkPolicy admits only clients and Prometheus, and the sidecar's GPUs are the
pod's (docs/deploy.md)."""

from __future__ import annotations

from typing import Any

from tests.deploy.conftest import METRICS_PORT, SGLANG_PORT, TAP_PORT, k8s_objects


def _one(kind: str) -> dict[str, Any]:
    (obj,) = [o for _, o in k8s_objects() if o["kind"] == kind]
    return obj


def _sidecar() -> dict[str, Any]:
    pod = _one("Deployment")["spec"]["template"]["spec"]
    (c,) = [c for c in pod["containers"] if c["name"] == "dsv4-sidecar"]
    return c


def test_ingest_token_comes_from_a_required_secret():
    env = {e["name"]: e for e in _sidecar()["env"]}
    ref = env["DSV4_SIDECAR_INGEST_TOKEN"]["valueFrom"]["secretKeyRef"]
    assert ref["name"] == "dsv4-sidecar-ingest-token" and ref["key"] == "token"
    assert ref.get("optional", False) is False, "a missing Secret must stop the pod, not open it"
    assert "value" not in env["DSV4_SIDECAR_INGEST_TOKEN"], "never a literal token in the spec"


def test_network_policy_covers_every_port_of_the_pod():
    policy = _one("NetworkPolicy")
    labels = _one("Deployment")["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    ports: dict[str, list[dict[str, Any]]] = {}
    for rule in policy["spec"]["ingress"]:
        assert rule["from"], "no rule admits everyone"
        for p in rule["ports"]:
            ports.setdefault(p["port"], []).extend(rule["from"])
    assert set(ports) == {"http", "tap", "metrics"}
    pod = _one("Deployment")["spec"]["template"]["spec"]
    named = {p["name"]: p["containerPort"] for c in pod["containers"] for p in c["ports"]}
    assert (named["http"], named["tap"], named["metrics"]) == (SGLANG_PORT, TAP_PORT, METRICS_PORT)
    # the sidecar's API (ingest) is open to this namespace and Prometheus only
    peers = ports["metrics"]
    assert {"podSelector": {}} in peers
    outside = [p for p in peers if "namespaceSelector" in p]
    assert outside and all("podSelector" in p and p["podSelector"] for p in outside)


def test_sidecar_sees_the_pods_gpus_only_on_a_whole_node():
    pod = _one("Deployment")["spec"]["template"]["spec"]
    (sglang,) = [c for c in pod["containers"] if c["name"] == "sglang"]
    env = {e["name"]: e.get("value") for e in _sidecar()["env"]}
    # "all" is only the pod's GPUs because the pod takes all 8 GPUs of an 8-GPU node.
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert int(sglang["resources"]["limits"]["nvidia.com/gpu"]) == 8
    assert "nvidia.com/gpu" not in _sidecar()["resources"].get("limits", {})
