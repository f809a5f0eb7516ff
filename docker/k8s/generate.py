"""Generate the Kubernetes monitoring objects from the repository's alerts and dashboards.

    python docker/k8s/generate.py            # rewrite docker/k8s/generated/ (`make k8s`)
    python docker/k8s/generate.py --check    # exit 1 when the committed output is stale

- ``generated/prometheusrule.yaml``: one PrometheusRule (monitoring.coreos.com/v1) whose
  ``spec.groups`` are every rule group of the top-level ``alerts/*.yaml`` / ``*.yml`` files, in
  file order. ``alerts/tests/`` (promtool unit tests) is not read.
- ``generated/dashboards.yaml``: one ConfigMap per ``dashboards/*.json``, labelled
  ``grafana_dashboard: "1"`` so Grafana's dashboard sidecar (kube-prometheus-stack) loads it.
- ``generated/kustomization.yaml``: the two files above as one kustomization, so that a
  kustomization elsewhere (the join Component) can list the directory: kustomize loads another
  directory's kustomization but refuses its files ("is not in or below").
- ``docker/k8s-join/generated/``: the kustomize Component's patches, PodMonitor and settings,
  which add the sidecar to a workload someone else deployed. The container, its volumes, the
  pod's service-account setting, SGLang's port and the scrape relabelings are read from
  ``deployment.yaml`` and ``servicemonitor.yaml`` here (one place): only what joining changes
  is set below (port names that cannot clash with the workload's, the model from a preset
  instead of a mounted config.json, the probe volume).
- ``docker/k8s-join/settings/replacements.yaml``: the transformer that copies the join
  settings (SGLang's port) into every field that uses it (docker/k8s-join/settings/).

With no rule files the PrometheusRule has no groups, and with no dashboards the file is an empty
``v1/List``: both still apply cleanly, and their headers say why they are empty.

Why generated and committed: kustomize cannot read files outside its directory tree, nor wrap a
plain rule file into a CRD; Helm could, but would need every ``{{ $labels }}`` of the alert
templates escaped. A committed rendering keeps ``kubectl apply -k`` dependency-free and lets CI
fail when it lags the sources (tests/deploy/test_k8s.py).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from exporter import generated

ROOT = Path(__file__).resolve().parents[2]
K8S_DIR = Path(__file__).resolve().parent
OUT_DIR = K8S_DIR / "generated"
JOIN_DIR = K8S_DIR.parent / "k8s-join"
JOIN_OUT_DIR = JOIN_DIR / "generated"
JOIN_SETTINGS_DIR = JOIN_DIR / "settings"
RULES_OUT = "prometheusrule.yaml"
DASHBOARDS_OUT = "dashboards.yaml"
KUSTOMIZATION_OUT = "kustomization.yaml"

PART_OF = {"app.kubernetes.io/part-of": "dsv4-sidecar"}
# The label kube-prometheus-stack's Grafana sidecar watches, and the annotation it can map to a
# folder (`sidecar.dashboards.folderAnnotation: grafana_folder`).
DASHBOARD_LABEL = {"grafana_dashboard": "1"}
DASHBOARD_FOLDER = {"grafana_folder": "DSV4 sidecar"}
# Hard limit of a ConfigMap's data (etcd object size).
CONFIGMAP_MAX_BYTES = 1 << 20


class GenerateError(ValueError):
    """Input the generator refuses, phrased for whoever edits alerts/ or dashboards/."""


class _Dumper(yaml.SafeDumper):
    """Block style for multi-line strings (PromQL, dashboard JSON) so diffs stay reviewable,
    and sequences indented under their key like the hand-written manifests (.yamllint.yaml)."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    return dumper.represent_scalar(
        "tag:yaml.org,2002:str", value, style="|" if "\n" in value else None
    )


_Dumper.add_representer(str, _str)


def _dump(obj: Any) -> str:
    return yaml.dump(obj, Dumper=_Dumper, sort_keys=False, width=1 << 16, allow_unicode=True)


def _sources(files: list[Path], root: Path) -> list[str]:
    return ["# Sources:"] + [f"#   {p.relative_to(root)}" for p in files]


