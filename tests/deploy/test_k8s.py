"""docker/k8s: the generated monitoring objects are fresh and well-formed, every built-in object
validates against the Kubernetes OpenAPI schemas bundled with kubernetes-validate, the CRDs have
what the Prometheus Operator needs, and the pod is wired and locked down as documented."""

from __future__ import annotations

import itertools
import re
from pathlib import Path, PurePosixPath
from typing import Any

import kubernetes_validate
import pytest
import yaml

from alerts.fleet import KUBERNETES_LABELS
from tests.deploy.conftest import (
    DOCKER,
    K8S,
    METRICS_PORT,
    PROBE_DIR,
    REPO,
    SCRAPE_JOB,
    SGLANG_PORT,
    SIDECAR_UID,
    TAP_METRICS_PORT,
    TAP_PORT,
    k8s_manifest_files,
    k8s_objects,
    kustomize_build,
    load_yaml,
    load_yaml_all,
    run,
)

# The oldest Kubernetes minor we claim to support, and the newest the package bundles.
K8S_VERSIONS = ("1.29.0", kubernetes_validate.utils.latest_version())
CRD_GROUP = "monitoring.coreos.com/v1"


def objects_of(kind: str) -> list[dict[str, Any]]:
    return [obj for _, obj in k8s_objects() if obj["kind"] == kind]


def one(kind: str) -> dict[str, Any]:
    (obj,) = objects_of(kind)
    return obj


@pytest.fixture(scope="module")
def pod() -> dict[str, Any]:
    return one("Deployment")["spec"]["template"]["spec"]


def container(pod: dict[str, Any], name: str) -> dict[str, Any]:
    (c,) = [c for c in pod["containers"] if c["name"] == name]
    return c


def env(c: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in c.get("env", []) if "value" in e}


def flags(args: list[str]) -> dict[str, str]:
    """Each argument mapped to the one after it: the value of every `--flag value` pair."""
    return dict(itertools.pairwise(args))


def mounts(c: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {m["mountPath"]: m for m in c.get("volumeMounts", [])}


# --- generated files -------------------------------------------------------------------------


def test_generated_files_are_fresh(generator):
    stale = generator.stale(generator.render_all())
    assert not stale, f"stale docker/k8s/generated/{stale}: run `make k8s` and commit"


def test_generated_rules_are_exactly_the_alert_groups(generator):
    rule = one("PrometheusRule")
    expected = [g for p in generator.rule_files(REPO) for g in load_yaml(p)["groups"]]
    assert rule["spec"]["groups"] == expected
    dashboards = sorted((REPO / "dashboards").glob("*.json"))
    maps = objects_of("ConfigMap")
    for path in dashboards:
        (cm,) = [c for c in maps if path.name in c.get("data", {})]
        assert cm["data"][path.name] == path.read_text(encoding="utf-8"), "byte for byte"
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text, encoding="utf-8")
    return tmp_path


RULES = "groups:\n  - name: {name}\n    rules:\n      - record: a:b\n        expr: vector(1)\n"


def test_generator_without_inputs_gives_valid_empty_objects(generator, tmp_path):
    out = generator.render_all(tmp_path)
    (rule,) = yaml.safe_load_all(out[generator.RULES_OUT])
    assert rule["kind"] == "PrometheusRule" and rule["spec"]["groups"] == []
    (lst,) = yaml.safe_load_all(out[generator.DASHBOARDS_OUT])
    assert lst == {"apiVersion": "v1", "kind": "List", "items": []}
    assert "No rule files" in out[generator.RULES_OUT]
    assert "No dashboards" in out[generator.DASHBOARDS_OUT]


def test_generator_reads_top_level_rule_files_only(generator, tmp_path):
    root = _tree(
        tmp_path,
        {
            "alerts/b.yml": RULES.format(name="b"),
            "alerts/a.yaml": RULES.format(name="a"),
            "alerts/tests/a.test.yaml": "rule_files: [../a.yaml]\ntests: []\n",
            "alerts/README.md": "not yaml: [",
        },
    )
    (rule,) = yaml.safe_load_all(generator.render_prometheus_rule(root))
    assert [g["name"] for g in rule["spec"]["groups"]] == ["a", "b"]


@pytest.mark.parametrize(
    ("files", "message"),
    [
        (
            {"alerts/a.yaml": RULES.format(name="x"), "alerts/b.yaml": RULES.format(name="x")},
            "group 'x' is in both",
        ),
        ({"alerts/site.yaml": 'selector: job="x"\n'}, "not a Prometheus rule file"),
        ({"alerts/a.yaml": "groups:\n  - rules: []\n"}, "needs a `name`"),
        ({"dashboards/d.json": '{"title": "no uid"}'}, "no `uid`"),
        ({"dashboards/d.json": "{"}, "not valid JSON"),
    ],
    ids=["duplicate-group", "not-rules", "unnamed-group", "no-uid", "bad-json"],
)
def test_generator_refuses_bad_input(generator, tmp_path, files, message):
    root = _tree(tmp_path, files)
    with pytest.raises(generator.GenerateError, match=re.escape(message)):
        generator.render_all(root)


