"""docker/k8s-multinode: the two-node LeaderWorkerSet validates offline (each pod template as a
Pod against the bundled Kubernetes schemas; the CRD's own fields checked here), SGLang's node
flags and the sidecars' node ranks agree, the worker's sidecar reads SGLang through a Service
that reaches the head only, and every node's sidecar is scraped exactly once."""

from __future__ import annotations

import itertools
from typing import Any

import kubernetes_validate
import pytest

from exporter.config_loader import load_settings
from exporter.topology import Topology
from tests.deploy.conftest import (
    DOCKER,
    METRICS_PORT,
    SGLANG_PORT,
    kustomize_build,
    load_yaml_all,
)

MULTI = DOCKER / "k8s-multinode"
K8S_VERSIONS = ("1.29.0", kubernetes_validate.utils.latest_version())
WORKER_INDEX = "metadata.labels['leaderworkerset.sigs.k8s.io/worker-index']"


def _objects() -> list[dict[str, Any]]:
    return [
        d
        for p in sorted(MULTI.glob("*.yaml"))
        if p.name != "kustomization.yaml"
        for d in load_yaml_all(p)
    ]


def _one(kind: str) -> dict[str, Any]:
    (obj,) = [o for o in _objects() if o["kind"] == kind]
    return obj


@pytest.fixture(scope="module")
def lws() -> dict[str, Any]:
    return _one("LeaderWorkerSet")


def _templates(lws: dict[str, Any]) -> dict[str, dict[str, Any]]:
    t = lws["spec"]["leaderWorkerTemplate"]
    return {"leader": t["leaderTemplate"], "worker": t["workerTemplate"]}


def _container(tpl: dict[str, Any], name: str) -> dict[str, Any]:
    (c,) = [c for c in tpl["spec"]["containers"] if c["name"] == name]
    return c


def _flags(args: list[str]) -> dict[str, str]:
    return dict(itertools.pairwise(args))


def _env(c: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c.get("env", [])}


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_pod_templates_and_builtin_objects_validate_strictly(lws, version):
    for role, tpl in _templates(lws).items():
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": role}, **tpl}
        try:
            kubernetes_validate.validate(pod, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{role} template: {exc.message} at {'.'.join(map(str, exc.path))}")
    for obj in _objects():
        if obj["kind"] != "LeaderWorkerSet":
            kubernetes_validate.validate(obj, version, strict=True)


def test_leaderworkerset_fields(lws):
    assert lws["apiVersion"] == "leaderworkerset.x-k8s.io/v1"
    spec = lws["spec"]["leaderWorkerTemplate"]
    assert spec["size"] == 2
    assert spec["restartPolicy"] == "RecreateGroupOnPodRestart"


def test_sglang_node_flags_place_every_rank(lws):
    size = lws["spec"]["leaderWorkerTemplate"]["size"]
    for role, tpl in _templates(lws).items():
        c = _container(tpl, "sglang")
        f = _flags(c["args"])
        tp, pp, nnodes = int(f["--tp-size"]), int(f["--pp-size"]), int(f["--nnodes"])
        assert nnodes == size
        assert f["--node-rank"] == "$(NODE_RANK)"
        assert _env(c)["NODE_RANK"] == {"fieldRef": {"fieldPath": WORKER_INDEX}}
        assert f["--dist-init-addr"].startswith("$(LWS_LEADER_ADDRESS):")
        gpus = int(c["resources"]["limits"]["nvidia.com/gpu"])
        for node in range(nnodes):
            assert Topology(tp, pp, nnodes, node).gpus_per_node == gpus, role
        serves = "--port" in f
        assert serves == (role == "leader"), "only the head serves HTTP"


def test_each_sidecar_knows_its_node_and_reads_the_head(lws):
    service = next(o for o in _objects() if o["kind"] == "Service")  # services.yaml: metrics
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": METRICS_PORT, "targetPort": "metrics"}
    ]
    assert "leaderworkerset.sigs.k8s.io/worker-index" not in service["spec"]["selector"]
    for role, tpl in _templates(lws).items():
        sc = _container(tpl, "dsv4-sidecar")
        env = _env(sc)
        assert env["DSV4_SIDECAR_NODE_RANK"] == {"fieldRef": {"fieldPath": WORKER_INDEX}}
        plain = {k: v for k, v in env.items() if isinstance(v, str) and k.startswith("DSV4_")}
        settings = load_settings(
            {k.removeprefix("DSV4_SIDECAR_").lower(): v for k, v in plain.items()}
        )
        ports = {p["name"] for p in sc["ports"]}
        if role == "leader":
            assert settings.sglang_url == f"http://127.0.0.1:{SGLANG_PORT}"
            assert settings.canary and settings.tap_port is not None and "tap" in ports
        else:
            assert settings.sglang_url == f"http://sglang-dsv4:{SGLANG_PORT}"
            assert not settings.canary and settings.tap_port is None and "tap" not in ports
        mounts = {m["mountPath"] for m in sc["volumeMounts"]}
        assert "/var/run/dsv4-probe" in mounts


def test_group_pods_reach_each_other(lws):
    (policy,) = [o for o in _objects() if o["kind"] == "NetworkPolicy"]
    group = {"leaderworkerset.sigs.k8s.io/name": lws["metadata"]["name"]}
    assert policy["spec"]["podSelector"]["matchLabels"] == group
    (rule,) = policy["spec"]["ingress"]
    assert rule == {"from": [{"podSelector": {"matchLabels": group}}]}, "every port"
    # the single-node policy allows DNS only: the group's pods also reach each other out
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    (out,) = policy["spec"]["egress"]
    assert out == {"to": [{"podSelector": {"matchLabels": group}}]}, "every port"


def test_kustomize_build_replaces_the_deployment(tmp_path):
    docs = kustomize_build(MULTI)
    kinds = [d["kind"] for d in docs]
    assert "Deployment" not in kinds and kinds.count("LeaderWorkerSet") == 1
    services = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"}
    head = services["sglang-dsv4"]["spec"]
    assert head["selector"]["leaderworkerset.sigs.k8s.io/worker-index"] == "0"
    assert {p["name"] for p in head["ports"]} == {"http", "tap"}
    (monitor,) = [d for d in docs if d["kind"] == "ServiceMonitor"]
    wanted = monitor["spec"]["selector"]["matchLabels"].items()
    scraped = [n for n, s in services.items() if wanted <= s["metadata"]["labels"].items()]
    assert scraped == ["sglang-dsv4-metrics"], "every node's sidecar scraped exactly once"
    assert all(d["metadata"].get("namespace") == "dsv4" for d in docs if d["kind"] != "Namespace")
