"""Shared building blocks: the templated datasource, variables, selectors and panel helpers.

Every panel goes through :class:`Board`, which makes a title, a description and a unit
mandatory, points the panel at the ``${datasource}`` variable, and numbers panels in order,
so the lint rules in tests/obs hold by construction and are checked again on the JSON.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from string import ascii_uppercase
from typing import Any, TypeVar

from grafana_foundation_sdk.builders import (
    bargauge,
    common,
    heatmap,
    prometheus,
    stat,
    statetimeline,
    table,
    timeseries,
)
from grafana_foundation_sdk.builders.dashboard import (
    Dashboard,
    DashboardLink,
    DatasourceVariable,
    QueryVariable,
    Row,
    ThresholdsConfig,
    TimePicker,
)
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models import dashboard as dm
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

from alerts.config import AlertConfig
from exporter.metrics.catalog import spec_for_series

# Any of the SDK's panel builders (timeseries, stat, ...): they share the panel setters.
_PanelT = TypeVar("_PanelT", bound=Any)

# The alert thresholds, so panels draw their lines where the alerts fire.
ALERTS = AlertConfig()

DATASOURCE = dm.DataSourceRef(type_val="prometheus", uid="${datasource}")
TAG = "dsv4-sidecar"
TAGS = [TAG, "deepseek-v4", "sglang"]

# Bounded label values the sidecar exports (exporter conventions: allowlisted label sets).
CONCURRENCY_BUCKETS = ("1", "4", "8", "16", "32", "64", "128", "+Inf")

UIDS = {
    "overview": "dsv4-overview",
    "memory-overcommit": "dsv4-memory-overcommit",
    "tool-call-corruption": "dsv4-tool-call-corruption",
    "hicache-transfer-gap": "dsv4-hicache-transfer-gap",
    "fleet": "dsv4-fleet",
}
TITLES = {
    "overview": "DSV4 sidecar / Overview",
    "memory-overcommit": "DSV4 sidecar / Memory & over-commit",
    "tool-call-corruption": "DSV4 sidecar / Tool-call corruption",
    "hicache-transfer-gap": "DSV4 sidecar / HiCache transfer gap",
    "fleet": "DSV4 sidecar / Fleet",
}

# A metric every sidecar exports exactly once: the source of the job and instance choices.
_IDENTITY = "dsv4_sidecar_build_info"


def sel(metric: str, extra: str = "", rank: bool = False) -> str:
    """``metric{job=~"$job", instance=~"$instance"[, rank=~"$rank"][, extra]}``; ``metric``
    must be in the metrics catalog (a typo fails the build, not the panel)."""
    spec_for_series(metric)
    matchers = ['job=~"$job"', 'instance=~"$instance"']
    if rank:
        matchers.append('rank=~"$rank"')
    if extra:
        matchers.append(extra)
    return f"{metric}{{{', '.join(matchers)}}}"


# SGLang's own series, read from SGLang's /metrics (its scrape job, variable $sglang_job), not
# copied by the sidecar: tp_rank and SGLang's other labels intact. Both name prefixes match:
# `sglang:` (SGLang's own exposition) and `sglang_` (setups that rename it, e.g. llm-d's).
# The names panels may read; tests/obs checks the simulator serves every one.
SGLANG_SERIES = frozenset(
    {
        "num_running_reqs",
        "num_queue_reqs",
        "token_usage",
        "hicache_host_used_tokens",
        "hicache_host_total_tokens",
        "load_back_tokens_total",
        "load_back_duration_seconds_sum",
        "load_back_duration_seconds_count",
        "time_to_first_token_seconds_bucket",
    }
)
SGLANG_PREFIX = "sglang(:|_)"


def sglang_sel(series: str, extra: str = "") -> str:
    """``{__name__=~"sglang(:|_)<series>", job=~"$sglang_job"[, extra]}``."""
    if series not in SGLANG_SERIES:
        raise KeyError(f"{series!r} is not in SGLANG_SERIES (dashboards/common.py)")
    matchers = [f'__name__=~"{SGLANG_PREFIX}{series}"', 'job=~"$sglang_job"']
    if extra:
        matchers.append(extra)
    return "{" + ", ".join(matchers) + "}"


# vLLM's own series, read from vLLM's /metrics (its scrape job, variable $vllm_job) beside a
# vLLM server, not copied by the sidecar: engine and model labels intact. vLLM has one prefix.
# The series of vLLM's own /metrics the boards read (and the one the $vllm_job variable finds
# vLLM's scrape jobs by): like SGLANG_SERIES, checked against the simulator posing as vLLM.
VLLM_JOB_SERIES = "num_requests_running"
VLLM_SERIES = frozenset({"num_requests_waiting", "kv_cache_usage_perc", VLLM_JOB_SERIES})
VLLM_PREFIX = "vllm:"


def vllm_sel(series: str, extra: str = "") -> str:
    """``{__name__=~"vllm:<series>", job=~"$vllm_job"[, extra]}``."""
    if series not in VLLM_SERIES:
        raise KeyError(f"{series!r} is not in VLLM_SERIES (dashboards/common.py)")
    matchers = [f'__name__=~"{VLLM_PREFIX}{series}"', 'job=~"$vllm_job"']
    if extra:
        matchers.append(extra)
    return "{" + ", ".join(matchers) + "}"


def sglang_rate(series: str, extra: str = "") -> str:
    return f"rate({sglang_sel(series, extra)}[$__rate_interval])"


def rate(metric: str, extra: str = "", rank: bool = False) -> str:
    """``rate(<sel>[$__rate_interval])``: the rate window Grafana sizes to the scrape interval."""
    return f"rate({sel(metric, extra, rank)}[$__rate_interval])"


def increase(metric: str, extra: str = "", rank: bool = False) -> str:
    """``increase(<sel>[$__rate_interval])``: per-step counts (heatmaps of histogram buckets)."""
    return f"increase({sel(metric, extra, rank)}[$__rate_interval])"


def increase_range(metric: str, extra: str = "", rank: bool = False) -> str:
    """``increase(<sel>[$__range])``: totals over the dashboard's time range (instant panels)."""
    return f"increase({sel(metric, extra, rank)}[$__range])"