def rule_files(root: Path) -> list[Path]:
    """Top-level rule files of alerts/ (not alerts/tests/), sorted for a stable output."""
    alerts = root / "alerts"
    if not alerts.is_dir():
        return []
    return sorted(p for p in alerts.iterdir() if p.is_file() and p.suffix in (".yaml", ".yml"))


def dashboard_files(root: Path) -> list[Path]:
    dashboards = root / "dashboards"
    return sorted(dashboards.glob("*.json")) if dashboards.is_dir() else []


def _groups(path: Path, root: Path) -> list[dict[str, Any]]:
    rel = path.relative_to(root)
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise GenerateError(f"{rel}: not valid YAML: {exc}") from exc
    # Prometheus loads every alerts/*.yaml as a rule file (docker/prometheus/prometheus.yml), so
    # anything else in that directory is an error there too: refuse it here, naming the file.
    if not isinstance(doc, dict) or not isinstance(doc.get("groups"), list):
        raise GenerateError(f"{rel}: not a Prometheus rule file (no top-level `groups:` list)")
    for group in doc["groups"]:
        if not isinstance(group, dict) or not group.get("name"):
            raise GenerateError(f"{rel}: every group needs a `name`")
        if not isinstance(group.get("rules"), list):
            raise GenerateError(f"{rel}: group {group['name']!r} has no `rules:` list")
    return doc["groups"]


def render_prometheus_rule(root: Path = ROOT) -> str:
    files = rule_files(root)
    groups: list[dict[str, Any]] = []
    seen: dict[str, Path] = {}
    for path in files:
        for group in _groups(path, root):
            name = group["name"]
            if name in seen:
                raise GenerateError(
                    f"rule group {name!r} is in both {seen[name].relative_to(root)} and "
                    f"{path.relative_to(root)}; group names must be unique in a PrometheusRule"
                )
            seen[name] = path
            groups.append(group)
    header = ["# Generated by docker/k8s/generate.py (`make k8s`); do not edit by hand."]
    header += _sources(files, root) if files else ["# No rule files in alerts/ yet: no groups."]
    doc = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": "dsv4-sidecar-rules",
            "labels": {"app.kubernetes.io/name": "dsv4-sidecar", **PART_OF},
        },
        "spec": {"groups": groups},
    }
    return "\n".join(header) + "\n" + _dump(doc)


def configmap_name(stem: str) -> str:
    """A DNS-1123 name from a dashboard file stem."""
    slug = re.sub(r"[^a-z0-9]+", "-", stem.lower()).strip("-")
    if not slug:
        raise GenerateError(f"dashboard file stem {stem!r} gives no usable ConfigMap name")
    return f"dsv4-dashboard-{slug}"[:253].rstrip("-")


def render_dashboards(root: Path = ROOT) -> str:
    files = dashboard_files(root)
    docs: list[dict[str, Any]] = []
    names: dict[str, Path] = {}
    for path in files:
        rel = path.relative_to(root)
        text = path.read_text(encoding="utf-8")
        try:
            dashboard = json.loads(text)
        except json.JSONDecodeError as exc:
            raise GenerateError(f"{rel}: not valid JSON: {exc}") from exc
        if not isinstance(dashboard, dict) or not dashboard.get("uid"):
            raise GenerateError(f"{rel}: not a Grafana dashboard (no `uid`)")
        if len(text.encode("utf-8")) >= CONFIGMAP_MAX_BYTES:
            raise GenerateError(f"{rel}: over 1 MiB, too large for a ConfigMap")
        name = configmap_name(path.stem)
        if name in names:
            raise GenerateError(f"{rel} and {names[name].relative_to(root)} map to {name}")
        names[name] = path
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": name,
                    "labels": {**DASHBOARD_LABEL, **PART_OF},
                    "annotations": dict(DASHBOARD_FOLDER),
                },
                # The file's exact text, so Grafana gets byte-for-byte the committed dashboard.
                "data": {path.name: text},
            }
        )
    header = "# Generated by docker/k8s/generate.py (`make k8s`); do not edit by hand.\n"
    if not docs:
        return (
            header
            + "# No dashboards/*.json yet: an empty List.\n"
            + _dump({"apiVersion": "v1", "kind": "List", "items": []})
        )
    sources = "".join(line + "\n" for line in _sources(files, root))
    return header + sources + "---\n".join(_dump(d) for d in docs)