def test_configmap_names_are_dns_labels(generator):
    assert generator.configmap_name("Memory_Over commit") == "dsv4-dashboard-memory-over-commit"
    for cm in objects_of("ConfigMap"):
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", cm["metadata"]["name"])


# --- schemas ----------------------------------------------------------------------------------


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_builtin_objects_validate_strictly(version):
    checked = 0
    for path, obj in k8s_objects():
        if obj["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # CRDs: no bundled schema; see the tests below
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(
                f"{path.relative_to(REPO)} {obj['kind']}: {exc.message} at "
                f"{'.'.join(map(str, exc.path))}"
            )
        checked += 1
    assert checked >= 5


def _listed(directory: Path) -> list[Path]:
    """The files a kustomization lists, a listed directory by its own kustomization's list."""
    out: list[Path] = []
    for entry in load_yaml(directory / "kustomization.yaml")["resources"]:
        path = directory / entry
        out += _listed(path) if path.is_dir() else [path]
    return out


def test_kustomization_lists_every_manifest_once():
    kustomization = load_yaml(K8S / "kustomization.yaml")
    listed = _listed(K8S)
    assert len(listed) == len(set(listed))
    assert sorted(listed) == k8s_manifest_files()
    images = {i["name"] for i in kustomization["images"]}
    used = {
        c["image"].rsplit(":", 1)[0]
        for c in one("Deployment")["spec"]["template"]["spec"]["containers"]
    }
    assert used == images, "every image tag is set in one place"


def test_kustomize_build():
    """A real kustomize renders the whole set into the namespace."""
    docs = kustomize_build(K8S)
    kinds = {d["kind"] for d in docs}
    assert {"Deployment", "Service", "ServiceMonitor", "PrometheusRule", "Namespace"} <= kinds
    assert all(
        d["metadata"].get("namespace", "dsv4") == "dsv4" for d in docs if d["kind"] != "Namespace"
    )


def test_service_monitor_has_what_the_operator_needs():
    sm = one("ServiceMonitor")
    assert sm["apiVersion"] == CRD_GROUP and sm["metadata"]["name"]
    svc = one("Service")
    selector = sm["spec"]["selector"]["matchLabels"]
    assert selector.items() <= svc["metadata"]["labels"].items(), "selects the Service"
    ports = {p["name"]: p["port"] for p in svc["spec"]["ports"]}
    endpoint, tap, sglang = sm["spec"]["endpoints"]
    assert ports[endpoint["port"]] == METRICS_PORT
    # the tap's own /metrics (its container): the same job and target labels as the sidecar's
    assert ports[tap["port"]] == TAP_METRICS_PORT and tap["path"] == "/metrics"
    assert tap["relabelings"] == endpoint["relabelings"]
    # SGLang's own /metrics on its API port, as its own job, no metric relabeling (tp_rank kept).
    assert ports[sglang["port"]] == SGLANG_PORT and sglang["path"] == "/metrics"
    assert sglang["relabelings"] == [
        {"action": "replace", "targetLabel": "job", "replacement": "sglang"}
    ]
    assert "metricRelabelings" not in sglang
    seconds = {"s": 1, "m": 60}
    interval, timeout = (
        int(v[:-1]) * seconds[v[-1]] for v in (endpoint["interval"], endpoint["scrapeTimeout"])
    )
    assert 0 < timeout <= interval
    relabel = endpoint["relabelings"][0]
    assert relabel["targetLabel"] == "job" and relabel["replacement"] == SCRAPE_JOB
    # The Kubernetes labels the fleet rules group by (alerts/fleet.py).
    targets = {r["targetLabel"] for r in endpoint["relabelings"]}
    assert set(KUBERNETES_LABELS) <= targets


def test_prometheus_rule_is_well_formed_and_promtool_clean(promtool, tmp_path):
    rule = one("PrometheusRule")
    assert rule["apiVersion"] == CRD_GROUP and rule["metadata"]["name"]
    groups = rule["spec"]["groups"]
    assert len({g["name"] for g in groups}) == len(groups)
    for group in groups:
        assert group["rules"], group["name"]
        for r in group["rules"]:
            assert ("alert" in r) != ("record" in r), r
            assert isinstance(r.get("expr"), str) and r["expr"].strip(), r
    if not groups:
        pytest.skip("no rule groups in alerts/ yet")
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": groups}), encoding="utf-8")
    res = run([promtool, "check", "rules", str(path)])
    assert res.returncode == 0, res.stdout + res.stderr


# --- the pod -------------------------------------------------------------------------------------


def test_both_containers_are_locked_down(pod):
    assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC")
    # Documented as an opt-in for per-process memory only.
    assert not pod.get("shareProcessNamespace")
    for c in pod["containers"]:
        sc = c["securityContext"]
        assert sc["runAsNonRoot"] is True and sc["runAsUser"] > 0, c["name"]
        assert sc["allowPrivilegeEscalation"] is False, c["name"]
        assert sc["capabilities"]["drop"] == ["ALL"] and not sc["capabilities"].get("add")
        assert not sc.get("privileged"), c["name"]
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            assert probe in c, f"{c['name']}: {probe}"
        assert c["resources"]["requests"] and c["resources"]["limits"], c["name"]
    sidecar = container(pod, "dsv4-sidecar")
    assert sidecar["securityContext"]["readOnlyRootFilesystem"] is True
    # its own seccomp profile, so the join Component carries it into pods it does not own
    assert sidecar["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert sidecar["securityContext"]["runAsUser"] == SIDECAR_UID
    assert mounts(sidecar)["/tmp"]["name"] in {v["name"] for v in pod["volumes"] if "emptyDir" in v}


# Volume types the "restricted" Pod Security Standard admits.
RESTRICTED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}


def test_pod_meets_the_restricted_pod_security_standard(pod):
    """The rules of the "restricted" profile, checked here because no admission controller runs
    offline; namespace.yaml warns and audits against the same profile in a cluster."""
    pod_sc = pod.get("securityContext", {})
    for c in pod["containers"]:
        sc = c["securityContext"]
        seccomp = sc.get("seccompProfile", pod_sc.get("seccompProfile", {}))
        assert seccomp.get("type") in ("RuntimeDefault", "Localhost"), c["name"]
        assert sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) is True, c["name"]
        assert sc.get("runAsUser", pod_sc.get("runAsUser", 1)) != 0, c["name"]
        assert set(sc["capabilities"].get("add", [])) <= {"NET_BIND_SERVICE"}, c["name"]
        assert not any("hostPort" in p for p in c.get("ports", [])), c["name"]
    for volume in pod["volumes"]:
        kinds = set(volume) - {"name"}
        assert kinds <= RESTRICTED_VOLUMES, volume["name"]
    labels = one("Namespace")["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] in ("baseline", "restricted")
    assert labels["pod-security.kubernetes.io/warn"] == "restricted"


def test_sidecar_resources_and_probes(pod):
    sidecar = container(pod, "dsv4-sidecar")
    res = sidecar["resources"]
    assert res["requests"] == {"cpu": "50m", "memory": "128Mi"}
    # the memory limit is the one bench/bench_hostile_rss.py measures against (bench/RESULTS.md)
    assert res["limits"] == {"cpu": "500m", "memory": "1Gi"}
    assert "nvidia.com/gpu" not in res["limits"], "a GPU request would take one from SGLang"
    paths = {
        p: sidecar[p]["httpGet"]["path"]
        for p in ("startupProbe", "livenessProbe", "readinessProbe")
    }
    assert paths == {
        "startupProbe": "/healthz",
        "livenessProbe": "/healthz",
        "readinessProbe": "/readyz",
    }
    ports = {p["name"]: p["containerPort"] for p in sidecar["ports"]}
    assert ports == {"metrics": METRICS_PORT}, "the tap is a container of its own"
    assert all(sidecar[p]["httpGet"]["port"] == "metrics" for p in paths)


def test_tap_is_its_own_container(pod):
    """Issue 31: the request path shares no CPU limit, process or loop with grading, scraping
    and the API; it posts samples to the sidecar's ingest over loopback with the token file."""
    tap, sidecar = container(pod, "dsv4-tap"), container(pod, "dsv4-sidecar")
    assert tap["args"] == ["tap"] and tap["image"] == sidecar["image"]
    ports = {p["name"]: p["containerPort"] for p in tap["ports"]}
    assert ports == {"tap": TAP_PORT, "tap-metrics": TAP_METRICS_PORT}
    res = tap["resources"]
    assert res["requests"]["cpu"] and res["limits"]["cpu"] and res["limits"]["memory"]
    e, se = env(tap), env(sidecar)
    assert e["DSV4_SIDECAR_SERVER_URL"] == f"http://127.0.0.1:{SGLANG_PORT}"
    assert e["DSV4_SIDECAR_PORT"] == str(TAP_PORT)
    assert e["DSV4_SIDECAR_METRICS_PORT"] == str(TAP_METRICS_PORT)
    assert e["DSV4_SIDECAR_SIDECAR_URL"] == f"http://127.0.0.1:{METRICS_PORT}"
    token = e["DSV4_SIDECAR_INGEST_TOKEN_FILE"]
    assert token == se["DSV4_SIDECAR_INGEST_TOKEN_FILE"]
    assert mounts(tap)[str(Path(token).parent)]["name"] == "ingest-token"
    assert "DSV4_SIDECAR_TAP_PORT" not in se, "no second tap in the sidecar's process"
    assert tap["securityContext"]["readOnlyRootFilesystem"] is True
    assert tap["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    # its variables load as `dsv4-sidecar tap` settings: tests/deploy/test_settings.py


def test_sglang_container(pod):
    sglang = container(pod, "sglang")
    args = sglang["args"]
    for flag in ("--enable-metrics", "--enable-hierarchical-cache"):
        assert flag in args
    value = flags(args)
    assert value["--tool-call-parser"] == "deepseekv4"
    assert value["--port"] == str(SGLANG_PORT)
    gpus = sglang["resources"]["limits"]["nvidia.com/gpu"]
    assert int(gpus) == int(value["--tp-size"]) == 8
    assert {p["name"]: p["containerPort"] for p in sglang["ports"]} == {"http": SGLANG_PORT}


def test_shared_env_configmap_matches_compose(pod):
    cm = next(c for c in objects_of("ConfigMap") if c["metadata"]["name"] == "dsv4-deployment-env")
    for c in pod["containers"]:
        refs = [e["configMapRef"]["name"] for e in c.get("envFrom", [])]
        # the tap prices nothing: SGLang's switches are not its business
        assert refs == ([] if c["name"] == "dsv4-tap" else ["dsv4-deployment-env"]), c["name"]
    compose_env = {}
    for line in (DOCKER / "deployment.env").read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, val = line.partition("=")
            compose_env[key] = val
    assert cm["data"] == compose_env, "Kubernetes and compose run the same deployment switches"


def test_sidecar_wiring(pod):
    sglang, sidecar = container(pod, "sglang"), container(pod, "dsv4-sidecar")
    e = env(sidecar)
    assert e["DSV4_SIDECAR_SERVER_URL"] == f"http://127.0.0.1:{SGLANG_PORT}"
    assert e["DSV4_SIDECAR_GPU_BACKEND"] == "nvml"
    assert e["NVIDIA_VISIBLE_DEVICES"] == "all" and e["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
    volumes = {v["name"]: v for v in pod["volumes"]}
    # Probe snapshots: the same emptyDir, the same path, written by SGLang, read by the sidecar.
    assert env(sglang)["DSV4_PROBE"] == "1"
    assert env(sglang)["DSV4_PROBE_DIR"] == e["DSV4_SIDECAR_PROBE_DIR"] == PROBE_DIR
    probe_sg, probe_sc = mounts(sglang)[PROBE_DIR], mounts(sidecar)[PROBE_DIR]
    assert probe_sg["name"] == probe_sc["name"] and "emptyDir" in volumes[probe_sc["name"]]
    assert probe_sc.get("readOnly") is True and not probe_sg.get("readOnly")
    # The model's config.json: the file SGLang loads from --model-path, mounted read-only.
    model_path = PurePosixPath(flags(sglang["args"])["--model-path"])
    cfg = mounts(sidecar)[e["DSV4_SIDECAR_MODEL_CONFIG_PATH"]]
    (root,) = [m for m in sglang["volumeMounts"] if m["name"] == cfg["name"]]
    assert cfg["readOnly"] is True and root["readOnly"] is True
    assert PurePosixPath(root["mountPath"]) / cfg["subPath"] == model_path / "config.json"
    # The samples token: a file of a required Secret (the sidecar refuses a missing file).
    token = PurePosixPath(e["DSV4_SIDECAR_SAMPLES_TOKEN_FILE"])
    mount = mounts(sidecar)[str(token.parent)]
    assert mount["readOnly"] is True
    secret = volumes[mount["name"]]["secret"]
    assert secret["optional"] is False and secret["defaultMode"] == 0o444
    assert "DSV4_SIDECAR_SAMPLES_TOKEN" not in e, "the token never sits in the pod spec"


def test_service_routes_to_the_pod(pod):
    svc = one("Service")
    labels = one("Deployment")["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= labels.items()
    named = {p["name"] for c in pod["containers"] for p in c["ports"]}
    ports = {p["name"]: (p["port"], p["targetPort"]) for p in svc["spec"]["ports"]}
    assert ports == {
        "http": (SGLANG_PORT, "http"),
        "tap": (TAP_PORT, "tap"),
        "tap-metrics": (TAP_METRICS_PORT, "tap-metrics"),
        "metrics": (METRICS_PORT, "metrics"),
    }
    assert {t for _, t in ports.values()} <= named


def test_every_manifest_parses_to_objects():
    for path in k8s_manifest_files():
        docs = load_yaml_all(path)
        assert docs, path
        assert all({"apiVersion", "kind", "metadata"} <= d.keys() for d in docs), path
