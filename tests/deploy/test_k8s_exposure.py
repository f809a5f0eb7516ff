"""Who can reach the pod and feed the sidecar (issue 15, item 6): ingest needs a token from a
Secret, a NetworkPolicy admits only clients and Prometheus, and the sidecar's GPUs are the
pod's (docs/deploy.md)."""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Any

from tests.deploy.conftest import DOCKER, METRICS_PORT, SGLANG_PORT, TAP_PORT, k8s_objects


def _one(kind: str) -> dict[str, Any]:
    (obj,) = [o for _, o in k8s_objects() if o["kind"] == kind]
    return obj


def _sidecar() -> dict[str, Any]:
    pod = _one("Deployment")["spec"]["template"]["spec"]
    (c,) = [c for c in pod["containers"] if c["name"] == "dsv4-sidecar"]
    return c


def test_ingest_token_comes_from_a_file_of_a_required_secret():
    """A file, not an env variable (those show in the pod spec and /proc/PID/environ)."""
    sidecar = _sidecar()
    env = {e["name"]: e for e in sidecar["env"]}
    assert "DSV4_SIDECAR_INGEST_TOKEN" not in env, "the token never sits in the environment"
    path = PurePosixPath(env["DSV4_SIDECAR_INGEST_TOKEN_FILE"]["value"])
    (mount,) = [m for m in sidecar["volumeMounts"] if m["mountPath"] == str(path.parent)]
    assert mount["readOnly"] is True
    pod = _one("Deployment")["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    secret = volume["secret"]
    assert secret["secretName"] == "dsv4-sidecar-ingest-token" and path.name == "token"
    assert secret["optional"] is False, "a missing Secret must stop the pod, not open it"
    assert secret["defaultMode"] == 0o444


def test_no_manifest_puts_a_token_in_the_environment():
    for path in (DOCKER / "k8s", DOCKER / "k8s-multinode", DOCKER / "k8s-join"):
        for file in sorted(path.rglob("*.yaml")):
            text = file.read_text(encoding="utf-8")
            assert not re.search(r"name: DSV4_SIDECAR_(INGEST|SAMPLES)_TOKEN\n", text), file


def test_egress_is_dns_only():
    """The sidecar calls SGLang on loopback (no policy applies) and NVML via the driver."""
    policy = _one("NetworkPolicy")
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    (rule,) = policy["spec"]["egress"]
    assert {(p["port"], p["protocol"]) for p in rule["ports"]} == {(53, "UDP"), (53, "TCP")}
    (peer,) = rule["to"]
    assert peer["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "kube-system"
    }
    assert peer["podSelector"]["matchLabels"] == {"k8s-app": "kube-dns"}
    env = {e["name"]: e.get("value") for e in _sidecar()["env"]}
    assert env["DSV4_SIDECAR_SERVER_URL"].startswith("http://127.0.0.1:")


def test_network_policy_covers_every_port_of_the_pod():
    policy = _one("NetworkPolicy")
    labels = _one("Deployment")["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    ports: dict[str, list[dict[str, Any]]] = {}
    for rule in policy["spec"]["ingress"]:
        assert rule["from"], "no rule admits everyone"
        for p in rule["ports"]:
            ports.setdefault(p["port"], []).extend(rule["from"])
    assert set(ports) == {"http", "tap", "metrics", "tap-metrics"}
    pod = _one("Deployment")["spec"]["template"]["spec"]
    named = {p["name"]: p["containerPort"] for c in pod["containers"] for p in c["ports"]}
    assert (named["http"], named["tap"], named["metrics"]) == (SGLANG_PORT, TAP_PORT, METRICS_PORT)
    # the sidecar's API (ingest) is open to this namespace and Prometheus only
    assert ports["tap-metrics"] == ports["metrics"], "the tap's /metrics: Prometheus only"
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