def render_kustomization() -> str:
    """The generated objects as one kustomization: docker/k8s lists it as a directory, and so
    does the join Component, which as another directory could not list the files."""
    header = (
        "# Generated by docker/k8s/generate.py (`make k8s`); do not edit by hand.\n"
        "# The PrometheusRule and dashboard ConfigMaps as one kustomization, listed as a\n"
        "# directory by docker/k8s and by the join Component (docker/k8s-join).\n"
    )
    doc = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [RULES_OUT, DASHBOARDS_OUT],
    }
    return header + _dump(doc)


def render_all(root: Path = ROOT) -> dict[str, str]:
    """File name (under generated/) -> text."""
    return {
        RULES_OUT: render_prometheus_rule(root),
        DASHBOARDS_OUT: render_dashboards(root),
        KUSTOMIZATION_OUT: render_kustomization(),
    }


def stale(rendered: dict[str, str], out_dir: Path = OUT_DIR) -> list[str]:
    """Generated files that are missing or differ from a fresh rendering."""
    return generated.stale({out_dir / name: text for name, text in rendered.items()})


# --- the join Component (docker/k8s-join) ------------------------------------------------------
SIDECAR = "dsv4-sidecar"
TAP = "dsv4-tap"
SGLANG = "sglang"
# Port names are unique per pod: the workload's own containers may already use `metrics`.
JOIN_PORTS = {"metrics": "dsv4-metrics", "tap": "dsv4-tap"}
# Volumes the sidecar brings along (the weights volume is the workload's: joining uses a preset).
JOIN_VOLUMES = ("dsv4-probe", "samples-token", "ingest-token", "sidecar-tmp")
# The ConfigMap the Component generates (model preset and any DSV4_SIDECAR_* a user adds).
JOIN_ENV_CONFIGMAP = "dsv4-sidecar-join"
# The join's settings: a ConfigMap that kustomize reads while it builds and leaves out of its
# output (local-config), so nothing in the cluster holds it. A user's overlay patches it and
# lists docker/k8s-join/settings under `transformers:`, which copies each value into every
# field that uses it. Why not a replacement inside the Component: a Component's transformers
# run before the overlay's patches, so they would copy the default, never the user's value.
JOIN_SETTINGS = "dsv4-sidecar-join-settings"
LOCAL_CONFIG = {"config.kubernetes.io/local-config": "true"}
SGLANG_PORT_KEY = "sglangPort"
JOIN_SELECTOR = "dsv4-sidecar/join=true"
LEADER_SELECTOR = f"{JOIN_SELECTOR},dsv4-sidecar/leader-template=true"
# Where each kind keeps its pod templates. A LeaderWorkerSet's leaderTemplate is optional
# (the leader then uses workerTemplate), so it is patched only when the workload says it has one.
# leaderworkerset.sigs.k8s.io/worker-index as a Prometheus meta label.
LWS_WORKER_INDEX_LABEL = "leaderworkerset_sigs_k8s_io_worker_index"
LWS_TEMPLATES = {
    "worker": "/spec/leaderWorkerTemplate/workerTemplate",
    "leader": "/spec/leaderWorkerTemplate/leaderTemplate",
}
LWS_SELECTORS = {"worker": JOIN_SELECTOR, "leader": LEADER_SELECTOR}
SERVER_URL_ENV = "DSV4_SIDECAR_SERVER_URL"
# The label the join puts on every pod template it adds the sidecar to: what its NetworkPolicy
# selects (the workload's own labels are unknown here).
JOIN_POD_LABEL = {"dsv4-sidecar/joined": "true"}


def _load_one(path: Path, kind: str) -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]
    (obj,) = [d for d in docs if d.get("kind") == kind]
    return obj


