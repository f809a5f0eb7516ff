"""The diagnosis rules, one case per rule, on synthetic evidence (no I/O)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest

from exporter.oncall.triage.diagnosis import (
    ARTEFACT,
    GIB,
    OVERCOMMIT,
    RACE,
    RULED_OUT,
    RULES,
    SUPPORTED,
    UNRELATED,
    bucket_trend,
    derive_facts,
    diagnose,
)
from exporter.oncall.triage.evidence import (
    BucketCount,
    Corruption,
    Deployment,
    Evidence,
    IndexK,
    PoolGap,
    RankMemory,
    SampleRecord,
)

RISING = {"1": (200, 0), "8": (200, 4), "32": (200, 24), "64": (200, 36)}
FLAT = {"1": (200, 6), "8": (200, 5), "32": (200, 7), "64": (200, 6)}
HARD = {"orphan_closer": 40, "ngram_loop": 30, "unparsed_block": 25}  # >= every bad output


def evidence(
    *,
    dtype: str | None = None,
    hicache: bool | None = None,
    conf: str | None = None,
    over: float | None = None,
    buckets: dict[str, tuple[int, int]] | None = None,
    reasons: dict[str, int] | None = None,
    suspect: int = 0,
    probe: tuple[float, float] | None = None,
    samples: list[list[str]] | None = None,
) -> Evidence:
    ev = Evidence()
    if dtype or hicache is not None or conf:
        ev.deployment = Deployment(dtype, conf, hicache, "deepseek-v4-flash", source="test")
    if over is not None:
        ev.ranks = [
            RankMemory(str(r), over, 16.8 * GIB, 12 * GIB, 140 * GIB, 11 * GIB) for r in range(4)
        ]
        ev.pools = [PoolGap("c4_index_k", 4.27 * GIB, 4.27 * GIB + over)]
    if buckets is not None:
        bs = [BucketCount(le, n, k) for le, (n, k) in buckets.items()]
        if suspect:
            bs[-1].suspect = suspect
            bs[-1].graded += suspect
        ev.corruption = Corruption("test", bs, reasons=dict(reasons or {}))
    if probe is not None:
        ev.index_k = IndexK("test", probe_ranks=4, probe_up=4, gated=probe[0], ungated=probe[1])
    for reasons_of_one in samples or []:
        ev.samples.append(SampleRecord("degenerate", reasons_of_one, 64, "test"))
    return ev


artefact_minority = [["unparsed_block", "version_mismatch"]] * 3 + [["orphan_closer"]] * 12
CASES: list[tuple[str, str, Callable[[], Evidence]]] = [
    ("O1", OVERCOMMIT, lambda: evidence(dtype="bf16", conf="legacy", over=4.34 * GIB)),
    ("O2", OVERCOMMIT, lambda: evidence(dtype="fp8", conf="fixed", over=0.33 * GIB)),
    ("O3", OVERCOMMIT, lambda: evidence(dtype="bf16", conf="legacy")),
    ("O4", OVERCOMMIT, lambda: evidence()),
    ("R1", RACE, lambda: evidence(dtype="bf16", hicache=False, buckets=RISING, probe=(0, 500))),
    ("R2", RACE, lambda: evidence(hicache=True, buckets=RISING, reasons=HARD, probe=(0, 9000))),
    ("R3", RACE, lambda: evidence(hicache=True, buckets=FLAT, probe=(9000, 0))),
    ("R4", RACE, lambda: evidence(hicache=True, buckets=FLAT, probe=(0, 9000))),
    ("R5", RACE, lambda: evidence(hicache=True, buckets=RISING, reasons=HARD)),
    ("R6", RACE, lambda: evidence(hicache=True, buckets=FLAT, reasons=HARD)),
    ("U1", UNRELATED, lambda: evidence(hicache=True)),
    ("U2", UNRELATED, lambda: evidence(buckets={"1": (50, 0), "16": (50, 0)})),
    ("U3", UNRELATED, lambda: evidence(hicache=True, buckets=FLAT, reasons=HARD, probe=(0, 10))),
    ("U4", UNRELATED, lambda: evidence(hicache=False, buckets={"16": (100, 5)}, reasons=HARD)),
    ("U5", UNRELATED, lambda: evidence(buckets={"16": (100, 5)}, reasons=HARD, probe=(900, 0))),
    ("U6", UNRELATED, lambda: evidence(hicache=True, buckets=RISING, reasons=HARD, probe=(0, 1))),
    ("U7", UNRELATED, lambda: evidence(hicache=True, buckets={"16": (100, 5)}, reasons=HARD)),
    ("U8", UNRELATED, lambda: evidence(buckets={"1": (5, 0)})),
    ("A1", ARTEFACT, lambda: evidence(buckets={"1": (40, 0)}, samples=[["unparsed_block"]] * 8)),
    (
        "A2",
        ARTEFACT,
        lambda: evidence(buckets={"16": (100, 5)}, samples=[["orphan_closer", "ngram_loop"]] * 5),
    ),
    ("A3", ARTEFACT, lambda: evidence(buckets=RISING, samples=artefact_minority)),
    ("A4", ARTEFACT, lambda: evidence(buckets=FLAT, samples=artefact_minority)),
    ("A5", ARTEFACT, lambda: evidence(buckets={"1": (50, 0), "16": (50, 0)})),
    ("A6", ARTEFACT, lambda: evidence()),
]


@pytest.mark.parametrize(("rule", "cause", "build"), CASES, ids=[c[0] for c in CASES])
def test_each_rule(rule, cause, build):
    finding = diagnose(build()).cause(cause)
    expected = next(r for r in RULES if r.id == rule)
    assert (finding.rule, finding.status) == (rule, expected.status), finding.evidence
    assert finding.evidence and all(isinstance(e, str) and e for e in finding.evidence)


def test_every_rule_has_a_case_and_every_cause_a_fallback():
    assert {c[0] for c in CASES} == {r.id for r in RULES}
    for cause in (RACE, OVERCOMMIT, UNRELATED, ARTEFACT):
        last = [r for r in RULES if r.cause == cause][-1]
        assert last.status == "unknown" and last.when(derive_facts(Evidence()))


def test_seed_answer_for_race_and_overcommit():
    ev = evidence(
        dtype="bf16",
        hicache=True,
        conf="legacy",
        over=4.34 * GIB,
        buckets=RISING,
        reasons=HARD,
        probe=(0, 9000),
    )
    diag = diagnose(ev)
    assert diag.supported == [RACE, OVERCOMMIT]
    h = diag.headline
    assert h.startswith("bf16 index-K + HiCache (legacy configurator): corruption rises with")
    assert "ungated index-K reads present (9,000)" in h
    assert h.endswith("mitigate: HiCache off or fp8 index-K; deploy the fixed configurator")
    race = diag.cause(RACE)
    assert race.mitigations[0].startswith("Disable HiCache")
    assert race.mitigations[1].startswith("Or switch index-K to fp8")
    over = diag.cause(OVERCOMMIT)
    assert over.mitigations[0].startswith("Deploy the fixed configurator")
    assert "by at least 0.031 (4.34 GiB of 140.00 GiB)" in over.mitigations[2]
    assert diag.cause(UNRELATED).status == RULED_OUT and diag.cause(ARTEFACT).status == RULED_OUT


def test_clean_headline_says_no_cause():
    ev = evidence(dtype="fp8", hicache=False, conf="fixed", over=0.3 * GIB, buckets=FLAT)
    ev.corruption.buckets = [BucketCount(b.le, b.graded, 0) for b in ev.corruption.buckets]
    diag = diagnose(ev)
    assert diag.supported == []
    assert diag.headline.startswith("fp8 index-K (fixed configurator): no known cause supported")
    assert all(c.status == RULED_OUT for c in diag.causes)


def test_single_degenerate_at_one_is_not_established():
    facts = derive_facts(evidence(buckets={"1": (300, 1), "64": (300, 40)}, reasons=HARD))
    assert facts.at_one[0].k == 1 and facts.at_one_established is None
    facts = derive_facts(evidence(buckets={"1": (100, 4)}, reasons=HARD))
    assert facts.at_one_established is not None


def test_bucket_trend_halves():
    t = bucket_trend([BucketCount(le, n, k) for le, (n, k) in RISING.items()], "x")
    assert (t.low, t.high) == ("<=8", ">16")  # bucket 32 holds 17-32
    assert (t.low_k, t.low_n, t.high_k, t.high_n) == (4, 400, 60, 400) and t.rises
    odd = {"1": (100, 0), "8": (100, 50), "64": (100, 10)}  # the middle bucket is left out
    t = bucket_trend([BucketCount(le, n, k) for le, (n, k) in odd.items()], "x")
    assert (t.low_n, t.high_n, t.high) == (100, 100, ">32") and t.rises
    assert bucket_trend([BucketCount("8", 10, 1)], "x") is None
    assert bucket_trend([BucketCount("unknown", 10, 1), BucketCount("8", 10, 1)], "x") is None


def test_artefact_bound_from_totals_without_samples():
    # parser off: every tool call comes back as content, no degeneration: all suspect
    ev = evidence(buckets={"1": (40, 0)}, suspect=30, reasons={"unparsed_block": 30})
    finding = diagnose(ev).cause(ARTEFACT)
    assert finding.status == SUPPORTED and "bound from reason totals" in finding.evidence[0]
    # artefact reasons next to many hard ones: the bound is 0, which proves nothing (not A2)
    ev = evidence(buckets=FLAT, reasons=HARD)
    assert diagnose(ev).cause(ARTEFACT).rule == "A6"


def test_repro_evidence_feeds_trend_and_at_one():
    from exporter.oncall.repro_report import Arm, ArmResult, LevelResult, ReproReport

    report = ReproReport(
        [
            ArmResult(
                Arm("bf16", "http://b"),
                [
                    LevelResult(1, 150, 0),
                    LevelResult(64, 150, 25, reasons=Counter(orphan_closer=25)),
                ],
            )
        ]
    )
    ev = Evidence(repro=report.to_json())
    ev.deployment = Deployment("bf16", "legacy", True)
    ev.index_k = IndexK("test", probe_ranks=1, gated=0, ungated=50)
    diag = diagnose(ev)
    assert diag.cause(RACE).rule == "R2"
    assert any("repro arm bf16" in e for e in diag.cause(RACE).evidence)
    assert diag.facts.at_one[0].origin == "repro arm bf16 at 1"


# Modules that do I/O (HTTP clients, servers, sockets, the event loop, the exporter).
IO_MODULES = (
    "aiohttp",
    "urllib.request",
    "http.client",
    "socket",
    "asyncio",
    "prometheus_client",
    "fastapi",
    "uvicorn",
)


def test_diagnosis_is_pure_imports_nothing_that_does_io():
    """diagnosis.py (and the evidence model, repro report types it reads) imports with every
    I/O module made unimportable: a regression that pulls in the aiohttp runner or the HTTP
    collection fails here, in a fresh interpreter so nothing is already imported."""
    import subprocess
    import sys

    blocked = ", ".join(repr(m) for m in IO_MODULES)
    code = (
        "import sys\n"
        f"for name in ({blocked},):\n"
        "    sys.modules[name] = None\n"
        "import exporter.oncall.triage.diagnosis\n"
        "import exporter.oncall.triage.evidence\n"
        "import exporter.oncall.repro_report\n"
        "print('pure')\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "pure"
    # ... and the same check does catch a module that needs aiohttp
    bad = code.replace("exporter.oncall.repro_report", "exporter.oncall.repro")
    run = subprocess.run([sys.executable, "-c", bad], capture_output=True, text=True, timeout=60)
    assert run.returncode != 0 and "halted; None in sys.modules" in run.stderr
