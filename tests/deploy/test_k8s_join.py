"""docker/k8s-join: the kustomize Component that adds the sidecar to an SGLang workload someone
else deployed. An SGLang Deployment, a StatefulSet and SGLang's multi-node LeaderWorkerSet
(tests/deploy/join/, written as their users write them) are rendered through it with a real
kustomize; every pod template gains the sidecar, keeps its own containers, mounts no
service-account token and validates against the bundled Kubernetes schemas; the PodMonitor
scrapes the sidecar and SGLang's own /metrics; the PrometheusRule and dashboards come along.
The settings overlay of docs/deploy.md is rendered as written."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.deploy.conftest import (
    DOCKER,
    K8S,
    METRICS_PORT,
    REPO,
    SCRAPE_JOB,
    SGLANG_PORT,
    kustomize_build,
    load_yaml,
    load_yaml_all,
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
        assert {"dsv4-probe", "samples-token", "ingest-token", "sidecar-tmp"} <= set(vols)
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


def test_no_service_account_token(rendered):
    """Neither SGLang nor the sidecar calls the Kubernetes API: the token is mounted in
    neither container of a joined pod."""
    for kind in KINDS:
        for role, tpl in _templates(_of(rendered, kind)).items():
            assert tpl["spec"]["automountServiceAccountToken"] is False, (kind, role)


def test_joined_sidecar_has_seccomp_and_reads_its_tokens_from_files(rendered):
    """The workload owns its pod's securityContext: the sidecar brings its own seccomp profile,
    and its tokens are files of required Secrets, never environment variables."""
    for kind in KINDS:
        for role, tpl in _templates(_of(rendered, kind)).items():
            (sc,) = [c for c in tpl["spec"]["containers"] if c["name"] == SIDECAR]
            assert sc["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
            env = {e["name"]: e.get("value") for e in sc["env"]}
            assert (
                "DSV4_SIDECAR_INGEST_TOKEN" not in env and "DSV4_SIDECAR_SAMPLES_TOKEN" not in env
            )
            mounts = {m["mountPath"]: m["name"] for m in sc["volumeMounts"]}
            volumes = {v["name"]: v for v in tpl["spec"]["volumes"]}
            for key, secret in (
                ("DSV4_SIDECAR_INGEST_TOKEN_FILE", "dsv4-sidecar-ingest-token"),
                ("DSV4_SIDECAR_SAMPLES_TOKEN_FILE", "dsv4-sidecar-samples-token"),
            ):
                folder = env[key].rsplit("/", 1)[0]
                volume = volumes[mounts[folder]]["secret"]
                assert volume["secretName"] == secret and volume["optional"] is False, (kind, role)


def test_network_policy_selects_every_joined_pod_and_guards_the_sidecars_port(rendered):
    """Ingress to the joined pods: this namespace and Prometheus on every port (the sidecar's
    API, SGLang's /metrics, a LeaderWorkerSet group's own traffic), the client namespaces on
    every port but the sidecar's; the peers are docker/k8s/networkpolicy.yaml's."""
    (policy,) = [d for d in rendered if d["kind"] == "NetworkPolicy"]
    selector = policy["spec"]["podSelector"]["matchLabels"]
    for kind in KINDS:
        for role, tpl in _templates(_of(rendered, kind)).items():
            labels = tpl["metadata"]["labels"]
            assert selector.items() <= labels.items(), (kind, role)
    original = load_yaml(WORKLOADS / "leaderworkerset.yaml")["spec"]["leaderWorkerTemplate"]
    leader = _of(rendered, "LeaderWorkerSet")["spec"]["leaderWorkerTemplate"]["leaderTemplate"]
    assert (
        original["leaderTemplate"]["metadata"]["labels"].items()
        <= leader["metadata"]["labels"].items()
    ), "the workload's own labels stay"
    assert policy["spec"]["policyTypes"] == ["Ingress"], "the workload's egress is its own"
    everything, clients = policy["spec"]["ingress"]
    packaged = load_yaml(K8S / "networkpolicy.yaml")["spec"]["ingress"]
    (metrics_rule,) = [r for r in packaged if "metrics" in {p["port"] for p in r["ports"]}]
    assert "ports" not in everything and everything["from"] == metrics_rule["from"]
    assert {"podSelector": {}} not in clients["from"]
    open_ports = [(p["port"], p["endPort"]) for p in clients["ports"]]
    assert not any(lo <= METRICS_PORT <= hi for lo, hi in open_ports), "9400: not to clients"
    assert any(lo <= SGLANG_PORT <= hi for lo, hi in open_ports)


def _generated(name: str) -> list[dict[str, Any]]:
    return load_yaml_all(K8S / "generated" / name)


def test_rules_and_dashboards_come_along(rendered):
    """An overlay that lists only the Component gets docker/k8s's generated PrometheusRule and
    dashboard ConfigMaps, as generated, in its own namespace."""
    (rule,) = _generated("prometheusrule.yaml")
    got = _of(rendered, "PrometheusRule")
    assert got["metadata"]["name"] == rule["metadata"]["name"]
    assert got["metadata"]["namespace"] == "inference"
    assert got["spec"] == rule["spec"]
    dashboards = {d["metadata"]["name"]: d["data"] for d in _generated("dashboards.yaml")}
    assert dashboards, "docker/k8s/generated/dashboards.yaml has no dashboards"
    got_dashboards = {
        d["metadata"]["name"]: d
        for d in rendered
        if d["kind"] == "ConfigMap" and d["metadata"]["name"] in dashboards
    }
    assert set(got_dashboards) == set(dashboards)
    for name, cm in got_dashboards.items():
        assert cm["data"] == dashboards[name], name
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert cm["metadata"]["namespace"] == "inference"


def test_settings_object_stays_out_of_the_output(rendered):
    """dsv4-sidecar-join-settings is read while building (local-config), never applied."""
    names = {d["metadata"]["name"] for d in rendered}
    assert "dsv4-sidecar-join-settings" not in names
    assert "dsv4-sidecar-join" in names


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
    # Deployment, StatefulSet, 2 LWS templates, the sidecar's ConfigMap, the NetworkPolicy, the
    # dashboards
    assert checked == 6 + len(_generated("dashboards.yaml"))


def test_configmap_reference_resolves(rendered):
    names = {d["metadata"]["name"] for d in rendered if d["kind"] == "ConfigMap"}
    for obj in (d for d in rendered if d["kind"] in KINDS):
        for tpl in _templates(obj).values():
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
        assert "DSV4_SIDECAR_SERVER_URL" not in env


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


# --- the settings, as docs/deploy.md writes them ----------------------------------------------
DEPLOY_DOC = REPO / "docs" / "deploy.md"
DOC_OVERLAY_MARK = "# your overlay's kustomization.yaml"
DOC_REPO = "../dsv4-sidecar/docker/"


def _doc_overlay() -> dict[str, Any]:
    """The overlay docs/deploy.md shows, parsed (the one YAML block that starts with the mark)."""
    blocks = re.findall(r"```yaml\n(.*?)```", DEPLOY_DOC.read_text(encoding="utf-8"), re.S)
    (block,) = [b for b in blocks if b.split("\n", 1)[0] == DOC_OVERLAY_MARK]
    return yaml.safe_load(block)


def _settings_overlay(tmp_path: Path, overlay: dict[str, Any]) -> list[dict[str, Any]]:
    """``overlay`` with our workloads for the user's, and the docs' path to this repository
    replaced by the real relative one."""
    workloads = ("deployment.yaml", "statefulset.yaml", "leaderworkerset.yaml")
    for name in workloads:
        shutil.copy(WORKLOADS / name, tmp_path / name)
    here = os.path.relpath(DOCKER, tmp_path) + "/"

    def local(paths: list[str]) -> list[str]:
        assert all(p.startswith(DOC_REPO) for p in paths), paths
        return [here + p.removeprefix(DOC_REPO) for p in paths]

    doc = {
        **overlay,
        "namespace": "inference",
        "resources": list(workloads),
        "components": local(overlay["components"]),
    }
    if "transformers" in overlay:
        doc["transformers"] = local(overlay["transformers"])
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(doc), encoding="utf-8")
    return kustomize_build(tmp_path)


def _patched(overlay: dict[str, Any], name: str) -> dict[str, str]:
    """The ``data`` the overlay's patch of ConfigMap ``name`` sets."""
    for patch in overlay["patches"]:
        body = yaml.safe_load(patch["patch"])
        if isinstance(body, dict) and body["metadata"]["name"] == name:
            return body["data"]
    raise AssertionError(f"docs/deploy.md's overlay patches no ConfigMap {name}")