def _pod_spec(k8s_dir: Path) -> dict[str, Any]:
    return _load_one(k8s_dir / "deployment.yaml", "Deployment")["spec"]["template"]["spec"]


def sglang_port(k8s_dir: Path = K8S_DIR) -> int:
    """SGLang's HTTP port (API and /metrics) in ``deployment.yaml``: the join's default."""
    (c,) = [c for c in _pod_spec(k8s_dir)["containers"] if c["name"] == SGLANG]
    (port,) = [p["containerPort"] for p in c["ports"] if p["name"] == "http"]
    return int(port)


def _tap_port(k8s_dir: Path) -> dict[str, Any]:
    """The tap container's client port in ``deployment.yaml`` (name and number)."""
    (tap,) = [c for c in _pod_spec(k8s_dir)["containers"] if c["name"] == TAP]
    (port,) = [p for p in tap["ports"] if p["name"] == "tap"]
    return dict(port)


def join_container(k8s_dir: Path = K8S_DIR) -> dict[str, Any]:
    """The sidecar container of ``deployment.yaml``, adapted to a pod it does not own. The
    join adds one container, so there the tap runs in the sidecar's process (``tap_port``,
    on the port the Deployment's tap container uses); the base Deployment runs it in its own
    container (docs/tap.md, "Its own process")."""
    (c,) = [dict(c) for c in _pod_spec(k8s_dir)["containers"] if c["name"] == SIDECAR]
    tap = _tap_port(k8s_dir)
    c["env"] = [*c["env"], {"name": "DSV4_SIDECAR_TAP_PORT", "value": str(tap["containerPort"])}]
    c["ports"] = [*c["ports"], tap]
    c["envFrom"] = [
        *c.get("envFrom", []),
        {"configMapRef": {"name": JOIN_ENV_CONFIGMAP}},
    ]
    # The workload's SGLANG_* switches: optional, since an existing workload sets them on its
    # own container; create dsv4-deployment-env (docker/k8s/configmap.yaml) to share them.
    for ref in c["envFrom"]:
        if ref["configMapRef"]["name"] == "dsv4-deployment-env":
            ref["configMapRef"] = {**ref["configMapRef"], "optional": True}
    c["env"] = [e for e in c["env"] if e["name"] != "DSV4_SIDECAR_MODEL_CONFIG_PATH"]
    c["ports"] = [{**p, "name": JOIN_PORTS[p["name"]]} for p in c["ports"]]
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        get = c[probe]["httpGet"]
        c[probe] = {**c[probe], "httpGet": {**get, "port": JOIN_PORTS[get["port"]]}}
    c["volumeMounts"] = [v for v in c["volumeMounts"] if v["name"] in JOIN_VOLUMES]
    return c


def join_volumes(k8s_dir: Path = K8S_DIR) -> list[dict[str, Any]]:
    return [v for v in _pod_spec(k8s_dir)["volumes"] if v["name"] in JOIN_VOLUMES]


def join_pod_settings(k8s_dir: Path = K8S_DIR) -> dict[str, Any]:
    """Pod-level fields the joined pod takes from ``deployment.yaml``: no service-account
    token (neither SGLang nor the sidecar calls the Kubernetes API, and a mounted token is a
    credential in both containers for nothing)."""
    key = "automountServiceAccountToken"
    spec = _pod_spec(k8s_dir)
    if spec.get(key) is not False:
        raise GenerateError(f"docker/k8s/deployment.yaml: the pod must set {key}: false")
    return {key: False}


def join_worker_container(k8s_dir: Path = K8S_DIR) -> dict[str, Any]:
    """On a LeaderWorkerSet every node's pod gets a sidecar for its own GPUs: its node rank is
    the pod's worker index, and only the leader serves SGLang's HTTP API, at the address the
    LeaderWorkerSet controller injects as LWS_LEADER_ADDRESS (expanded in args, which see
    the container's whole environment)."""
    c = join_container(k8s_dir)
    url = f"http://$(LWS_LEADER_ADDRESS):{sglang_port(k8s_dir)}"
    c["args"] = [*c["args"], "--server-url", url]
    c["env"] = [e for e in c["env"] if e["name"] != SERVER_URL_ENV] + [
        {
            "name": "DSV4_SIDECAR_NODE_RANK",
            "valueFrom": {
                "fieldRef": {
                    "fieldPath": "metadata.labels['leaderworkerset.sigs.k8s.io/worker-index']"
                }
            },
        }
    ]
    return c


