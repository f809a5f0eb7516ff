"""The diagnosis: explicit rules that say which known cause the evidence supports or rules out.

Pure (no I/O). :func:`derive_facts` reduces the :class:`Evidence` to a flat set of numbers;
each cause then takes the first of its rules in :data:`RULES` whose condition holds. Every
rule is one line of text plus a predicate, so the report can say exactly which rule decided
and the tests can pin each one. The four causes are the ones this project knows:

- ``index_k_transfer_race``: HiCache loads index-K layer by layer and a reader that does not
  wait for the layer's load event reads stale data (ungated reads, corruption that follows
  concurrency, only with HiCache on).
- ``unpriced_index_k``: the legacy configurator prices bf16 index-K as fp8, so the pools
  allocate more than planned and eat the activation reserve (over-commit, OOM risk).
- ``unrelated_degeneration``: bad outputs that neither of those explains (at concurrency 1,
  with HiCache off, or with every index-K read gated).
- ``parser_config_artefact``: DSML in content without text degeneration (parser off or not
  matching, V3.2 block name from a V4 deployment, Unicode normalisation in a proxy).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from exporter.dsml import REASON_SPECS
from exporter.dsml.catalog import HARD
from exporter.oncall.repro_report import ReproReport, format_p, level_trend
from exporter.oncall.triage.evidence import BucketCount, Evidence
from exporter.samplers.buckets import BUCKET_LABELS
from exporter.stats import SIGNIFICANCE, wilson_interval
from exporter.thresholds import DEFAULTS, AlertConfig
from exporter.units import GIB

# Thresholds an alert rule also has are read from the alerts' own knobs
# (exporter/thresholds.py: kv_overcommit_warning_bytes, corruption_min_samples), never copied,
# so a site that changes one changes triage's verdicts with it (:func:`rules`, :func:`diagnose`).
# The rest are triage's own statistics.
AT_ONE_MIN_DEGENERATE = 2  # degeneration at concurrency 1 needs at least this many outputs...
AT_ONE_MIN_LOW = 0.005  # ...and a Wilson 95% lower bound above 0.5%
ARTEFACT_SHARE = 0.5  # artefact-only outputs must be at least this share of the bad ones
# Reasons that appear when DSML reaches the client unparsed or in another dialect, without
# the text itself degenerating; info- and signal-severity reasons are ignored everywhere.
ARTEFACT_REASONS = frozenset(
    {"unparsed_block", "version_mismatch", "marker_ascii_pipe", "whitespace_layout"}
)
HARD_REASONS = HARD  # the catalog says which reasons are hard
# signals (issue 32) are counted, never a verdict: like info, they say nothing about bad outputs
INFO_REASONS = frozenset(
    c for c, s in REASON_SPECS.items() if s.severity in ("info", "signal", "error")
)

SUPPORTED, POSSIBLE, RULED_OUT, UNKNOWN = "supported", "possible", "ruled_out", "unknown"
STATUSES = (SUPPORTED, POSSIBLE, RULED_OUT, UNKNOWN)
RACE, OVERCOMMIT, UNRELATED, ARTEFACT = (
    "index_k_transfer_race",
    "unpriced_index_k",
    "unrelated_degeneration",
    "parser_config_artefact",
)
CAUSES = (RACE, OVERCOMMIT, UNRELATED, ARTEFACT)
TITLES = {
    RACE: "Index-K transfer race (HiCache)",
    OVERCOMMIT: "Unpriced index-K (KV-pool over-commit)",
    UNRELATED: "Unrelated degeneration",
    ARTEFACT: "Parser / configuration artefact",
}
SHORT_MITIGATION = {
    RACE: "HiCache off or fp8 index-K",
    OVERCOMMIT: "deploy the fixed configurator",
    UNRELATED: "read the samples and A/B at concurrency 1 against a known-good deployment",
    ARTEFACT: "check --tool-call-parser and the chat template",
}


def gib(x: float) -> str:
    return f"{x / GIB:.2f}"


def pct(x: float) -> str:
    return f"{100 * x:.1f}%"


# --- facts ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Trend:
    """Degenerate rate in the low half versus the high half of the concurrency range."""

    origin: str
    low: str
    high: str
    low_k: int
    low_n: int
    high_k: int
    high_n: int
    p_value: float
    # the significance level: the rule's own (exporter/stats.py), or the one a saved repro
    # report ran with, so triage reads a repro result exactly as repro printed it
    alpha: float = SIGNIFICANCE.alpha

    @property
    def low_rate(self) -> float:
        return self.low_k / self.low_n if self.low_n else 0.0

    @property
    def high_rate(self) -> float:
        return self.high_k / self.high_n if self.high_n else 0.0

    @property
    def rises(self) -> bool:
        return SIGNIFICANCE.rises(self.p_value, self.low_rate, self.high_rate, self.alpha)

    def describe(self) -> str:
        return (
            f"{pct(self.low_rate)} at {self.low} -> {pct(self.high_rate)} at {self.high}, "
            f"{format_p(self.p_value)}"
        )


@dataclass(frozen=True)
class AtOne:
    origin: str
    k: int
    n: int

    @property
    def established(self) -> bool:
        return (
            self.k >= AT_ONE_MIN_DEGENERATE and wilson_interval(self.k, self.n)[0] > AT_ONE_MIN_LOW
        )


@dataclass(frozen=True)
class Facts:
    index_k_dtype: str | None = None
    configurator: str | None = None
    hicache: bool | None = None
    overcommit_bytes: float | None = None  # worst rank
    overcommit_rank: str | None = None
    reserve_bytes: float | None = None
    gpu_total_bytes: float | None = None
    gpu_free_min_bytes: float | None = None
    unpriced_pool: str | None = None
    unpriced_ratio: float | None = None  # allocated / planned of that pool
    graded: int = 0
    degenerate: int = 0
    bad: int = 0  # degenerate + suspect
    hard_degenerate: int = 0  # lower bound of outputs with a hard (degeneration) reason
    trends: tuple[Trend, ...] = ()
    at_one: tuple[AtOne, ...] = ()
    probe_present: bool = False
    gated: float = 0.0
    ungated: float = 0.0  # in the window, or since the probe started when larger
    mismatches: float = 0.0
    artefact_only: int = 0
    artefact_of: int = 0  # bad outputs the artefact share is taken over
    artefact_exact: bool = False  # per-sample reasons (True) or a bound from totals (False)
    artefact_reasons_seen: bool = False  # any artefact reason at all, in any source

    @property
    def trend(self) -> Trend | None:
        """The rising trend if any origin shows one, else the best-sampled one."""
        rising = [t for t in self.trends if t.rises]
        if rising:
            return min(rising, key=lambda t: t.p_value)
        return max(self.trends, key=lambda t: t.low_n + t.high_n, default=None)

    @property
    def rises(self) -> bool:
        return any(t.rises for t in self.trends)

    @property
    def at_one_established(self) -> AtOne | None:
        return next((a for a in self.at_one if a.established), None)

    @property
    def config(self) -> str:
        parts = []
        if self.index_k_dtype:
            parts.append(f"{self.index_k_dtype} index-K")
        if self.hicache is True:
            parts.append("HiCache")
        text = " + ".join(parts) or "deployment unknown"
        if self.configurator:
            text += f" ({self.configurator} configurator)"
        return text


def bucket_trend(buckets: list[BucketCount], origin: str) -> Trend | None:
    """Split the populated concurrency buckets into a low and a high half (the middle one
    left out when their number is odd) and test the two degenerate rates with Fisher."""
    known = [b for b in buckets if b.le in BUCKET_LABELS and b.graded > 0]
    known.sort(key=lambda b: BUCKET_LABELS.index(b.le))
    if len(known) < 2:
        return None
    half = len(known) // 2
    low, high = known[:half], known[len(known) - half :]
    lk, ln = sum(b.degenerate for b in low), sum(b.graded for b in low)
    hk, hn = sum(b.degenerate for b in high), sum(b.graded for b in high)
    below = BUCKET_LABELS[BUCKET_LABELS.index(high[0].le) - 1]
    return Trend(
        origin,
        f"<={low[-1].le}",
        f">{below}",
        lk,
        ln,
        hk,
        hn,
        SIGNIFICANCE.p_value(lk, ln, hk, hn),
    )


def _hard_lower_bound(reasons: dict[str, int]) -> int:
    """Outputs with a hard reason are at least as many as the most frequent hard reason."""
    return max((n for r, n in reasons.items() if r in HARD_REASONS), default=0)


def _artefact_from_totals(reasons: dict[str, int], bad: int) -> int:
    """A lower bound of artefact-only outputs from reason totals: the bad outputs that no
    non-artefact reason can account for."""
    if not any(reasons.get(r, 0) for r in ARTEFACT_REASONS):
        return 0
    other = sum(n for r, n in reasons.items() if r not in ARTEFACT_REASONS | INFO_REASONS)
    return max(0, bad - other)


def derive_facts(ev: Evidence) -> Facts:
    f: dict[str, Any] = {}
    dep = ev.deployment
    if dep is not None:
        f.update(
            index_k_dtype=dep.index_k_dtype, configurator=dep.configurator, hicache=dep.hicache
        )
    ik = ev.index_k
    if f.get("hicache") is None and ik is not None and (ik.load_backs or 0) > 0:
        f["hicache"] = True  # SGLang reports HiCache load-backs: it is on
    known = [r for r in ev.ranks if r.overcommit_bytes is not None]
    if known:
        worst = max(known, key=lambda r: r.overcommit_bytes or 0.0)
        f.update(
            overcommit_bytes=worst.overcommit_bytes,
            overcommit_rank=worst.key,
            reserve_bytes=worst.reserve_bytes,
        )
    totals = [r.gpu_total_bytes for r in ev.ranks if r.gpu_total_bytes]
    if totals:
        f["gpu_total_bytes"] = min(totals)
    frees = [
        r.gpu_free_min_bytes if r.gpu_free_min_bytes is not None else r.gpu_free_bytes
        for r in ev.ranks
    ]
    known_free = [x for x in frees if x is not None]
    if known_free:
        f["gpu_free_min_bytes"] = min(known_free)
    if ev.pools and ev.pools[0].overcommit_bytes > 0:
        p = ev.pools[0]
        f.update(
            unpriced_pool=p.pool,
            unpriced_ratio=p.allocated_bytes / p.planned_bytes if p.planned_bytes else None,
        )
    graded = degenerate = bad = hard = 0
    trends: list[Trend] = []
    at_one: list[AtOne] = []
    total_reasons: dict[str, int] = {}
    c = ev.corruption
    if c is not None:
        graded += c.graded
        degenerate += c.degenerate
        bad += c.degenerate + sum(b.suspect for b in c.buckets)
        hard += _hard_lower_bound(c.reasons)
        for r, n in c.reasons.items():
            total_reasons[r] = total_reasons.get(r, 0) + n
        t = bucket_trend(c.buckets, "graded outputs by concurrency bucket")
        if t:
            trends.append(t)
        one = next((b for b in c.buckets if b.le == "1"), None)
        if one is not None:
            at_one.append(AtOne("concurrency bucket le=1", one.degenerate, one.graded))
    if ev.scan is not None:
        s = ev.scan
        graded += sum(b.graded for b in s.buckets)
        degenerate += sum(b.degenerate for b in s.buckets)
        bad += sum(b.degenerate + b.suspect for b in s.buckets)
        hard += _hard_lower_bound(s.reasons)
        for r, n in s.reasons.items():
            total_reasons[r] = total_reasons.get(r, 0) + n
        t = bucket_trend(s.buckets, "scanned samples by concurrency bucket")
        if t:
            trends.append(t)
        one = next((b for b in s.buckets if b.le == "1"), None)
        if one is not None:
            at_one.append(AtOne("scanned samples at concurrency 1", one.degenerate, one.graded))
    if ev.repro is not None:
        report = ReproReport.from_json(ev.repro)
        for arm in report.arms:
            graded += arm.requests
            degenerate += arm.degenerate
            bad += sum(
                lv.verdicts.get("degenerate", 0) + lv.verdicts.get("suspect", 0)
                for lv in arm.levels
            )
            reasons: dict[str, int] = {}
            for lv in arm.levels:
                for r, n in lv.reasons.items():
                    reasons[r] = reasons.get(r, 0) + n
                    total_reasons[r] = total_reasons.get(r, 0) + n
                if lv.concurrency == 1:
                    at_one.append(
                        AtOne(f"repro arm {arm.arm.label} at 1", lv.degenerate, lv.requests)
                    )
            hard += _hard_lower_bound(reasons)
            rt = level_trend(arm.levels, report.alpha)
            if rt is not None:
                lo = next(lv for lv in arm.levels if lv.concurrency == rt.low)
                hi = next(lv for lv in arm.levels if lv.concurrency == rt.high)
                trends.append(
                    Trend(
                        f"repro arm {arm.arm.label}",
                        str(rt.low),
                        str(rt.high),
                        lo.degenerate,
                        lo.requests,
                        hi.degenerate,
                        hi.requests,
                        rt.p_value,
                        report.alpha,
                    )
                )
    f.update(
        graded=graded,
        degenerate=degenerate,
        bad=bad,
        hard_degenerate=hard,
        trends=tuple(trends),
        at_one=tuple(at_one),
    )
    if ik is not None:
        f["probe_present"] = ik.probe_ranks > 0 or ik.gated is not None or ik.ungated is not None
        f["gated"] = ik.gated or 0.0
        f["ungated"] = max(ik.ungated or 0.0, ik.ungated_total or 0.0)
        f["mismatches"] = ik.mismatches or 0.0
    f["artefact_reasons_seen"] = any(total_reasons.get(r, 0) for r in ARTEFACT_REASONS) or any(
        r in ARTEFACT_REASONS for s in ev.samples for r in s.reasons
    )
    if ev.samples:
        artefact = sum(1 for s in ev.samples if _artefact_only(s.reasons))
        f.update(artefact_only=artefact, artefact_of=len(ev.samples), artefact_exact=True)
    else:
        f.update(artefact_only=_artefact_from_totals(total_reasons, bad), artefact_of=bad)
    return Facts(**f)


def _artefact_only(reasons: list[str]) -> bool:
    relevant = [r for r in reasons if r not in INFO_REASONS]
    return bool(relevant) and all(r in ARTEFACT_REASONS for r in relevant)


# --- rules ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    id: str
    cause: str
    status: str
    text: str  # when it fires, in one line
    when: Callable[[Facts], bool]
    because: Callable[[Facts], list[str]]


def _over(f: Facts, threshold: int) -> list[str]:
    lines = [
        f"rank {f.overcommit_rank} allocates {gib(f.overcommit_bytes or 0)} GiB more KV-pool "
        f"memory than the configurator planned (threshold {gib(threshold)} GiB)"
    ]
    if f.reserve_bytes:
        share = (f.overcommit_bytes or 0) / f.reserve_bytes
        lines.append(
            f"that is {pct(share)} of the {gib(f.reserve_bytes)} GiB activation/CUDA-graph reserve"
            + (": the reserve is gone" if share >= 1 else "")
        )
    if f.unpriced_pool:
        ratio = f" ({f.unpriced_ratio:.2f}x planned)" if f.unpriced_ratio else ""
        lines.append(f"largest unplanned pool: {f.unpriced_pool}{ratio}")
    if f.configurator or f.index_k_dtype:
        lines.append(f"deployment: {f.config}")
    if f.gpu_free_min_bytes is not None:
        lines.append(f"lowest GPU free memory seen: {gib(f.gpu_free_min_bytes)} GiB")
    return lines


def _trend_line(t: Trend) -> str:
    return f"corruption {SIGNIFICANCE.trend_words(t.rises)} ({t.origin}: {t.describe()})"


def _trend_lines(f: Facts) -> list[str]:
    return [_trend_line(t) for t in f.trends]


def _rising_lines(f: Facts) -> list[str]:
    return [_trend_line(t) for t in f.trends if t.rises]


def _race(f: Facts) -> list[str]:
    lines = [f"ungated index-K reads: {f.ungated:,.0f} (gated: {f.gated:,.0f})"]
    lines += _rising_lines(f)
    if f.mismatches:
        lines.append(f"sampled index-K checksum mismatches: {f.mismatches:,.0f} (stale data read)")
    lines.append(f"deployment: {f.config}")
    return lines


def _degen(f: Facts) -> str:
    return f"{f.degenerate}/{f.graded} graded outputs degenerate"


def rules(t: AlertConfig = DEFAULTS) -> tuple[Rule, ...]:
    """Every rule, in order, with the thresholds the alert rules use (``t``, the alert knobs):
    the over-commit that DSV4KVPoolOvercommit warns above and the sample count
    DSV4ToolCallCorruptionHigh needs, so triage and the alerts agree under any site config."""
    over_bytes, min_samples = t.kv_overcommit_warning_bytes, t.corruption_min_samples
    return (
        # unpriced index-K (over-commit)
        Rule(
            "O1",
            OVERCOMMIT,
            SUPPORTED,
            f"a rank's KV pools allocate more than {gib(over_bytes)} GiB beyond the plan",
            lambda f: (f.overcommit_bytes or 0) > over_bytes,
            lambda f: _over(f, over_bytes),
        ),
        Rule(
            "O2",
            OVERCOMMIT,
            RULED_OUT,
            f"the footprint is known and no rank over-commits more than {gib(over_bytes)} GiB",
            lambda f: f.overcommit_bytes is not None,
            lambda f: [
                f"worst rank {f.overcommit_rank}: {gib(f.overcommit_bytes or 0)} GiB beyond the "
                "plan (page padding only)",
                f"deployment: {f.config}",
            ],
        ),
        Rule(
            "O3",
            OVERCOMMIT,
            POSSIBLE,
            "no footprint, but the legacy configurator with bf16 index-K is deployed",
            lambda f: f.configurator == "legacy" and f.index_k_dtype == "bf16",
            lambda f: [
                "the legacy configurator prices bf16 index-K as fp8 (~651 B per full token "
                "unplanned); the sidecar's footprint was not available to measure it"
            ],
        ),
        Rule(
            "O4",
            OVERCOMMIT,
            UNKNOWN,
            "no footprint and no deployment facts",
            lambda f: True,
            lambda f: ["no footprint data (give --sidecar, or a Prometheus scraping it)"],
        ),
        # index-K transfer race
        Rule(
            "R1",
            RACE,
            RULED_OUT,
            "HiCache is off: there is no host-to-device index-K transfer to race",
            lambda f: f.hicache is False,
            lambda f: [f"deployment: {f.config}, HiCache off"],
        ),
        Rule(
            "R2",
            RACE,
            SUPPORTED,
            "ungated index-K reads and a degenerate rate that rises with concurrency",
            lambda f: f.ungated > 0 and f.rises,
            _race,
        ),
        Rule(
            "R3",
            RACE,
            RULED_OUT,
            "the probe sees index-K reads and every one of them is gated",
            lambda f: f.probe_present and f.ungated == 0 and f.gated > 0,
            lambda f: [f"index-K reads: {f.gated:,.0f} gated, 0 ungated"],
        ),
        Rule(
            "R4",
            RACE,
            POSSIBLE,
            "ungated index-K reads, but corruption not (yet) shown to rise with concurrency",
            lambda f: f.ungated > 0,
            lambda f: [
                f"ungated index-K reads: {f.ungated:,.0f}",
                *(_trend_lines(f) or ["no graded outputs at several concurrency levels"]),
                "run `dsv4-sidecar repro` at 1 and 32-64 concurrent sessions to measure it",
            ],
        ),
        Rule(
            "R5",
            RACE,
            POSSIBLE,
            "HiCache on and corruption rises with concurrency, but no probe data to confirm",
            lambda f: f.hicache is True and not f.probe_present and f.rises,
            lambda f: [
                *_rising_lines(f),
                "no probe data: install the in-process probe (docs/probe.md) to see ungated reads",
            ],
        ),
        Rule(
            "R6",
            RACE,
            UNKNOWN,
            "neither probe reads nor a concurrency trend decide it",
            lambda f: True,
            lambda f: ["no ungated-read evidence and no rising corruption measured"],
        ),
        # unrelated degeneration
        Rule(
            "U1",
            UNRELATED,
            UNKNOWN,
            "nothing was graded",
            lambda f: f.graded == 0,
            lambda f: ["no graded outputs (canary off, no tap/ingest, no repro or scan input)"],
        ),
        Rule(
            "U2",
            UNRELATED,
            RULED_OUT,
            f"at least {min_samples} outputs graded and none shows degeneration",
            lambda f: f.graded >= min_samples and f.hard_degenerate == 0 and f.degenerate == 0,
            lambda f: [_degen(f)],
        ),
        Rule(
            "U3",
            UNRELATED,
            SUPPORTED,
            f"degeneration at concurrency 1 (>= {AT_ONE_MIN_DEGENERATE} outputs, Wilson low "
            f"> {pct(AT_ONE_MIN_LOW)})",
            lambda f: f.at_one_established is not None and f.hard_degenerate > 0,
            lambda f: [
                f"{a.origin}: {a.k}/{a.n} degenerate (95% CI "
                f"{pct(wilson_interval(a.k, a.n)[0])}-{pct(wilson_interval(a.k, a.n)[1])}): "
                "not load-related"
                for a in f.at_one
                if a.established
            ],
        ),
        Rule(
            "U4",
            UNRELATED,
            SUPPORTED,
            "degenerate outputs with HiCache off (the race cannot happen)",
            lambda f: f.hicache is False and f.hard_degenerate >= 2,
            lambda f: [_degen(f), f"deployment: {f.config}, HiCache off"],
        ),
        Rule(
            "U5",
            UNRELATED,
            SUPPORTED,
            "degenerate outputs while the probe sees every index-K read gated",
            lambda f: f.hard_degenerate >= 2 and f.probe_present and f.ungated == 0 and f.gated > 0,
            lambda f: [_degen(f), f"index-K reads: {f.gated:,.0f} gated, 0 ungated"],
        ),
        Rule(
            "U6",
            UNRELATED,
            RULED_OUT,
            "degeneration only under load, with ungated index-K reads: the race explains it",
            lambda f: f.rises and f.ungated > 0,
            lambda f: [_degen(f), *_rising_lines(f)],
        ),
        Rule(
            "U7",
            UNRELATED,
            POSSIBLE,
            "degenerate outputs that no known cause is established for",
            lambda f: f.hard_degenerate > 0 or f.degenerate >= 2,
            lambda f: [_degen(f), *_trend_lines(f)],
        ),
        Rule(
            "U8",
            UNRELATED,
            UNKNOWN,
            "too few outputs to say",
            lambda f: True,
            lambda f: [_degen(f)],
        ),
        # parser / configuration artefact
        Rule(
            "A1",
            ARTEFACT,
            SUPPORTED,
            f"at least {ARTEFACT_SHARE:.0%} of bad outputs carry only artefact reasons "
            "(DSML in content, V3.2 block name, ASCII pipes) and no degeneration",
            lambda f: f.artefact_only > 0 and f.artefact_only >= ARTEFACT_SHARE * f.artefact_of,
            lambda f: [
                f"{f.artefact_only}/{f.artefact_of} bad outputs are artefact-only "
                f"({'per-sample reasons' if f.artefact_exact else 'bound from reason totals'})"
            ],
        ),
        Rule(
            "A2",
            ARTEFACT,
            RULED_OUT,
            "bad outputs exist and none is artefact-only",
            lambda f: (
                f.artefact_of > 0
                and f.artefact_only == 0
                and (f.artefact_exact or not f.artefact_reasons_seen)
            ),
            lambda f: [
                f"0/{f.artefact_of} bad outputs are artefact-only: the text itself degenerates"
            ],
        ),
        Rule(
            "A3",
            ARTEFACT,
            RULED_OUT,
            "artefact-only outputs are a minority and bad outputs rise with concurrency",
            lambda f: f.rises,
            lambda f: [
                f"{f.artefact_only}/{f.artefact_of} bad outputs are artefact-only, and they come "
                "under load with the rest: phenotypes of the corruption, not a configuration issue"
            ],
        ),
        Rule(
            "A4",
            ARTEFACT,
            POSSIBLE,
            "some bad outputs carry only artefact reasons",
            lambda f: f.artefact_only > 0,
            lambda f: [
                f"{f.artefact_only}/{f.artefact_of} bad outputs are artefact-only; if they persist "
                "after other fixes, check the parser and template"
            ],
        ),
        Rule(
            "A5",
            ARTEFACT,
            RULED_OUT,
            f"at least {min_samples} outputs graded and none is bad",
            lambda f: f.graded >= min_samples and f.bad == 0,
            lambda f: [f"0/{f.graded} graded outputs degenerate or suspect"],
        ),
        Rule(
            "A6",
            ARTEFACT,
            UNKNOWN,
            "too few outputs to say",
            lambda f: True,
            lambda f: [f"{f.graded} outputs graded"],
        ),
    )


RULES: tuple[Rule, ...] = rules()  # at the alerts' default knobs (docs/oncall.md's table)


def mitigations(cause: str, f: Facts) -> list[str]:
    """What to do, in order (the runbooks' order): each step is enough on its own unless it
    says it only contains the problem."""
    if cause == RACE:
        return [
            "Disable HiCache (drop --enable-hierarchical-cache): no load-back, no race.",
            "Or switch index-K to fp8 (unset SGLANG_DSV4_BF16_INDEX_K): the bf16 path is the "
            "one the race hits, and fp8 halves the bytes of each layer load.",
            "Deploy an SGLang build whose DSV4 pool gates the index-K accessor (waits on the "
            "layer's load event before get_index_k_with_scale_buffer).",
            "To contain it meanwhile: lower --max-running-requests (the rate falls with "
            "concurrency).",
        ]
    if cause == OVERCOMMIT:
        if f.overcommit_bytes and f.gpu_total_bytes:
            delta = f.overcommit_bytes / f.gpu_total_bytes
            third = (
                f"Until one of those is live: lower --mem-fraction-static by at least "
                f"{delta:.3f} ({gib(f.overcommit_bytes)} GiB of {gib(f.gpu_total_bytes)} GiB) "
                "to restore the reserve."
            )
        else:
            third = (
                "Until one of those is live: lower --mem-fraction-static by at least the "
                "over-commit divided by the GPU's memory, to restore the reserve."
            )
        return [
            "Deploy the fixed configurator (prices index-K by its dtype): the pools shrink to "
            "what the budget holds.",
            "Or switch index-K to fp8 (unset SGLANG_DSV4_BF16_INDEX_K): the legacy price is "
            "then right.",
            third,
            "If the engine is already OOMing: lower --max-running-requests to cut activation "
            "memory.",
        ]
    if cause == UNRELATED:
        return [
            "Read the degenerate samples and their reasons (sidecar GET /api/v1/samples with "
            "the bearer token, or `dsv4-sidecar scan` on saved outputs).",
            "Run `dsv4-sidecar repro --ab` at concurrency 1 against a known-good deployment of "
            "the same model: a difference there points at this deployment's weights, template "
            "or sampling, not at load.",
            "Check what clients send: chat template and thinking mode, sampling parameters "
            "(temperature, max_tokens), tool schemas.",
            "If it persists on a clean configuration, escalate upstream with the samples and "
            "this report.",
        ]
    return [
        "Check SGLang's --tool-call-parser matches the model (the DeepSeek-V4 parser) and that "
        "a reasoning parser is set: well-formed DSML left in content means the parser did not "
        "run or did not match.",
        "Check the chat template and the served checkpoint: a V3.2 block name (function_calls) "
        "from a V4 deployment means a V3.2 template or model somewhere in the path.",
        "Check proxies and clients for Unicode normalisation (NFKC turns the fullwidth bar "
        "into an ASCII |).",
        "After the fix, re-grade saved outputs (`dsv4-sidecar scan`, or `repro`): the "
        "artefact reasons should be gone.",
    ]


# --- the diagnosis --------------------------------------------------------------------------


@dataclass(frozen=True)
class CauseFinding:
    cause: str
    title: str
    status: str
    rule: str
    rule_text: str
    evidence: list[str]
    mitigations: list[str]

    def to_json(self) -> dict[str, Any]:
        return {
            "cause": self.cause,
            "title": self.title,
            "status": self.status,
            "rule": self.rule,
            "rule_text": self.rule_text,
            "evidence": self.evidence,
            "mitigations": self.mitigations,
        }


@dataclass(frozen=True)
class Diagnosis:
    facts: Facts
    causes: list[CauseFinding] = field(default_factory=list)

    def cause(self, name: str) -> CauseFinding:
        return next(c for c in self.causes if c.cause == name)

    @property
    def supported(self) -> list[str]:
        return [c.cause for c in self.causes if c.status == SUPPORTED]

    @property
    def headline(self) -> str:
        """The one line for the ticket title: configuration, what is wrong, what to do."""
        f = self.facts
        claims, fixes = [], []
        for c in self.causes:
            if c.status != SUPPORTED:
                continue
            fixes.append(SHORT_MITIGATION[c.cause])
            if c.cause == RACE:
                t = f.trend
                claims.append(
                    "corruption rises with concurrency"
                    + (f" ({t.describe()})" if t else "")
                    + f", ungated index-K reads present ({f.ungated:,.0f})"
                )
            elif c.cause == OVERCOMMIT:
                claims.append(
                    f"KV pools over-commit {gib(f.overcommit_bytes or 0)} GiB per rank"
                    + (f" ({f.unpriced_pool} unpriced)" if f.unpriced_pool else "")
                )
            elif c.cause == UNRELATED:
                claims.append("degeneration not explained by load or the race: " + c.evidence[0])
            else:
                claims.append("DSML in content without degeneration: " + c.evidence[0])
        if claims:
            return f"{f.config}: {'; '.join(claims)}; mitigate: {'; '.join(fixes)}"
        possible = [TITLES[c.cause] for c in self.causes if c.status == POSSIBLE]
        checks = [f"{f.degenerate}/{f.graded} graded outputs degenerate"]
        if f.overcommit_bytes is not None:
            checks.append(f"worst over-commit {gib(f.overcommit_bytes)} GiB")
        text = f"{f.config}: no known cause supported ({', '.join(checks)})"
        if possible:
            text += f"; possible: {', '.join(possible)}"
        return text

    def to_json(self) -> dict[str, Any]:
        return {
            "headline": self.headline,
            "supported": self.supported,
            "causes": [c.to_json() for c in self.causes],
        }


def diagnose(ev: Evidence, thresholds: AlertConfig = DEFAULTS) -> Diagnosis:
    """Each cause's first rule that holds; ``thresholds`` are the alert knobs in force (a
    site's overrides, so its triage and its alerts agree)."""
    facts = derive_facts(ev)
    table = RULES if thresholds == DEFAULTS else rules(thresholds)
    findings = []
    for cause in CAUSES:
        rule = next(r for r in table if r.cause == cause and r.when(facts))
        findings.append(
            CauseFinding(
                cause,
                TITLES[cause],
                rule.status,
                rule.id,
                rule.text,
                rule.because(facts),
                mitigations(cause, facts),
            )
        )
    order = {SUPPORTED: 0, POSSIBLE: 1, UNKNOWN: 2, RULED_OUT: 3}
    findings.sort(key=lambda c: (order[c.status], CAUSES.index(c.cause)))
    return Diagnosis(facts, findings)
