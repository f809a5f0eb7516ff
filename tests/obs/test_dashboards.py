"""The committed dashboards: fresh, parseable PromQL, and the dashboard-linter rules that apply
(templated datasource, job/instance/rank variables, units and descriptions, $__rate_interval,
job/instance matchers, unique ids, no hard-coded datasource uids), plus the e2e query helper."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from dashboards import generate
from dashboards.common import SGLANG_PREFIX, UIDS, VLLM_PREFIX
from dashboards.queries import (
    PanelQuery,
    dashboard_files,
    iter_panels,
    iter_queries,
    load,
    panel_queries,
    substitute,
    variable_values,
)
from tests.obs.promql import check_parse, selectors

FILES = dashboard_files()
DASHBOARDS = {p.stem: load(p) for p in FILES}
QUERIES = list(iter_queries())
DS_REF = {"type": "prometheus", "uid": "${datasource}"}
# Prometheus-side series the panels may read besides the sidecar's own (job matcher only:
# ALERTS of an absent target has no instance).
JOB_ONLY = {"ALERTS"}


def test_expected_dashboards_committed() -> None:
    assert {p.stem for p in FILES} == set(UIDS)
    assert {d["uid"] for d in DASHBOARDS.values()} == set(UIDS.values())


def test_committed_json_is_fresh() -> None:
    assert generate.stale(generate.render_all()) == [], "run `make dashboards` and commit"


def test_check_flags_stale_and_unknown_json(tmp_path: Path, monkeypatch) -> None:
    """The freshness check really compares: an edited or an extra file is reported."""
    monkeypatch.setattr(generate, "DASHBOARDS_DIR", tmp_path)
    rendered = {tmp_path / p.name: text for p, text in generate.render_all().items()}
    for path, text in rendered.items():
        path.write_text(text)
    assert generate.stale(rendered) == []
    first = next(iter(rendered))
    first.write_text(rendered[first].replace('"refresh": "1m"', '"refresh": "5s"'))
    (tmp_path / "hand-made.json").write_text("{}")
    assert generate.stale(rendered) == sorted(
        [str(first), f"{tmp_path / 'hand-made.json'} (not generated)"]
    )


@pytest.mark.parametrize("stem", sorted(DASHBOARDS))
def test_templated_datasource_and_variables(stem: str) -> None:
    dash = DASHBOARDS[stem]
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    ds = variables["datasource"]
    assert ds["type"] == "datasource" and ds["query"] == "prometheus"
    for name in ("job", "instance"):
        v = variables[name]
        assert v["type"] == "query" and v["datasource"] == DS_REF
        assert v["multi"] and v["includeAll"] and v["allValue"] == ".+"
    assert 'job=~"$job"' in variables["instance"]["query"]["query"]
    uses_rank = any("$rank" in q.expr for q in QUERIES if q.dashboard == stem)
    assert ("rank" in variables) == uses_rank, "a rank variable exactly where panels use it"
    if uses_rank:
        assert 'instance=~"$instance"' in variables["rank"]["query"]["query"]


@pytest.mark.parametrize("stem", sorted(DASHBOARDS))
def test_panels_units_descriptions_datasource(stem: str) -> None:
    for panel in iter_panels(DASHBOARDS[stem]):
        where = f"{stem}: {panel.get('title')!r}"
        assert panel.get("title"), where
        assert len(panel.get("description", "")) >= 20, f"{where}: description"
        assert panel["fieldConfig"]["defaults"].get("unit"), f"{where}: unit"
        assert panel["datasource"] == DS_REF, f"{where}: datasource must be ${{datasource}}"
        assert panel.get("targets"), f"{where}: no query"
        for t in panel["targets"]:
            assert t.get("datasource", DS_REF) == DS_REF, where
            assert t.get("refId"), where


def _walk(node: Any):
    if isinstance(node, dict):
        yield node
        for v in node.values():
            yield from _walk(v)
    elif isinstance(node, list):
        for v in node:
            yield from _walk(v)


@pytest.mark.parametrize("stem", sorted(DASHBOARDS))
def test_no_hard_coded_datasource_uid(stem: str) -> None:
    for node in _walk(DASHBOARDS[stem]):
        ds = node.get("datasource")
        if isinstance(ds, dict):
            assert str(ds.get("uid", "")).startswith("$"), ds
        elif ds is not None:
            assert str(ds).startswith("$"), ds


@pytest.mark.parametrize("stem", sorted(DASHBOARDS))
def test_ids_titles_layout(stem: str) -> None:
    dash = DASHBOARDS[stem]
    assert dash["editable"] is False, "generated dashboards are read-only in Grafana"
    assert "dsv4-sidecar" in dash["tags"]
    all_panels = [p for p in dash["panels"]]
    ids = [p["id"] for p in all_panels] + [
        q["id"] for p in all_panels if p["type"] == "row" for q in p.get("panels", [])
    ]
    assert len(ids) == len(set(ids)), "unique panel ids"
    titles = [p["title"] for p in iter_panels(dash)]
    assert len(titles) == len(set(titles)), "unique panel titles"
    cells: set[tuple[int, int]] = set()
    for p in all_panels:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24
        mine = {
            (x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])
        }
        assert not cells & mine, f"{p['title']!r} overlaps another panel"
        cells |= mine


def _range_windows(expr: str) -> list[tuple[str, str]]:
    """(function, window) for every ``[window]`` in ``expr``: the function whose argument list
    holds the range selector (scan back to the innermost unclosed parenthesis)."""
    out = []
    for m in re.finditer(r"\[([^\]]+)\]", expr):
        depth, i = 0, m.start() - 1
        while i >= 0:
            c = expr[i]
            if c == ")":
                depth += 1
            elif c == "(":
                if depth == 0:
                    break
                depth -= 1
            i -= 1
        fn = re.search(r"([a-z_]+)\s*$", expr[:i])
        out.append((fn.group(1) if fn else "", m.group(1)))
    return out


@pytest.mark.parametrize("q", QUERIES, ids=lambda q: f"{q.dashboard}:{q.panel_id}{q.ref_id}")
def test_rate_windows(q: PanelQuery) -> None:
    """rate/irate use $__rate_interval; increase uses it too, or $__range in instant panels;
    other range functions keep the alert's fixed window (predict_linear, *_over_time)."""
    for fn, window in _range_windows(q.expr):
        if fn in {"rate", "irate"}:
            assert window == "$__rate_interval", (fn, window)
        elif fn == "increase":
            assert window == "$__rate_interval" or (window == "$__range" and q.instant)
        else:
            assert fn in {"predict_linear", "max_over_time", "deriv"}, fn
            assert window.startswith("$") is False