def _json_patch(
    template: str,
    container: dict[str, Any],
    volumes: list[dict[str, Any]],
    pod: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """JSON 6902 operations appending the sidecar after the workload's containers (so the
    workload's stays the pod's first, `kubectl logs`' default) and, when given, its volumes
    and pod-level fields: kustomize has no schema for a CRD's pod templates, so a strategic
    merge would replace the workload's lists instead of appending to them."""
    ops: list[dict[str, Any]] = [
        {"op": "add", "path": f"{template}/spec/containers/-", "value": container}
    ]
    ops += [{"op": "add", "path": f"{template}/spec/volumes/-", "value": v} for v in volumes]
    ops += [
        {"op": "add", "path": f"{template}/spec/{k}", "value": v} for k, v in (pod or {}).items()
    ]
    return ops


def _pod_patch(kind: str, volumes: list[dict[str, Any]], pod: dict[str, Any]) -> dict[str, Any]:
    """A strategic merge patch of the volumes (merged by name into the workload's, created when
    it has none, which a JSON 6902 append cannot do) and the pod-level fields."""
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": "selected-by-label"},
        "spec": {
            "template": {
                "metadata": {"labels": dict(JOIN_POD_LABEL)},
                "spec": {**pod, "volumes": volumes},
            }
        },
    }


def _lws_label_patch(template: str) -> dict[str, Any]:
    """A merge patch of one LeaderWorkerSet pod template's labels: kustomize has no schema for
    the CRD, so it merges maps key by key (a JSON patch ``add`` would need the map to exist)."""
    spec: dict[str, Any] = {"metadata": {"labels": dict(JOIN_POD_LABEL)}}
    for key in reversed(template.strip("/").split("/")[1:]):
        spec = {key: spec}
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": "selected-by-label"},
        "spec": spec,
    }


def render_join_network_policy(k8s_dir: Path = K8S_DIR) -> dict[str, Any]:
    """Ingress to the joined pods, with the peers of ``networkpolicy.yaml`` (one place): this
    namespace and Prometheus on every port (the sidecar's /metrics and API, SGLang's own
    /metrics, and a LeaderWorkerSet group's pods among themselves), the client namespaces on
    every port but the sidecar's (SGLang's port is the workload's, so it is not named: a
    range leaves out only the sidecar's). Ingress only: the workload's egress is its own."""
    policy = _load_one(k8s_dir / "networkpolicy.yaml", "NetworkPolicy")
    rules = policy["spec"]["ingress"]
    (metrics_rule,) = [r for r in rules if any(p["port"] == "metrics" for p in r["ports"])]
    (client_rule,) = [r for r in rules if any(p["port"] == "http" for p in r["ports"])]
    clients = [peer for peer in client_rule["from"] if peer != {"podSelector": {}}]
    metrics = _pod_spec(k8s_dir)
    (sidecar,) = [c for c in metrics["containers"] if c["name"] == SIDECAR]
    (port,) = [p["containerPort"] for p in sidecar["ports"] if p["name"] == "metrics"]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "dsv4-sidecar-join", "labels": {"app.kubernetes.io/name": SIDECAR}},
        "spec": {
            "podSelector": {"matchLabels": dict(JOIN_POD_LABEL)},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"from": metrics_rule["from"]},
                {
                    "from": clients,
                    "ports": [
                        {"port": 1, "endPort": port - 1, "protocol": "TCP"},
                        {"port": port + 1, "endPort": 65535, "protocol": "TCP"},
                    ],
                },
            ],
        },
    }