def _query_variable(name: str, label: str, query: str, description: str) -> QueryVariable:
    return (
        QueryVariable(name)
        .label(label)
        .description(description)
        .datasource(DATASOURCE)
        .query({"query": query, "refId": f"{name}-variable"})
        .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(dm.VariableSort.NATURAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(".+")
        .current(dm.VariableOption(selected=True, text="All", value="$__all"))
    )


def variables(
    rank_metric: str | None,
    kubernetes: bool = False,
    sglang: bool = False,
    vllm: bool = False,
) -> list[cogbuilder.Builder[dm.VariableModel]]:
    """datasource, job, instance (and rank, from ``rank_metric``; namespace and deployment
    when ``kubernetes``; SGLang's own scrape job when ``sglang``, vLLM's when ``vllm``)
    variables, in that order."""
    out: list[cogbuilder.Builder[dm.VariableModel]] = [
        DatasourceVariable("datasource")
        .label("Data source")
        .description("The Prometheus that scrapes the dsv4-sidecar.")
        .type("prometheus"),
        _query_variable(
            "job",
            "Job",
            f"label_values({_IDENTITY}{{}}, job)",
            "Scrape job(s) of the sidecars.",
        ),
        _query_variable(
            "instance",
            "Instance",
            f'label_values({_IDENTITY}{{job=~"$job"}}, instance)',
            "Sidecar(s): one per SGLang engine.",
        ),
    ]
    if rank_metric:
        out.append(
            _query_variable(
                "rank",
                "Rank",
                f'label_values({rank_metric}{{job=~"$job", instance=~"$instance"}}, rank)',
                "Attention-TP rank(s) of the engine.",
            )
        )
    if kubernetes:
        # "All" is ".*", not ".+": a sidecar scraped without the Kubernetes labels still shows.
        for name, label, what in (
            ("namespace", "Namespace", "Kubernetes namespace(s) of the SGLang pods."),
            ("deployment", "Deployment", "Deployment(s) (or `app`) of the SGLang pods."),
        ):
            out.append(
                _query_variable(
                    name, label, f'label_values({_IDENTITY}{{job=~"$job"}}, {name})', what
                ).all_value(".*")
            )
    if sglang:
        out.append(
            _query_variable(
                "sglang_job",
                "SGLang job",
                f'label_values({{__name__=~"{SGLANG_PREFIX}num_running_reqs"}}, job)',
                "Scrape job(s) of SGLang's own /metrics (--enable-metrics), read for its queue, "
                "running requests, token usage, TTFT and HiCache series.",
            )
        )
    if vllm:
        out.append(
            _query_variable(
                "vllm_job",
                "vLLM job",
                f'label_values({{__name__=~"{VLLM_PREFIX}{VLLM_JOB_SERIES}"}}, job)',
                "Scrape job(s) of vLLM's own /metrics beside a vLLM server, read for its KV "
                "cache usage and waiting requests.",
            )
        )
    return out


def thresholds(*steps: tuple[float | None, str]) -> ThresholdsConfig:
    """Absolute thresholds; the first step's value is None (the base colour)."""
    return (
        ThresholdsConfig()
        .mode(dm.ThresholdsMode.ABSOLUTE)
        .steps([dm.Threshold(value=v, color=c) for v, c in steps])
    )


def target(
    expr: str, legend: str = "", instant: bool = False, fmt: str = ""
) -> prometheus.Dataquery:
    """One PromQL target; ``instant`` for stat/bar/table panels, ``fmt`` table or heatmap."""
    q = prometheus.Dataquery().expr(expr).legend_format(legend or "__auto")
    q = q.instant() if instant else q.range()
    if fmt:
        q = q.format(PromQueryFormat(fmt))
    return q


def link(slug: str, title: str | None = None) -> DashboardLink:
    """A link to another sidecar dashboard that carries the variables and the time range."""
    return (
        DashboardLink(title or TITLES[slug])
        .type(dm.DashboardLinkType.LINK)
        .url(f"/d/{UIDS[slug]}")
        .include_vars(True)
        .keep_time(True)
        .icon("dashboard")
        .tooltip(TITLES[slug])
    )


@dataclass
class Board:
    """A dashboard under construction: rows of panels, numbered in order, all templated."""

    slug: str
    description: str
    rank_metric: str | None
    kubernetes: bool = False
    sglang: bool = False  # reads SGLang's own series (the $sglang_job variable)
    vllm: bool = False  # reads vLLM's own series (the $vllm_job variable)
    _next_id: int = 1
    _dash: Dashboard = field(init=False)

    def __post_init__(self) -> None:
        self._dash = (
            Dashboard(TITLES[self.slug])
            .uid(UIDS[self.slug])
            .description(self.description)
            .tags(TAGS)
            .readonly()
            .tooltip(dm.DashboardCursorSync.CROSSHAIR)
            .time("now-3h", "now")
            .refresh("1m")
            .timezone("browser")
            .timepicker(TimePicker().refresh_intervals(["30s", "1m", "5m", "15m"]))
            .variables(variables(self.rank_metric, self.kubernetes, self.sglang, self.vllm))
            .link(
                DashboardLink("DSV4 dashboards")
                .type(dm.DashboardLinkType.DASHBOARDS)
                .tags([TAG])
                .as_dropdown(True)
                .include_vars(True)
                .keep_time(True)
            )
        )

    def variable(self, v: cogbuilder.Builder[dm.VariableModel]) -> None:
        """An extra template variable after the standard ones."""
        self._dash.with_variable(v)

    def link(self, dashboard_link: DashboardLink) -> None:
        """An extra link in the dashboard's header."""
        self._dash.link(dashboard_link)

    def row(self, title: str) -> None:
        self._dash.with_row(Row(title).id(self._take_id()))

    def _take_id(self) -> int:
        self._next_id += 1
        return self._next_id - 1

    def _common(
        self,
        p: _PanelT,
        title: str,
        description: str,
        unit: str,
        w: int,
        h: int,
        targets: Sequence[prometheus.Dataquery],
    ) -> _PanelT:
        """The settings every panel shares: id, title, description, unit, data source, size,
        and its targets with refIds A, B, ..."""
        p = p.id(self._take_id()).title(title).description(description).unit(unit)
        p = p.datasource(DATASOURCE).span(w).height(h)
        if len(targets) > len(ascii_uppercase):
            raise ValueError(f"{title}: more targets than refIds")
        for ref, t in zip(ascii_uppercase, targets, strict=False):
            p = p.with_target(t.ref_id(ref))
        return p

    def add(self, panel: cogbuilder.Builder[dm.Panel]) -> None:
        self._dash.with_panel(panel)

    def timeseries(
        self,
        title: str,
        description: str,
        unit: str,
        targets: Sequence[prometheus.Dataquery],
        *,
        w: int = 12,
        h: int = 8,
        steps: Sequence[tuple[float | None, str]] = (),
        stacked: bool = False,
        min_val: float | None = None,
        max_val: float | None = None,
    ) -> timeseries.Panel:
        p = self._common(timeseries.Panel(), title, description, unit, w, h, targets)
        p = (
            p.line_width(1)
            .fill_opacity(10 if not stacked else 60)
            .show_points(cm.VisibilityMode.NEVER)
        )
        p = p.legend(
            common.VizLegendOptions()
            .display_mode(cm.LegendDisplayMode.TABLE)
            .placement(cm.LegendPlacement.BOTTOM)
            .show_legend(True)
            .calcs(["lastNotNull", "max"])
        )
        if stacked:
            p = p.stacking(common.StackingConfig().mode(cm.StackingMode.NORMAL))
        if steps:
            p = p.thresholds(thresholds(*steps)).thresholds_style(
                common.GraphThresholdsStyleConfig().mode(cm.GraphThresholdsStyleMode.DASHED)
            )
        if min_val is not None:
            p = p.min(min_val)
        if max_val is not None:
            p = p.max(max_val)
        self.add(p)
        return p

    def stat(
        self,
        title: str,
        description: str,
        unit: str,
        targets: Sequence[prometheus.Dataquery],
        *,
        w: int = 6,
        h: int = 4,
        steps: Sequence[tuple[float | None, str]] = ((None, "green"),),
        mappings: Sequence[dm.ValueMapping] = (),
        links: Sequence[DashboardLink] = (),
    ) -> stat.Panel:
        p = self._common(stat.Panel(), title, description, unit, w, h, targets)
        p = p.reduce_options(common.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
        p = p.color_mode(cm.BigValueColorMode.BACKGROUND).graph_mode(cm.BigValueGraphMode.NONE)
        p = p.thresholds(thresholds(*steps))
        if mappings:
            p = p.mappings(list(mappings))
        if links:
            p = p.links(list(links))
        self.add(p)
        return p

    def bars(
        self,
        title: str,
        description: str,
        unit: str,
        targets: Sequence[prometheus.Dataquery],
        *,
        w: int = 12,
        h: int = 8,
        steps: Sequence[tuple[float | None, str]] = ((None, "green"),),
        max_val: float | None = None,
    ) -> bargauge.Panel:
        p = self._common(bargauge.Panel(), title, description, unit, w, h, targets)
        p = p.reduce_options(common.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
        p = p.orientation(cm.VizOrientation.HORIZONTAL).display_mode(
            cm.BarGaugeDisplayMode.GRADIENT
        )
        p = p.thresholds(thresholds(*steps)).min(0)
        if max_val is not None:
            p = p.max(max_val)
        self.add(p)
        return p

    def table(
        self,
        title: str,
        description: str,
        targets: Sequence[prometheus.Dataquery],
        *,
        unit: str = "none",
        w: int = 12,
        h: int = 6,
        hidden_columns: Sequence[str] = ("Time", "__name__"),
        links: Sequence[tuple[str, str]] = (),
        link_title: str = "Runbook",
        merge: bool = False,
        renames: dict[str, str] | None = None,
        column_units: dict[str, str] | None = None,
    ) -> table.Panel:
        """An instant table of label sets (info metrics, alert lists). ``merge`` joins the
        targets' rows on their shared label columns (every target then returns the same
        label set, one value column each: ``Value #A``, ``Value #B``...), ``renames`` names
        those columns and ``column_units`` gives each value column its own unit."""
        p = self._common(table.Panel(), title, description, unit, w, h, targets)
        if merge:
            p = p.with_transformation(dm.DataTransformerConfig(id_val="merge", options={}))
        organize: dict[str, Any] = {"excludeByName": {c: True for c in hidden_columns}}
        if renames:
            organize["renameByName"] = dict(renames)
        p = p.with_transformation(dm.DataTransformerConfig(id_val="organize", options=organize))
        for column, url in links:
            p = p.override_by_name(
                column,
                [dm.DynamicConfigValue(id_val="links", value=[{"title": link_title, "url": url}])],
            )
        for column, column_unit in (column_units or {}).items():
            p = p.override_by_name(
                column, [dm.DynamicConfigValue(id_val="unit", value=column_unit)]
            )
        self.add(p)
        return p

    def states(
        self,
        title: str,
        description: str,
        targets: Sequence[prometheus.Dataquery],
        *,
        mappings: Sequence[dm.ValueMapping],
        steps: Sequence[tuple[float | None, str]],
        w: int = 12,
        h: int = 8,
    ) -> statetimeline.Panel:
        """A state timeline (one row per series) for up/down and alert states."""
        p = self._common(statetimeline.Panel(), title, description, "none", w, h, targets)
        p = (
            p.mappings(list(mappings))
            .thresholds(thresholds(*steps))
            .show_value(cm.VisibilityMode.NEVER)
        )
        self.add(p)
        return p

    def heatmap(
        self,
        title: str,
        description: str,
        unit: str,
        targets: Sequence[prometheus.Dataquery],
        *,
        w: int = 12,
        h: int = 8,
    ) -> heatmap.Panel:
        """A heatmap of pre-bucketed histogram data (``format: heatmap``, no re-bucketing)."""
        p = self._common(heatmap.Panel(), title, description, unit, w, h, targets)
        p = (
            p.calculate(False)
            .y_axis(heatmap.YAxisConfig().unit(unit))
            .cell_values(heatmap.CellValues().unit("short"))
        )
        self.add(p)
        return p

    def build(self) -> dm.Dashboard:
        return self._dash.build()


def up_down_mappings() -> list[dm.ValueMapping]:
    """1 -> up (green), 0 -> down (red): for ``*_up`` gauges."""
    return [
        dm.ValueMap(
            options={
                "0": dm.ValueMappingResult(text="down", color="red", index=0),
                "1": dm.ValueMappingResult(text="up", color="green", index=1),
            }
        )
    ]