def _sglang_ports(docs: list[dict[str, Any]]) -> dict[str, str]:
    """Where each joined object says SGLang's port is: the sidecar's URL (env, or a
    LeaderWorkerSet's args) per pod template, and the PodMonitor's SGLang target."""
    out = {}
    for obj in (d for d in docs if d["kind"] in KINDS):
        for role, tpl in _templates(obj).items():
            (sc,) = [c for c in tpl["spec"]["containers"] if c["name"] == SIDECAR]
            urls = [e["value"] for e in sc["env"] if e["name"] == "DSV4_SIDECAR_SERVER_URL"]
            urls += [a for a in sc.get("args", []) if a.startswith("http://")]
            (url,) = urls
            out[f"{obj['kind']} {role}"] = url.rsplit(":", 1)[1]
    (_sidecar, sglang) = _of(docs, "PodMonitor")["spec"]["podMetricsEndpoints"]
    (addr,) = [r for r in sglang["relabelings"] if r.get("targetLabel") == "__address__"]
    out["PodMonitor"] = addr["replacement"].rsplit(":", 1)[1]
    return out


def test_the_documented_settings_overlay(tmp_path):
    """docs/deploy.md's overlay, rendered: SGLang's port everywhere it is used, the selector
    label on the operator's objects only, the model in the sidecar's ConfigMap."""
    overlay = _doc_overlay()
    docs = _settings_overlay(tmp_path, overlay)
    port = _patched(overlay, "dsv4-sidecar-join-settings")["sglangPort"]
    assert port != str(SGLANG_PORT), "the documented example must change the default"
    ports = _sglang_ports(docs)
    assert len(ports) == 5  # Deployment, StatefulSet, LWS leader and worker, PodMonitor
    assert set(ports.values()) == {port}, ports

    labelled = {d["kind"] for d in docs if d["metadata"].get("labels", {}).get("release")}
    assert labelled == {"PodMonitor", "PrometheusRule"}

    preset = _patched(overlay, "dsv4-sidecar-join")["DSV4_SIDECAR_MODEL_PRESET"]
    (join_env,) = [
        d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "dsv4-sidecar-join"
    ]
    assert join_env["data"]["DSV4_SIDECAR_MODEL_PRESET"] == preset != "deepseek-v4-flash"


def test_settings_transformer_without_a_patch_changes_nothing(tmp_path, rendered):
    """Listing docker/k8s-join/settings alone keeps every default: its replacements read the
    Component's own settings, which carry deployment.yaml's port."""
    overlay = {k: v for k, v in _doc_overlay().items() if k != "patches"}
    docs = _settings_overlay(tmp_path, overlay)
    assert set(_sglang_ports(docs).values()) == {str(SGLANG_PORT)}
    assert sorted(map(yaml.safe_dump, docs)) == sorted(map(yaml.safe_dump, rendered))