def render_pod_monitor(k8s_dir: Path = K8S_DIR) -> dict[str, Any]:
    """One PodMonitor for every pod that has the sidecar's port (the operator keeps only pods
    with a container port of that name, so the empty selector finds exactly the joined pods):
    the sidecar's /metrics as job dsv4-sidecar, and SGLang's own /metrics on the same pod as
    job sglang, with every SGLang label (tp_rank, ...) kept. Relabelings: the ServiceMonitor's."""
    sm = _load_one(k8s_dir / "servicemonitor.yaml", "ServiceMonitor")
    (endpoint,) = [e for e in sm["spec"]["endpoints"] if e["port"] == "metrics"]
    relabel = [r for r in endpoint["relabelings"] if r.get("targetLabel") != "job"]

    def job(name: str) -> dict[str, Any]:
        return {"action": "replace", "targetLabel": "job", "replacement": name}

    timing = {k: endpoint[k] for k in ("interval", "scrapeTimeout")}
    sglang = [
        # Only the pod that serves HTTP: a LeaderWorkerSet's workers (index > 0) do not.
        {
            "action": "drop",
            "sourceLabels": [f"__meta_kubernetes_pod_label_{LWS_WORKER_INDEX_LABEL}"],
            "regex": "[1-9][0-9]*",
        },
        {
            "action": "replace",
            "sourceLabels": ["__meta_kubernetes_pod_ip"],
            "regex": "(.+)",
            "targetLabel": "__address__",
            "replacement": f"$1:{sglang_port(k8s_dir)}",
        },
    ]
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": {
            "name": "dsv4-sidecar-join",
            "labels": {"app.kubernetes.io/name": SIDECAR, **PART_OF},
        },
        "spec": {
            "selector": {},
            "podMetricsEndpoints": [
                {
                    "port": JOIN_PORTS["metrics"],
                    "path": "/metrics",
                    **timing,
                    "relabelings": [job("dsv4-sidecar"), *relabel],
                },
                {
                    "port": JOIN_PORTS["metrics"],
                    "path": "/metrics",
                    **timing,
                    "relabelings": [*sglang, job("sglang"), *relabel],
                },
            ],
        },
    }


