"""DSML grader throughput: well-formed 4 KiB samples, streaming, SSE, and adversarial inputs.

Every figure is measured in the same run as two references over the same bytes: ``str.count``
of the DSML marker and one compiled-regex tokenizer pass (``finditer`` over tag openings and
closings), as in the reference measurements. Repeats are interleaved and the median is kept.
The inputs come from the test corpus builders (``tests/dsml``): clean, varied, multilingual
tool-call outputs, and the shapes that made lazy-regex graders quadratic.
"""

from __future__ import annotations

import gc
import os
import random
import re
import statistics
import time
from collections.abc import Callable
from typing import Any

from exporter.dsml import (
    KERNEL,
    StreamingGrader,
    StreamingResponseGrader,
    ToolSet,
    accel,
    grade_openai_response,
    grade_text,
)
from exporter.dsml import markers as m
from exporter.dsml.quoting import Quoting
from tests.dsml.adversarial import SHAPES
from tests.dsml.fp_corpus import PROSE, corpus
from tests.dsml.fp_corpus import TOOLS as TOOL_OBJECTS

TOOLS = ToolSet.from_any(TOOL_OBJECTS)  # built once per request, as the sidecar should

SAMPLE_BYTES = 4096
TOKENIZER = re.compile(f"</?{m.BAR}DSML{m.BAR}[a-z_]+")


def samples(n: int, seed: int = 11, *, languages: int = 2) -> list[str]:
    """Clean outputs of about 4 KiB: a corpus call with reasoning paragraphs before it, drawn
    from English and ``languages - 1`` other languages (an answer is rarely in more)."""
    rng = random.Random(seed)
    calls = [c for c in corpus() if c.label.startswith("call-v4-")]
    others = sorted(set(PROSE) - {"en"})
    out = []
    for _ in range(n):
        base = rng.choice(calls).text or ""
        body = base.split("</think>")[-1]
        langs = ["en", *rng.sample(others, languages - 1)]
        paragraphs = [p for lang in langs for p in PROSE[lang]]
        reasoning: list[str] = []
        pool = rng.sample(paragraphs, len(paragraphs))
        step = 0
        while len(("\n\n".join(reasoning) + body).encode()) < SAMPLE_BYTES - 8:
            if pool:
                reasoning.append(pool.pop())
            else:  # distinct filler lines once the paragraphs run out
                step += 1
                reasoning.append(f"Step {step}: check item {step * 7 % 13}, note result {step}.")
        out.append("\n\n".join(reasoning) + "</think>" + body)
    return out


def sse_body(text: str) -> bytes:
    """The same completion as a streamed chat completion (reasoning, content, one call)."""
    import json

    reasoning, _, rest = text.partition("</think>")
    chunks = [
        {"choices": [{"index": 0, "delta": {"reasoning_content": reasoning[i : i + 24]}}]}
        for i in range(0, len(reasoning), 24)
    ]
    chunks += [
        {"choices": [{"index": 0, "delta": {"content": rest[i : i + 24]}}]}
        for i in range(0, len(rest), 24)
    ]
    chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    return "".join(f"data: {json.dumps(c, ensure_ascii=False)}\n\n" for c in chunks).encode() + (
        b"data: [DONE]\n\n"
    )


_KERNELS = {
    "c": "the C accelerator of the text checks, the canonical-block pass and the screens of "
    "the per-sample checks (`exporter/dsml/_textscan.c`); the grammar is Python",
    "python": "the pure-Python twin (the accelerator is not built here)",
}


def _in_python(fn: Callable[[Any], object]) -> Callable[[Any], object]:
    """``fn`` with the accelerated passes (text checks, canonical block) run by their Python
    twins (``exporter.dsml.accel``): what a sidecar installed without a compiler does."""

    def run(item: Any) -> object:
        saved = accel.kernel()
        accel.select("python")
        try:
            return fn(item)
        finally:
            accel.select(saved)

    return run


def _stream(text: str) -> None:
    data = text.encode()
    g = StreamingGrader(tools=TOOLS)
    for i in range(0, len(data), 64):
        g.feed(data[i : i + 64])
    g.finish("stop")


def _sse(body: bytes) -> None:
    g = StreamingResponseGrader(tools=TOOLS)
    for i in range(0, len(body), 512):
        g.feed(body[i : i + 512])
    g.finish()


