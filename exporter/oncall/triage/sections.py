"""The report's content, independent of its format: sections of text lines and tables.

Both renderers (Markdown for tickets, HTML for reading) walk the same sections, so the two
reports never disagree; the HTML one adds the plots named by each section.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from exporter.dsml.catalog import SIGNALS
from exporter.oncall.repro_report import ReproReport, errors_cell, format_p
from exporter.oncall.triage.diagnosis import GIB, Diagnosis, gib, pct
from exporter.oncall.triage.evidence import BucketCount, Evidence
from exporter.stats import SIGNIFICANCE


@dataclass
class Table:
    headers: list[str]
    rows: list[list[str]]
    caption: str = ""


@dataclass
class Section:
    title: str
    lines: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    plots: list[str] = field(default_factory=list)  # keys of exporter.oncall.triage.plots


def reason_lines(reasons: dict[str, int]) -> list[str]:
    """The top reasons, and apart from them the counted signals (issue 32): a signal never
    moves a verdict, so on-call reads it as a rate to watch, not as corruption."""
    ranked = sorted(reasons.items(), key=lambda kv: -kv[1])
    top = [(r, n) for r, n in ranked if r not in SIGNALS and n][:8]
    signals = [(r, n) for r, n in ranked if r in SIGNALS and n]
    out = []
    if top:
        out.append("Top reasons: " + ", ".join(f"{r} {n}" for r, n in top) + ".")
    if signals:
        out.append(
            "Signals (counted, never a verdict: clean answers have them too): "
            + ", ".join(f"{r} {n}" for r, n in signals)
            + "."
        )
    return out


def utc(t: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t)) if t else "-"


def num(x: float | None, digits: int = 0) -> str:
    if x is None:
        return "-"
    return f"{x:,.{digits}f}"


def gib_or_dash(x: float | None) -> str:
    return "-" if x is None else gib(x)


def histogram_quantile(q: float, buckets: list[tuple[float, float]]) -> float | None:
    """Quantile of a cumulative histogram [(le, count)], interpolated inside the bucket as
    Prometheus does; None without observations."""
    if not buckets or buckets[-1][1] <= 0:
        return None
    total = buckets[-1][1]
    rank = q * total
    prev_le, prev_count = 0.0, 0.0
    for le, count in buckets:
        if count >= rank:
            if math.isinf(le):
                return prev_le
            if count == prev_count:
                return le
            return prev_le + (le - prev_le) * (rank - prev_count) / (count - prev_count)
        prev_le, prev_count = le, count
    return buckets[-1][0]


def seconds(x: float | None) -> str:
    if x is None:
        return "-"
    if x >= 1:
        return f"{x:.2f} s"
    if x >= 1e-3:
        return f"{x * 1e3:.2f} ms"
    return f"{x * 1e6:.1f} us"


def bucket_table(buckets: list[BucketCount], dimension: str = "concurrency") -> Table:
    rows = []
    for b in buckets:
        low, high = b.ci
        le = b.le if b.le in ("unknown",) else f"<= {b.le}"
        rows.append(
            [
                le,
                str(b.graded),
                str(b.degenerate),
                str(b.suspect),
                pct(b.rate),
                f"{pct(low)}-{pct(high)}",
            ]
        )
    return Table([dimension, "graded", "degenerate", "suspect", "rate", "95% CI"], rows)


def diagnosis_table(diag: Diagnosis) -> Table:
    return Table(
        ["cause", "verdict", "rule"],
        [[c.title, c.status.replace("_", " "), f"{c.rule}: {c.rule_text}"] for c in diag.causes],
    )


def build_sections(ev: Evidence, diag: Diagnosis) -> list[Section]:
    out = [_configuration(ev)]
    out.append(_corruption(ev))
    out.append(_memory(ev))
    out.append(_index_k(ev))
    if ev.canary is not None:
        out.append(_canary(ev))
    if ev.repro is not None:
        out.append(_repro(ev))
    if ev.scan is not None:
        out.append(_scan(ev))
    if ev.alerts:
        out.append(
            Section(
                "Alerts (DSV4*)",
                tables=[
                    Table(
                        ["alert", "state", "severity", "where"],
                        [
                            [a["alertname"], a["state"], a["severity"], a["where"]]
                            for a in ev.alerts
                        ],
                    )
                ],
            )
        )
    if ev.notes:
        out.append(Section("Collection notes", lines=list(ev.notes)))
    return out


def _configuration(ev: Evidence) -> Section:
    s = Section("Configuration")
    dep = ev.deployment
    rows = []
    if dep is not None:
        rows += [
            ["index-K dtype", dep.index_k_dtype or "-"],
            ["configurator", dep.configurator or "-"],
            ["HiCache", "-" if dep.hicache is None else ("on" if dep.hicache else "off")],
            ["model", dep.model or "-"],
            ["SGLang version", dep.sglang_version or "-"],
            ["facts from", dep.source or "-"],
        ]
    else:
        s.lines.append("No deployment facts (the sidecar's footprint was not available).")
    if ev.engine:
        e = ev.engine
        rows.append(["engine", f"{e.get('engine')} {ev.engine_version or ''} ({e.get('source')})"])
        rows.append(["KV footprint", e.get("footprint") or "-"])
    if ev.readiness and isinstance(ev.readiness.get("sources"), dict):
        states = ", ".join(
            f"{name} {'up' if st.get('up') else 'DOWN'}"
            for name, st in sorted(ev.readiness["sources"].items())
            if isinstance(st, dict)
        )
        rows.append(["sidecar sources", states])
    if rows:
        s.tables.append(Table(["fact", "value"], rows))
    return s


def _corruption(ev: Evidence) -> Section:
    s = Section("Tool-call corruption by concurrency and output length")
    c = ev.corruption
    if c is None or not c.buckets:
        s.lines.append("No graded outputs from the sidecar in the window.")
    else:
        s.lines.append(
            f"{c.degenerate}/{c.graded} graded outputs degenerate ({c.source}); concurrency "
            "buckets as the sidecar counts them (SGLang's running requests when graded)."
        )
        s.tables.append(bucket_table(c.buckets))
        if c.by_source:
            s.tables.append(
                Table(
                    ["source", "graded", "degenerate"],
                    [
                        [src, str(v["graded"]), str(v["degenerate"])]
                        for src, v in sorted(c.by_source.items())
                    ],
                )
            )
        s.lines += reason_lines(c.reasons)
        if c.by_length:
            s.lines.append(
                "By output length (output tokens: usage, else streamed deltas, else estimated): "
                "long generations are where DeepSeek-V4 corruption is reported (sglang#33397)."
            )
            s.tables.append(bucket_table(c.by_length, "output tokens"))
        if c.output_tokens_p50 is not None:
            drift = ""
            if c.output_tokens_p50_total:
                drift = (
                    f" against {num(c.output_tokens_p50_total)} since the sidecar started "
                    f"(x{c.output_tokens_p50 / c.output_tokens_p50_total:.2f}: length drift; "
                    "loops inflate outputs, sglang#36179)"
                )
            s.lines.append(f"p50 output tokens over the window: {num(c.output_tokens_p50)}{drift}.")
        if c.finish_reasons:
            verdicts = sorted({v for row in c.finish_reasons.values() for v in row})
            s.tables.append(
                Table(
                    ["finish reason", *verdicts],
                    [
                        [f, *(str(row.get(v, 0)) for v in verdicts)]
                        for f, row in sorted(c.finish_reasons.items())
                    ],
                )
            )
    s.plots = ["corruption_vs_concurrency", "degenerate_ratio_over_time"]
    return s


def _memory(ev: Evidence) -> Section:
    s = Section("KV pools and GPU memory")
    if not ev.ranks:
        s.lines.append("No per-rank memory data.")
    else:
        rows = []
        for r in ev.ranks:
            left = (
                None
                if r.reserve_bytes is None or r.overcommit_bytes is None
                else r.reserve_bytes - r.overcommit_bytes
            )
            rows.append(
                [
                    r.key,
                    gib_or_dash(r.overcommit_bytes),
                    gib_or_dash(r.reserve_bytes),
                    gib_or_dash(left),
                    gib_or_dash(r.gpu_free_bytes),
                    gib_or_dash(r.gpu_free_min_bytes),
                ]
            )
        s.tables.append(
            Table(
                [
                    "rank",
                    "over-commit GiB",
                    "reserve GiB",
                    "reserve left GiB",
                    "GPU free GiB",
                    "min free in window",
                ],
                rows,
            )
        )
    if ev.pools:
        s.tables.append(
            Table(
                ["pool (worst rank)", "planned GiB", "allocated GiB", "unplanned GiB"],
                [
                    [p.pool, gib(p.planned_bytes), gib(p.allocated_bytes), gib(p.overcommit_bytes)]
                    for p in ev.pools
                    if abs(p.overcommit_bytes) >= 0.01 * GIB
                ],
                caption="pools with at least 0.01 GiB unplanned",
            )
        )
    s.plots = ["overcommit", "gpu_free"]
    return s


def _index_k(ev: Evidence) -> Section:
    s = Section("HiCache index-K probe")
    ik = ev.index_k
    if ik is None or (ik.probe_ranks == 0 and ik.gated is None and ik.ungated is None):
        s.lines.append(
            "No probe data: the in-process probe is not installed or the sidecar has no "
            "probe_dir. Ungated index-K reads cannot be seen without it (docs/probe.md)."
        )
        if ik is not None and ik.load_backs is not None:
            s.lines.append(f"SGLang HiCache load-backs in the window: {num(ik.load_backs)}.")
        return s
    p50 = histogram_quantile(0.5, ik.gap_buckets)
    p99 = histogram_quantile(0.99, ik.gap_buckets)
    rows = [
        ["probe ranks up", f"{ik.probe_up}/{ik.probe_ranks}"],
        ["index-K reads gated", num(ik.gated)],
        ["index-K reads UNGATED", num(ik.ungated)],
        ["ungated since the probe started", num(ik.ungated_total)],
        ["checksum checks / mismatches", f"{num(ik.checks)} / {num(ik.mismatches)}"],
        ["transfer gap p50 / p99", f"{seconds(p50)} / {seconds(p99)}"],
        ["SGLang HiCache load-backs", num(ik.load_backs)],
    ]
    s.tables.append(Table(["probe", "value"], rows, caption=ik.source))
    if ik.ungated_by_rank:
        s.tables.append(
            Table(
                ["rank", "ungated index-K reads"],
                [[k, num(v)] for k, v in sorted(ik.ungated_by_rank.items())],
            )
        )
    s.plots = ["gap_histogram"]
    return s


def _canary(ev: Evidence) -> Section:
    c = ev.canary
    assert c is not None
    results = ", ".join(f"{k} {v:,.0f}" for k, v in sorted(c.results.items())) or "none"
    age = "never" if c.last_success_age_s is None else seconds(c.last_success_age_s) + " ago"
    return Section(
        "Canary",
        lines=[
            f"Requests: {results}; last success {age}.",
            f"Graded canary replies: {c.graded}, degenerate {c.degenerate}.",
        ],
    )


def _repro(ev: Evidence) -> Section:
    assert ev.repro is not None
    report = ReproReport.from_json(ev.repro)
    s = Section("Repro result")
    rows = []
    for arm in report.arms:
        for lv in arm.levels:
            low, high = lv.ci
            rows.append(
                [
                    arm.arm.label,
                    str(lv.concurrency),
                    str(lv.requests),
                    str(lv.degenerate),
                    pct(lv.rate),
                    f"{pct(low)}-{pct(high)}",
                    errors_cell(lv.errors, lv.error_causes),
                ]
            )
    s.tables.append(
        Table(["arm", "concurrency", "graded", "degenerate", "rate", "95% CI", "errors"], rows)
    )
    for arm in report.arms:
        t = arm.trend(report.alpha)
        if t is not None:
            s.lines.append(
                f"{arm.arm.label}: corruption {SIGNIFICANCE.trend_words(t.rises)} "
                f"({pct(t.low_rate)} at {t.low} -> {pct(t.high_rate)} at {t.high}, "
                f"{format_p(t.p_value)})"
            )
    cmp = report.comparison
    if cmp is not None:
        s.lines.append(f"A/B: {cmp.summary} (Fisher exact, two-sided)")
    if report.interrupted:
        s.lines.append("The run was interrupted: partial result.")
    return s


def _scan(ev: Evidence) -> Section:
    sc = ev.scan
    assert sc is not None
    s = Section("Scanned sample files")
    verdicts = ", ".join(f"{k} {v}" for k, v in sorted(sc.verdicts.items())) or "none"
    s.lines.append(
        f"{len(sc.files)} file(s), {sc.lines} lines, {sc.unreadable} not gradable; verdicts: "
        f"{verdicts}."
    )
    if sc.in_repro:
        s.lines.append(
            f"{sc.in_repro} lines are answers of the repro result above: counted there once, "
            "their per-sample reasons read from the file."
        )
    if sc.buckets:
        s.tables.append(bucket_table(sc.buckets))
    s.lines += reason_lines(sc.reasons)
    return s
