"""Run the differential: every corpus item through SGLang's detectors and through the grader.

``python -m tests.dsml.differential [--rows FILE]`` prints one JSON summary. It runs in its own
process (the detectors are imported with stub package modules, one release per process): the
test in ``test_differential.py`` starts it and checks the figures.

For every item it records what SGLang returns to the client, non-streaming and streaming
(:mod:`tests.dsml.sglang_oracle`), and the grader's verdict on the raw text with the
deployment's dialect. A damaged item *harms the client* when either view differs from the view
of its clean original. *Flagged* means any verdict but ``well_formed`` / ``no_tool_call``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import Counter, defaultdict
from typing import Any

from exporter.dsml import NO_TOOL_CALL, WELL_FORMED, ToolSet, grade_openai_response, grade_text
from tests.dsml import sglang_oracle as oracle
from tests.dsml.diff_corpus import TOOLS, Item, build, signalled

OK_VERDICTS = (WELL_FORMED, NO_TOOL_CALL)


def views(item: Item, tools: list[Any]) -> tuple[oracle.View, oracle.View]:
    rng = random.Random(item.key)
    sizes = [rng.randint(1, 12) for _ in range(16)]
    content = item.content
    return (
        oracle.non_streaming(item.dialect, content, tools),
        oracle.streaming(item.dialect, content, tools, sizes),
    )


def completion_of(item: Item, view: oracle.View) -> dict[str, Any]:
    """The chat.completion SGLang sends for ``view`` (what the tap sees, non-streaming)."""
    message: dict[str, Any] = {"role": "assistant", "content": view.content or None}
    if item.thinking:
        message["reasoning_content"] = item.text[: len(item.text) - len(item.content)][:-8]
    if view.calls:
        message["tool_calls"] = [
            {"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": a}}
            for i, (n, a) in enumerate(view.calls)
        ]
    finish = "tool_calls" if view.calls and item.finish_reason != "length" else item.finish_reason
    return {
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
    }


def run(items: list[Item]) -> dict[str, Any]:
    oracle.load()
    sg_tools = oracle.tools_of(TOOLS)
    toolset = ToolSet.from_any(TOOLS)
    cache: dict[str, tuple[oracle.View, oracle.View]] = {}
    rows: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    for item in items:
        ns, st = views(item, sg_tools)
        if item.clean is None:
            cache[item.key] = (ns, st)
        res = grade_text(
            item.text,
            grammar=item.dialect,
            finish_reason=item.finish_reason,
            tools=toolset,
            thinking=item.thinking,
        )
        client = grade_openai_response(
            completion_of(item, ns), grammar=item.dialect, tools=toolset, thinking=None
        )
        streamed = grade_openai_response(
            completion_of(item, st), grammar=item.dialect, tools=toolset, thinking=None
        )
        row: dict[str, Any] = {
            "client_verdict": client.verdict,
            "client_stream_verdict": streamed.verdict,
            "key": item.key,
            "dialect": item.dialect,
            "op": item.op,
            "verdict": res.verdict,
            "reasons": list(res.reasons),
            "sglang_ns": [ns.content[:80], [list(c) for c in ns.calls]],
            "sglang_stream": [st.content[:80], [list(c) for c in st.calls]],
        }
        if item.clean is not None:
            cns, cst = cache[item.clean.key]
            row["harm_ns"] = ns != cns
            row["harm_stream"] = st != cst
        else:
            row["calls_match"] = [c.name for c in res.calls] == [n for n, _ in ns.calls]
        rows.append(row)
    return summarize(rows, time.perf_counter() - t0)


def summarize(rows: list[dict[str, Any]], seconds: float) -> dict[str, Any]:
    clean = [r for r in rows if r["op"] == "clean"]
    damaged = [r for r in rows if r["op"] != "clean"]
    harmful = [r for r in damaged if r["harm_ns"] or r["harm_stream"]]
    passed = [r for r in harmful if r["verdict"] in OK_VERDICTS]
    missed = [r for r in passed if not signalled(r["reasons"])]
    stricter = [r for r in damaged if r not in harmful and r["verdict"] not in OK_VERDICTS]
    by_op: dict[str, Counter[str]] = defaultdict(Counter)
    for r in damaged:
        harm = r["harm_ns"] or r["harm_stream"]
        flagged = r["verdict"] not in OK_VERDICTS
        by_op[r["op"]][f"{'harm' if harm else 'same'}/{'flagged' if flagged else 'passed'}"] += 1
    return {
        "seconds": round(seconds, 2),
        "items": len(rows),
        "clean": len(clean),
        "clean_by_dialect": dict(Counter(r["dialect"] for r in clean)),
        "clean_flagged": [r for r in clean if r["verdict"] not in OK_VERDICTS],
        "clean_calls_mismatch": [r for r in clean if not r["calls_match"]],
        "damaged": len(damaged),
        "harmful": len(harmful),
        "harm_ns_only": sum(1 for r in harmful if not r["harm_stream"]),
        "harm_stream_only": sum(1 for r in harmful if not r["harm_ns"]),
        "harmful_flagged": len(harmful) - len(passed),
        "harmful_signalled": len(passed) - len(missed),
        "signalled_by_op": dict(Counter(r["op"] for r in passed if signalled(r["reasons"]))),
        "missed": missed,
        "client_view_clean_flagged": sum(
            1 for r in clean if r["client_verdict"] not in OK_VERDICTS
        ),
        "client_view_harmful_flagged": sum(
            1 for r in harmful if r["client_verdict"] not in OK_VERDICTS
        ),
        "client_stream_view_clean_flagged": sum(
            1 for r in clean if r["client_stream_verdict"] not in OK_VERDICTS
        ),
        "client_stream_view_harmful_flagged": sum(
            1 for r in harmful if r["client_stream_verdict"] not in OK_VERDICTS
        ),
        "client_view_missed_by_op": dict(
            Counter(r["op"] for r in harmful if r["client_verdict"] in OK_VERDICTS)
        ),
        "stricter": len(stricter),
        "stricter_by_op": dict(Counter(r["op"] for r in stricter)),
        "stricter_reasons": dict(Counter(x for r in stricter for x in r["reasons"])),
        "by_op": {k: dict(v) for k, v in sorted(by_op.items())},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--clean-per-dialect", type=int, default=300)
    p.add_argument("--seed", type=int, default=20261201)
    args = p.parse_args(argv)
    items = build(args.seed, args.clean_per_dialect)
    json.dump(run(items), sys.stdout, ensure_ascii=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
