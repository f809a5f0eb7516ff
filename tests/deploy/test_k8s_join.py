"""docker/k8s-join: the kustomize Component that adds the sidecar to an SGLang workload someone
else deployed. An SGLang Deployment, a StatefulSet and SGLang's multi-node LeaderWorkerSet
(tests/deploy/join/, written as their users write them) are rendered through it with a real
kustomize; every pod template gains the sidecar, keeps its own containers and validates against
the bundled Kubernetes schemas; the PodMonitor scrapes the sidecar and SGLang's own /metrics."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.deploy.conftest import (
    DOCKER,
    METRICS_PORT,
    REPO,
    SCRAPE_JOB,
    SGLANG_PORT,
    kustomize_build,
    load_yaml,
)

JOIN = DOCKER / "k8s-join"
WORKLOADS = REPO / "tests" / "deploy" / "join"
K8S_VERSIONS = ("1.29.0", kubernetes_validate.utils.latest_version())
SIDECAR = "dsv4-sidecar"
KINDS = ("Deployment", "StatefulSet", "LeaderWorkerSet")


def _overlay(tmp_path: Path, *workloads: str) -> Path:
    """An overlay as a user writes it: their manifests plus `components:` naming ours."""
    for name in workloads:
        shutil.copy(WORKLOADS / name, tmp_path / name)
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                "namespace": "inference",
                "resources": list(workloads),
                "components": [os.path.relpath(JOIN, tmp_path)],
            }
        ),
        encoding="utf-8",
    )
    return tmp_path


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> list[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("join")
    return kustomize_build(
        _overlay(tmp, "deployment.yaml", "statefulset.yaml", "leaderworkerset.yaml")
    )


def _of(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (obj,) = [d for d in docs if d["kind"] == kind]
    return obj


def _templates(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    if obj["kind"] == "LeaderWorkerSet":
        t = obj["spec"]["leaderWorkerTemplate"]
        return {"leader": t["leaderTemplate"], "worker": t["workerTemplate"]}
    return {"pod": obj["spec"]["template"]}


def _names(tpl: dict[str, Any], key: str) -> list[str]:
    return [c["name"] for c in tpl["spec"].get(key, [])]


@pytest.mark.parametrize(
    ("kind", "own"),
    [
        ("Deployment", ["sglang"]),
        ("StatefulSet", ["sglang"]),
        ("LeaderWorkerSet", ["sglang-leader", "sglang-worker"]),
    ],
)
def test_every_pod_template_gains_the_sidecar_and_keeps_its_own(rendered, kind, own):
    obj = _of(rendered, kind)
    original = load_yaml(WORKLOADS / f"{kind.lower()}.yaml")
    for role, tpl in _templates(obj).items():
        before = _templates(original)[role]
        assert _names(tpl, "containers") == [*_names(before, "containers"), SIDECAR], role
        assert set(_names(tpl, "containers")) & set(own)
        vols = _names(tpl, "volumes")
        assert set(_names(before, "volumes")) <= set(vols), "the workload's volumes stay"
        assert len(vols) == len(set(vols))
        assert {"dsv4-probe", "samples-token", "sidecar-tmp"} <= set(vols)
        (sc,) = [c for c in tpl["spec"]["containers"] if c["name"] == SIDECAR]
        mounted = {m["name"] for m in sc["volumeMounts"]}
        assert mounted <= set(vols), "every mount has its volume"
        ports = [
            p["name"] for c in tpl["spec"]["containers"] for p in c.get("ports", []) if "name" in p
        ]
        assert len(ports) == len(set(ports)), f"port names clash in {kind} {role}: {ports}"
        assert {"dsv4-metrics": METRICS_PORT}.items() <= {
            p["name"]: p["containerPort"] for p in sc["ports"]
        }.items()


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_rendered_objects_validate(rendered, version):
    """Built-in kinds as they are; a LeaderWorkerSet's pod templates as Pods (the CRD has no
    bundled schema; its own fields are the workload's, untouched)."""
    checked = 0
    for obj in rendered:
        docs: list[tuple[str, dict[str, Any]]]
        if obj["kind"] == "LeaderWorkerSet":
            docs = [
                (role, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": role}, **tpl})
                for role, tpl in _templates(obj).items()
            ]
        elif obj["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # PodMonitor: checked field by field below
        else:
            docs = [(obj["kind"], obj)]
        for what, doc in docs:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                pytest.fail(f"{what}: {exc.message} at {'.'.join(map(str, exc.path))}")
            checked += 1
    assert checked == 5  # Deployment, StatefulSet, 2 LWS templates, the ConfigMap


def test_configmap_reference_resolves(rendered):
    names = {d["metadata"]["name"] for d in rendered if d["kind"] == "ConfigMap"}
    for obj in rendered:
        for tpl in (
            _templates(obj).values() if "spec" in obj and obj["kind"] != "PodMonitor" else []
        ):
            (sc,) = [c for c in tpl["spec"]["containers"] if c["name"] == SIDECAR]
            required = {
                e["configMapRef"]["name"]
                for e in sc["envFrom"]
                if not e["configMapRef"].get("optional")
            }
            assert required <= names, obj["kind"]


def test_lws_sidecars_take_their_node_rank_and_the_leaders_address(rendered):
    for role, tpl in _templates(_of(rendered, "LeaderWorkerSet")).items():
        (sc,) = [c for c in tpl["spec"]["containers"] if c["name"] == SIDECAR]
        env = {e["name"]: e for e in sc["env"]}
        assert "worker-index" in env["DSV4_SIDECAR_NODE_RANK"]["valueFrom"]["fieldRef"]["fieldPath"]
        assert f"http://$(LWS_LEADER_ADDRESS):{SGLANG_PORT}" in sc["args"], role
        assert "DSV4_SIDECAR_SGLANG_URL" not in env


def test_unlabelled_workloads_are_left_alone(tmp_path):
    text = (WORKLOADS / "deployment.yaml").read_text(encoding="utf-8")
    (tmp_path / "deployment.yaml").write_text(text.replace('dsv4-sidecar/join: "true"', "x: y"))
    (tmp_path / "kustomization.yaml").write_text(
        f"resources: [deployment.yaml]\ncomponents: [{os.path.relpath(JOIN, tmp_path)}]\n"
    )
    dep = _of(kustomize_build(tmp_path), "Deployment")
    assert _names(dep["spec"]["template"], "containers") == ["sglang"]


def test_pod_monitor_scrapes_the_sidecar_and_sglang(rendered):
    pm = _of(rendered, "PodMonitor")
    assert pm["apiVersion"] == "monitoring.coreos.com/v1"
    assert pm["metadata"]["namespace"] == "inference"
    sidecar, sglang = pm["spec"]["podMetricsEndpoints"]
    for ep, job in ((sidecar, SCRAPE_JOB), (sglang, "sglang")):
        assert ep["port"] == "dsv4-metrics" and ep["path"] == "/metrics"
        jobs = [r["replacement"] for r in ep["relabelings"] if r.get("targetLabel") == "job"]
        assert jobs == [job]
        assert "deployment" in {r.get("targetLabel") for r in ep["relabelings"]}
    (addr,) = [r for r in sglang["relabelings"] if r.get("targetLabel") == "__address__"]
    assert addr["replacement"] == f"$1:{SGLANG_PORT}"
    (drop,) = [r for r in sglang["relabelings"] if r["action"] == "drop"]
    assert drop["regex"] == "[1-9][0-9]*", "workers (index > 0) serve no HTTP"
    # No metricRelabelings: SGLang's series keep every label (tp_rank, ...).
    assert "metricRelabelings" not in sglang