@pytest.mark.parametrize("q", QUERIES, ids=lambda q: f"{q.dashboard}:{q.panel_id}{q.ref_id}")
def test_every_selector_is_templated(q: PanelQuery) -> None:
    """Every series selector filters by the job and instance variables (rank where it has
    one), so the variables really scope the panel."""
    found = selectors(q.expr)
    assert found, "a panel query without a series selector"
    for s in found:
        matchers = {(label, op, value) for label, op, value in s.matchers}
        if s.metric.startswith(SGLANG_PREFIX):  # SGLang's own series: its own scrape job
            assert ("job", "=~", "$sglang_job") in matchers, s
            continue
        if s.metric.startswith(VLLM_PREFIX):  # vLLM's own series: its own scrape job
            assert ("job", "=~", "$vllm_job") in matchers, s
            continue
        assert ("job", "=~", "$job") in matchers, s
        # Deployment-level recording rules have no instance: they are scoped by deployment.
        if s.metric not in JOB_ONLY and ":" not in s.metric:
            assert ("instance", "=~", "$instance") in matchers, s
        if q.dashboard == "fleet" and s.metric not in JOB_ONLY:
            assert ("namespace", "=~", "$namespace") in matchers, s
            assert ("deployment", "=~", "$deployment") in matchers, s
        if "rank" in s.labels():
            assert ("rank", "=~", "$rank") in matchers, s


