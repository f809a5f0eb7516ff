"""The compose stacks' Prometheus config and Grafana provisioning: promtool on the config with
the repository's rule files in place, and every path and name they reference resolved."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path, PurePosixPath
from typing import Any

from tests.deploy.conftest import (
    COMPOSE_FILES,
    DOCKER,
    METRICS_PORT,
    REPO,
    SCRAPE_JOB,
    SGLANG_PORT,
    TAP_METRICS_PORT,
    compose,
    load_yaml,
    run,
)

PROM_CONFIG = DOCKER / "prometheus" / "prometheus.yml"
PROVISIONING = DOCKER / "grafana" / "provisioning"
RULE_FILES = sorted((REPO / "alerts").glob("*.yaml")) if (REPO / "alerts").is_dir() else []


def _binds(service: dict[str, Any]) -> dict[str, Path]:
    """container path -> host path (resolved from docker/) of a service's bind mounts."""
    out = {}
    for vol in service.get("volumes", []):
        if isinstance(vol, str) and vol.startswith((".", "/")):
            host, target = vol.split(":")[:2]
            out[target] = (DOCKER / host).resolve()
    return out


def test_promtool_accepts_the_config_with_the_rule_files_it_loads(promtool, tmp_path):
    """In the container the config sits at /etc/prometheus/ with alerts/ mounted beside it;
    recreate that layout so promtool also loads and checks every rule file."""
    prometheus = compose(DOCKER / "compose.yaml")["services"]["prometheus"]
    binds = _binds(prometheus)
    assert binds["/etc/prometheus/prometheus.yml"] == PROM_CONFIG.resolve()
    assert binds["/etc/prometheus/alerts"] == (REPO / "alerts").resolve()
    shutil.copy(PROM_CONFIG, tmp_path / "prometheus.yml")
    (tmp_path / "alerts").mkdir()
    for rule_file in RULE_FILES:
        shutil.copy(rule_file, tmp_path / "alerts" / rule_file.name)
    res = run([promtool, "check", "config", str(tmp_path / "prometheus.yml")])
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"{len(RULE_FILES)} rule files found" in res.stdout + res.stderr


def test_rule_glob_skips_the_promtool_unit_tests():
    (pattern,) = load_yaml(PROM_CONFIG)["rule_files"]
    assert pattern == "alerts/*.yaml", "top level only: alerts/tests/ holds promtool unit tests"


def test_scrape_job_is_the_one_the_alerts_select():
    cfg = load_yaml(PROM_CONFIG)
    assert cfg["global"]["scrape_interval"] == "15s"
    job, sglang = cfg["scrape_configs"]
    assert job["job_name"] == SCRAPE_JOB
    # SGLang's own /metrics as its own job (the dashboards' $sglang_job), the simulator's port.
    assert sglang["job_name"] == "sglang"
    assert f"sglang-sim:{SGLANG_PORT}" in sglang["static_configs"][0]["targets"]
    selected = {
        m
        for path in RULE_FILES
        for m in re.findall(r'\bjob\s*=\s*"([^"]+)"', path.read_text(encoding="utf-8"))
    }
    assert selected <= {SCRAPE_JOB}, f"rules select {selected}, Prometheus scrapes {SCRAPE_JOB}"
    (static,) = job["static_configs"]
    # the sidecar's port and the tap's own /metrics (its container), one job as in Kubernetes
    assert static["targets"] == [f"sidecar:{METRICS_PORT}", f"tap:{TAP_METRICS_PORT}"]
    for path in COMPOSE_FILES:
        services = compose(path)["services"]
        assert "sidecar" in services, path.name
        tap_env = services["tap"]["environment"]
        assert tap_env["DSV4_SIDECAR_METRICS_PORT"] == str(TAP_METRICS_PORT), path.name


def test_grafana_datasource_points_at_the_compose_prometheus():
    files = sorted((PROVISIONING / "datasources").glob("*.yaml"))
    assert files
    sources = [ds for f in files for ds in load_yaml(f)["datasources"]]
    assert all(load_yaml(f)["apiVersion"] == 1 for f in files)
    defaults = [ds for ds in sources if ds.get("isDefault")]
    assert len(defaults) == 1 and defaults[0]["type"] == "prometheus"
    host, port = re.fullmatch(r"http://([\w-]+):(\d+)", defaults[0]["url"]).groups()
    services = compose(DOCKER / "compose.yaml")["services"]
    assert host in services
    # Prometheus listens on :9090 unless its command says otherwise.
    command = services[host].get("command", [])
    listen = next(
        (c.split("=", 1)[1] for c in command if c.startswith("--web.listen-address=")), ":9090"
    )
    assert listen.endswith(f":{port}"), (listen, port)


def test_grafana_dashboard_provider_loads_the_repository_dashboards():
    files = sorted((PROVISIONING / "dashboards").glob("*.yaml"))
    assert files
    providers = [p for f in files for p in load_yaml(f)["providers"]]
    assert all(load_yaml(f)["apiVersion"] == 1 for f in files)
    grafana = compose(DOCKER / "compose.yaml")["services"]["grafana"]
    binds = _binds(grafana)
    assert binds["/etc/grafana/provisioning"] == PROVISIONING.resolve()
    for provider in providers:
        assert provider["type"] == "file"
        path = provider["options"]["path"]
        assert binds.get(path) == (REPO / "dashboards").resolve(), f"{path} is not mounted"
    dashboards = sorted((REPO / "dashboards").glob("*.json"))
    for file in dashboards:
        dash = json.loads(file.read_text(encoding="utf-8"))
        assert dash.get("uid") and dash.get("title"), file.name
        # The dashboards pick a datasource by a `datasource` variable of type prometheus, so
        # the provisioned one qualifies.
        variables = dash.get("templating", {}).get("list", [])
        assert any(
            v.get("type") == "datasource" and v.get("query") == "prometheus" for v in variables
        ), file.name
    home = grafana["environment"].get("GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH")
    if home:
        home_path = PurePosixPath(home)
        mounted = binds[str(home_path.parent)]
        assert (mounted / home_path.name).is_file(), f"home dashboard {home} does not exist"