def _time_each(fn: Callable[[Any], object], items: list[Any]) -> tuple[list[float], float]:
    """CPU seconds per item (thread time: other jobs on this shared machine do not count), and
    the wall-clock seconds of the whole pass."""
    out = []
    wall = time.perf_counter()
    for item in items:
        t0 = time.thread_time()
        fn(item)
        out.append(time.thread_time() - t0)
    return out, time.perf_counter() - wall


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(quick: bool) -> str:
    n = 150 if quick else 600
    repeats = 3
    texts = samples(n)
    bodies = [sse_body(t) for t in texts]
    # As the sidecar does after start-up (exporter/app.py): the inputs and modules built so far
    # leave the collector's view, so generation-2 passes do not rescan them mid-measurement.
    gc.freeze()
    mb = sum(len(t.encode()) for t in texts) / 1e6
    sse_mb = sum(len(b) for b in bodies) / 1e6
    # Items are texts or SSE bodies, by method: the timing loop is indifferent to which.
    methods: dict[str, tuple[Callable[[Any], object], list[Any], float]] = {
        "str.count of the marker (reference)": (lambda t: t.count(m.MARKER), texts, mb),
        "regex tokenizer pass (reference)": (
            lambda t: sum(1 for _ in TOKENIZER.finditer(t)),
            texts,
            mb,
        ),
        "grade_text (ToolSet with schemas)": (
            lambda t: grade_text(t, tools=TOOLS, finish_reason="stop"),
            texts,
            mb,
        ),
        "grade_text (ToolSet), all in Python (the reference)": (
            _in_python(lambda t: grade_text(t, tools=TOOLS, finish_reason="stop")),
            texts,
            mb,
        ),
        "grade_text (no tools)": (lambda t: grade_text(t, finish_reason="stop"), texts, mb),
        "StreamingGrader, 64-byte chunks": (_stream, texts, mb),
        "grade_openai_response, SSE bytes": (
            lambda b: grade_openai_response(b, tools=TOOLS),
            bodies,
            sse_mb,
        ),
        "StreamingResponseGrader, 512-byte reads": (_sse, bodies, sse_mb),
    }
    runs: dict[str, list[tuple[list[float], float]]] = {k: [] for k in methods}
    for _ in range(repeats):  # interleaved: each repeat runs every method once
        for name, (fn, items, _) in methods.items():
            runs[name].append(_time_each(fn, items))
    results = {}
    for name, per_repeat in runs.items():
        totals = [sum(r) for r, _ in per_repeat]
        median_idx = totals.index(statistics.median_low(totals))
        per, wall = per_repeat[median_idx]
        results[name] = (totals[median_idx], per, wall)
    count_total = results["str.count of the marker (reference)"][0]
    multi = samples(n // 3, seed=12, languages=5)
    multi_cpu = sum(_time_each(lambda t: grade_text(t, finish_reason="stop"), multi)[0])
    multi_mb = sum(len(t.encode()) for t in multi) / 1e6
    regex_total = results["regex tokenizer pass (reference)"][0]
    verdicts = {grade_text(t, tools=TOOLS, finish_reason="stop").verdict for t in texts}
    lines = [
        "## DSML grader (`bench/bench_dsml.py`)",
        "",
        f"{n} clean tool-call outputs of ~4 KiB each ({mb:.1f} MB; multilingual reasoning, code "
        f"and JSON values, v4 blocks; all graded {', '.join(sorted(verdicts))}), "
        f"median of {repeats} interleaved repeats, one core. MB/s and latencies are CPU time of "
        "the grading thread (this 2-core machine is shared; wall-clock MB/s alongside); "
        "`gc.freeze()` after building the inputs, as the sidecar does after start-up. Hot "
        f'passes: {_KERNELS[KERNEL]}; the row "all in Python" runs the Python twins instead '
        "(same results: `tests/dsml/test_textscan.py`, and the whole DSML suite runs on both).",
        "",
        "| method | MB/s (CPU) | MB/s (wall) | p50 µs / sample | p99 µs / sample "
        "| time vs str.count | vs regex pass |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, (_fn, _items, size) in methods.items():
        total, per, wall = results[name]
        lines.append(
            f"| {name} | {size / total:,.1f} | {size / wall:,.1f} | {_pct(per, 0.5) * 1e6:,.0f} | "
            f"{_pct(per, 0.99) * 1e6:,.0f} | {total / count_total:,.0f}x | "
            f"{total / regex_total:,.1f}x |"
        )
    lines += [
        "",
        f"Harder clean text: reasoning mixing five languages and scripts per sample (the script "
        f"and mojibake screens pass, exact passes run): grade_text {multi_mb / multi_cpu:,.1f} "
        "MB/s (CPU).",
        "",
        _versus_detector(quick, texts, mb / results["grade_text (ToolSet with schemas)"][0]),
        "",
        _adversarial(quick),
        "",
        _linearity(quick),
    ]
    return "\n".join(lines)


def _versus_detector(quick: bool, texts: list[str], throughput: float) -> str:
    """The grader against SGLang 0.5.23's own DeepSeek detector parse, same bytes, one run.

    The detector's work per response is what ``FunctionCallParser.parse_non_stream`` does:
    a new detector, ``has_tool_call``, ``detect_and_parse`` with the request's tools. Both get
    the whole raw text (the detector finds no DSML in clean reasoning, so its result is the
    one it gives on content alone). Both are timed item by item, alternating, so load from
    other jobs on a shared machine weighs on both alike; the ratio is the median of the repeats'
    ratios, shown with their range."""
    from tests.dsml import sglang_oracle as oracle
    from tests.dsml.diff_corpus import TOOLS as DIFF_TOOLS
    from tests.dsml.diff_corpus import build

    detectors = oracle.load()
    corpus = build(clean_per_dialect=100 if quick else 300)
    gc.freeze()  # the corpus is long-lived, as the sidecar's start-up state is
    diff_tools, diff_toolset = oracle.tools_of(DIFF_TOOLS), ToolSet.from_any(DIFF_TOOLS)
    bench_tools = oracle.tools_of(TOOL_OBJECTS)
    sets = {
        "clean ~4 KiB outputs (v4, multilingual reasoning)": [
            (t, "v4", "stop", bench_tools, TOOLS) for t in texts
        ],
        "differential corpus, clean (3 dialects, 0.1-2 KiB)": [
            (i.text, i.dialect, i.finish_reason, diff_tools, diff_toolset)
            for i in corpus
            if i.op == "clean"
        ],
        "differential corpus, damaged (12 damage classes)": [
            (i.text, i.dialect, i.finish_reason, diff_tools, diff_toolset)
            for i in corpus
            if i.op != "clean"
        ],
    }

    def detector(item: tuple) -> None:
        text, dialect, _finish, sg_tools, _ts = item
        det = detectors[dialect]()
        det.has_tool_call(text)
        det.detect_and_parse(text, sg_tools)

    def grader(item: tuple) -> None:
        text, dialect, finish, _sg, toolset = item
        grade_text(text, grammar=dialect, finish_reason=finish, tools=toolset)

    repeats = 3 if quick else 5
    load = os.getloadavg()[0]
    lines = [
        "Against SGLang's own parser, same inputs, one run (SGLang 0.5.23 "
        "`DeepSeekV32/V4/V41Detector`: new detector + `has_tool_call` + `detect_and_parse` with "
        f"the request's tools, i.e. `parse_non_stream`; both timed item by item, alternating; "
        f"median of {repeats} repeats, "
        "CPU time; the grader also checks reasoning, text and schemas; load average "
        f"{load:.1f} on {os.cpu_count()} cores when this table started, so the machine was "
        f"{'shared and loaded' if load >= 1 else 'quiet'}):",
        "",
        "| inputs | items | MB | SGLang detector MB/s | grader MB/s "
        "| grader speed / detector (range over repeats) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    ratios: list[float] = []
    speeds: list[float] = []
    for name, items in sets.items():
        size = sum(len(it[0].encode()) for it in items) / 1e6
        det_t, gr_t = [], []
        for _ in range(repeats):
            d_sum, g_sum = _paired(detector, grader, items)
            det_t.append(d_sum)
            gr_t.append(g_sum)
        d, g = statistics.median(det_t), statistics.median(gr_t)
        # each repeat's ratio compares times taken item by item, side by side, so a burst of
        # load from other jobs weighs on both; the median of those ratios is reported
        per_repeat = sorted(a / b for a, b in zip(det_t, gr_t, strict=True))
        ratio = statistics.median(per_repeat)
        ratios.append(ratio)
        speeds.append(size / g)
        lines.append(
            f"| {name} | {len(items)} | {size:.2f} | {size / d:,.1f} | {size / g:,.1f} | "
            f"{ratio:.2f}x ({per_repeat[0]:.2f}-{per_repeat[-1]:.2f}) |"
        )
    # what the accelerator buys where the state machine runs: the damaged set, all in Python
    damaged = sets["differential corpus, damaged (12 damage classes)"]
    ref_ratios = sorted(
        a / b for a, b in (_paired(detector, _in_python(grader), damaged) for _ in range(repeats))
    )
    lines.append(
        f"| damaged again, grader all in Python (the reference) | {len(damaged)} | | | | "
        f"{statistics.median(ref_ratios):.2f}x ({ref_ratios[0]:.2f}-{ref_ratios[-1]:.2f}) |"
    )
    # issue 32's aim: at least the detector's speed on clean items, 0.7x on damaged ones
    aims = [0.7 if "damaged" in name else 1.0 for name in sets]
    met = all(r >= a for r, a in zip(ratios, aims, strict=True))
    each = "; ".join(
        f"{name.split(' (')[0]}: {r:.3f}x against {a:g}x ({'met' if r >= a else 'not met'})"
        for name, r, a in zip(sets, ratios, aims, strict=True)
    )
    lines += [
        "",
        "Aim (issue 32): at least the detector's speed on clean items, and 0.7x on damaged ones: "
        f"{'met' if met else 'not met'} in this run. Per set: {each}. Throughput on "
        f"clean 4 KiB outputs: {throughput:.1f} MB/s (grade_text with schemas in the first "
        "table, interleaved with its references). Alternating item by item with the detector, "
        f"as in this table, the grader made {speeds[0]:.1f} MB/s: the two share the caches, and "
        "this shared machine's speed drifts between phases of a run (the detector's own MB/s "
        "moves with it from run to run), so the ratios, measured side by side, are the "
        "comparison. The detector looks for its block and "
        "parses it, and stops at the first thing its regex does not match; the grader also runs "
        "the text checks (loops, salads, scripts, leaks) over reasoning and content, the schema "
        "checks, and on damaged input the state machine, which reads the whole channel to say "
        "what is wrong (in Python; the last row also runs the text checks in Python).",
    ]
    return "\n".join(lines)


def _paired(
    first: Callable[[tuple], object], second: Callable[[tuple], object], items: list
) -> tuple[float, float]:
    """CPU seconds of ``first`` and of ``second`` over ``items``, alternating item by item."""
    a = b = 0.0
    clock = time.thread_time
    for item in items:
        t0 = clock()
        first(item)
        t1 = clock()
        second(item)
        t2 = clock()
        a += t1 - t0
        b += t2 - t1
    return a, b


def _adversarial(quick: bool) -> str:
    size = 256_000 if quick else 1_000_000
    lines = [
        f"Adversarial inputs, {size / 1e6:g} MB each (shapes that made lazy-regex graders "
        "quadratic or cubic), CPU time, best of 3:",
        "",
        "| shape | MB/s | ms | verdict |",
        "|---|---:|---:|---|",
    ]
    for name, build in SHAPES.items():
        text = build(size)
        best = min(_once(text) for _ in range(3))
        verdict = grade_text(text).verdict
        lines.append(
            f"| {name} | {len(text.encode()) / best / 1e6:,.1f} | {best * 1e3:,.0f} | {verdict} |"
        )
    big = 2_000_000 if quick else 10_000_000
    text = SHAPES["repeated invoke openers"](big)
    seconds = min(_once(text) for _ in range(2))
    lines += [
        "",
        f'Pathological input of {big / 1e6:g} MB (`<｜DSML｜invoke name="` repeated, the shape '
        f"of the reference's cubic case): graded in **{seconds:.2f} s**.",
    ]
    return "\n".join(lines)


def _once(text: str) -> float:
    t0 = time.thread_time()
    grade_text(text, finish_reason="stop")
    return time.thread_time() - t0


def _linearity(quick: bool) -> str:
    """How cost grows with input size, per shape (was a timing test; tests/dsml now counts
    calls instead, tests/dsml/opcount.py): the grader at 4x the input, the accelerator's scan
    and its Python twin at 4x, and Quoting queries on one long line."""
    small = 100_000 if quick else 250_000
    lines = [
        f"Linearity: CPU time at {small / 1e6:g} MB and at 4x that, best of 3; linear is about "
        "4x, quadratic 16x (tests/dsml/test_linear_time.py counts calls on the same shapes):",
        "",
        "| what | shape | ms (1x) | ms (4x) | ratio |",
        "|---|---|---:|---:|---:|",
    ]

    def row(what: str, shape: str, run: Callable[[str], object], make: Callable[[int], str]):
        a, b = make(small), make(4 * small)
        t_a = min(_cpu(lambda: run(a)) for _ in range(3))
        t_b = min(_cpu(lambda: run(b)) for _ in range(3))
        lines.append(
            f"| {what} | {shape} | {t_a * 1e3:,.1f} | {t_b * 1e3:,.1f} | "
            f"{t_b / max(t_a, 1e-6):.1f}x |"
        )

    for name, build in SHAPES.items():
        row("grade_text", name, lambda text: grade_text(text, finish_reason="stop"), build)
    python_scan = _in_python(lambda text: grade_text(text, finish_reason="stop"))
    for name in ("repeated invoke openers", "damaged markers", "angle soup", "random unicode"):
        row("grade_text, all in Python", name, python_scan, SHAPES[name])

    def quoting(line: str) -> object:
        q = Quoting(line)
        return sum(q.covers(i) for i in range(4, len(line), 8))

    row(
        "Quoting.covers every 8th offset",
        "`x` <y> repeated",
        quoting,
        lambda n: "`x` <y> " * (n // 8),
    )
    return "\n".join(lines)


def _cpu(fn: Callable[[], object]) -> float:
    t0 = time.thread_time()
    fn()
    return time.thread_time() - t0