def test_all_panel_promql_parses(promtool: str, tmp_path: Path) -> None:
    values = variable_values(job="dsv4-sidecar", instance="sglang-0:9400", rank="0")
    exprs = {f"{q.dashboard}/{q.title} [{q.ref_id}]": substitute(q.expr, values) for q in QUERIES}
    for stem, dash in DASHBOARDS.items():
        for v in dash["templating"]["list"]:
            if v["type"] == "query":
                m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", v["query"]["query"])
                assert m, v["query"]
                exprs[f"{stem}/${v['name']}"] = f"count({substitute(m.group(1), values)})"
    ok, out = check_parse(promtool, exprs, tmp_path)
    assert ok, out
    assert f"SUCCESS: {len(exprs)} rules found" in out


def test_parse_check_rejects_bad_promql(promtool: str, tmp_path: Path) -> None:
    """The parse trick is a real check: a broken expression fails it."""
    ok, out = check_parse(promtool, {"bad": "sum by (le (rate(x[1m]))"}, tmp_path)
    assert not ok and "parse" in out.lower()


def test_panel_queries_for_e2e() -> None:
    got = panel_queries(job="dsv4-sidecar", instance=".+", rank=".+", rate_interval="30s")
    assert set(got) == set(UIDS)
    total = sum(len(v) for v in got.values())
    assert total == len(QUERIES) > 40
    for stem, queries in got.items():
        for title, expr in queries:
            assert "$" not in expr, (stem, title, expr)
            assert re.search(r"\[[A-Z]\]$", title), title
    memory = dict(got["memory-overcommit"])
    assert memory["GPU memory free [A]"] == (
        'dsv4_gpu_memory_free_bytes{job=~"dsv4-sidecar", instance=~".+", rank=~".+"}'
    )
    corruption = dict(got["tool-call-corruption"])
    assert "[30s]" in corruption["Samples by verdict [A]"]


def test_substitute_rejects_unknown_variables() -> None:
    assert substitute('x{a=~"${job}"}[$__range]', {"job": "j", "__range": "1h"}) == (
        'x{a=~"j"}[1h]'
    )
    with pytest.raises(KeyError):
        substitute('x{a=~"$cluster"}', variable_values())


def test_overview_links_and_alert_panels() -> None:
    dash = DASHBOARDS["overview"]
    urls = {link.get("url") for link in dash["links"]}
    for slug in ("memory-overcommit", "tool-call-corruption", "hicache-transfer-gap"):
        assert f"/d/{UIDS[slug]}" in urls
    alert_exprs = [q.expr for q in QUERIES if q.dashboard == "overview" and "ALERTS" in q.expr]
    assert len(alert_exprs) >= 2
    text = json.dumps(dash)
    assert "/docs/runbooks/${__data.fields.alertname}.md" in text


def test_concurrency_panel_has_every_bucket() -> None:
    """The 'fine at 1, broken at 60' bars: one target per bucket, in bucket order."""
    bars = [
        q
        for q in QUERIES
        if q.dashboard == "tool-call-corruption"
        and q.title.startswith("Degenerate ratio by concurrency (")
    ]
    buckets = [re.search(r'concurrency_le="([^"]+)"', q.expr).group(1) for q in bars]
    assert buckets == ["1", "4", "8", "16", "32", "64", "128", "+Inf"]


def _drop_added_custom(decoded: Any, committed: Any) -> Any:
    """``decoded`` without the ``custom`` field-config defaults the SDK fills in on decode."""
    if isinstance(decoded, dict) and isinstance(committed, dict):
        return {
            k: _drop_added_custom(v, committed.get(k))
            for k, v in decoded.items()
            if not (k == "custom" and k not in committed)
        }
    if isinstance(decoded, list) and isinstance(committed, list) and len(decoded) == len(committed):
        return [_drop_added_custom(a, b) for a, b in zip(decoded, committed, strict=True)]
    return decoded


@pytest.mark.parametrize("stem", sorted(DASHBOARDS))
def test_json_reads_back_through_the_sdk_schema(stem: str) -> None:
    """Decoding with the SDK's Grafana 11.6 models loses nothing: every key is a schema field
    of the right shape (the SDK only adds its per-panel ``custom`` defaults)."""
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.cog.plugins import register_default_plugins
    from grafana_foundation_sdk.models.dashboard import Dashboard as DashboardModel

    register_default_plugins()
    committed = DASHBOARDS[stem]
    decoded = json.loads(JSONEncoder().encode(DashboardModel.from_json(committed)))
    assert _drop_added_custom(decoded, committed) == committed