def render_join_settings(k8s_dir: Path = K8S_DIR) -> dict[str, Any]:
    """The join's settings with their defaults (``deployment.yaml``'s), kept out of the build's
    output; an overlay changes them with a patch (docs/deploy.md)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": JOIN_SETTINGS, "annotations": dict(LOCAL_CONFIG)},
        "data": {SGLANG_PORT_KEY: str(sglang_port(k8s_dir))},
    }


def _port_target(
    kind: str, selector: str, field_path: str, value: str, port: int
) -> dict[str, Any]:
    """A replacement target: the last ``:``-separated part of ``value``, the port, at
    ``field_path`` of the objects of ``kind`` the selector picks."""
    parts = value.split(":")
    if parts[-1] != str(port):
        raise GenerateError(f"{field_path}: {value!r} does not end in SGLang's port {port}")
    group = {"group": "monitoring.coreos.com"} if kind == "PodMonitor" else {}
    select: dict[str, Any] = {**group, "kind": kind}
    if selector:
        select["labelSelector"] = selector
    return {
        "select": select,
        "fieldPaths": [field_path],
        "options": {"delimiter": ":", "index": len(parts) - 1},
    }


def render_join_replacements(k8s_dir: Path = K8S_DIR) -> dict[str, Any]:
    """A ReplacementTransformer for an overlay's ``transformers:``: SGLang's port from the
    settings into the sidecar's SGLang URL (Deployment, StatefulSet: its env; LeaderWorkerSet:
    its args) and into the PodMonitor's SGLang target. The field paths and the positions of
    the port are computed from the patches this file generates, so they cannot drift."""
    port = sglang_port(k8s_dir)
    sc = f"containers.[name={SIDECAR}]"
    (env,) = [e for e in join_container(k8s_dir)["env"] if e["name"] == SERVER_URL_ENV]
    targets = [
        _port_target(
            kind,
            JOIN_SELECTOR,
            f"spec.template.spec.{sc}.env.[name={SERVER_URL_ENV}].value",
            env["value"],
            port,
        )
        for kind in ("Deployment", "StatefulSet")
    ]
    args = join_worker_container(k8s_dir)["args"]
    (i,) = [n for n, a in enumerate(args) if a.startswith("http://")]
    for role, template in LWS_TEMPLATES.items():
        path = ".".join(template.strip("/").split("/"))
        targets.append(
            _port_target(
                "LeaderWorkerSet", LWS_SELECTORS[role], f"{path}.spec.{sc}.args.{i}", args[i], port
            )
        )
    endpoints = render_pod_monitor(k8s_dir)["spec"]["podMetricsEndpoints"]
    for e, endpoint in enumerate(endpoints):
        for r, rule in enumerate(endpoint["relabelings"]):
            if rule.get("targetLabel") == "__address__":
                path = f"spec.podMetricsEndpoints.{e}.relabelings.{r}.replacement"
                targets.append(_port_target("PodMonitor", "", path, rule["replacement"], port))
    return {
        "apiVersion": "builtin",
        "kind": "ReplacementTransformer",
        "metadata": {"name": JOIN_SETTINGS},
        "replacements": [
            {
                "source": {
                    "version": "v1",
                    "kind": "ConfigMap",
                    "name": JOIN_SETTINGS,
                    "fieldPath": f"data.{SGLANG_PORT_KEY}",
                },
                "targets": targets,
            }
        ],
    }


def render_join(k8s_dir: Path = K8S_DIR) -> dict[Path, str]:
    """Path (under docker/k8s-join/) -> text."""
    header = (
        "# Generated by docker/k8s/generate.py (`make k8s`) from docker/k8s/deployment.yaml and\n"
        "# docker/k8s/servicemonitor.yaml; do not edit by hand.\n"
    )
    volumes, pod = join_volumes(k8s_dir), join_pod_settings(k8s_dir)
    out = {
        JOIN_OUT_DIR / "deployment-pod.yaml": _dump(_pod_patch("Deployment", volumes, pod)),
        JOIN_OUT_DIR / "statefulset-pod.yaml": _dump(_pod_patch("StatefulSet", volumes, pod)),
        JOIN_OUT_DIR / "pod-template-container.yaml": _dump(
            _json_patch("/spec/template", join_container(k8s_dir), [])
        ),
        JOIN_OUT_DIR / "podmonitor.yaml": _dump(render_pod_monitor(k8s_dir)),
        JOIN_OUT_DIR / "networkpolicy.yaml": _dump(render_join_network_policy(k8s_dir)),
        JOIN_OUT_DIR / "settings.yaml": _dump(render_join_settings(k8s_dir)),
        JOIN_SETTINGS_DIR / "replacements.yaml": _dump(render_join_replacements(k8s_dir)),
    }
    for role, template in LWS_TEMPLATES.items():
        out[JOIN_OUT_DIR / f"lws-{role}-patch.yaml"] = _dump(
            _json_patch(template, join_worker_container(k8s_dir), volumes, pod)
        )
        out[JOIN_OUT_DIR / f"lws-{role}-labels.yaml"] = _dump(_lws_label_patch(template))
    return {path: header + text for path, text in out.items()}


def render_every() -> dict[Path, str]:
    """Every file this generator writes, by path."""
    return {**{OUT_DIR / name: text for name, text in render_all().items()}, **render_join()}


def unexpected(rendered: dict[Path, str]) -> list[Path]:
    """YAML files in the directories written only by this generator that it no longer writes
    (a renamed patch left behind would still be applied by a stale kustomization)."""
    dirs = (OUT_DIR, JOIN_OUT_DIR)
    return sorted(p for d in dirs for p in d.glob("*.yaml") if p not in rendered)


def main(argv: list[str] | None = None) -> int:
    args = generated.parser(__doc__).parse_args(argv)
    rendered: dict[Path, str] = {}

    def render() -> dict[Path, str]:
        rendered.update(render_every())
        return rendered

    return generated.main(
        render,
        "k8s",
        check=args.check,
        unexpected=lambda: unexpected(rendered),
        name="docker/k8s/generate.py",
    )


if __name__ == "__main__":
    raise SystemExit(main())
