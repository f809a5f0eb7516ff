"""Run the differential against one vLLM release: every corpus item through vLLM's own parsers
and through the grader with the deployment's dialect and engine.

``python -m tests.dsml.vllm_differential <version>`` prints one JSON summary. It runs in its own
process (the parsers are imported with stand-in package modules, one release per process): the
test in ``test_vllm_differential.py`` starts one per release and checks the figures.

The corpus is the SGLang differential's (:mod:`tests.dsml.diff_corpus`) in the dialects vLLM
has a parser for (``deepseek_v32``, ``deepseek_v4``). Unlike the SGLang differential, which
compares a damaged item's parse with its clean original's, the reference here is the *intent*:
the prose and the calls the clean item was rendered from. An item *harms the client* when
vLLM's non-streaming or streaming view differs from that intent, so a well-formed block that
vLLM's parser misreads (a clean item) counts as harm too and must be flagged.
"""

from __future__ import annotations

import json
import random
import sys
from collections import Counter, defaultdict
from typing import Any

from exporter.dsml import NO_TOOL_CALL, WELL_FORMED, ToolSet, grade_openai_response, grade_text
from exporter.dsml import markers as m
from exporter.dsml.dialect import resolve_dialect
from exporter.dsml.engines import qualify
from exporter.sim import vllm as sim_vllm
from tests.dsml import vllm_oracle as oracle
from tests.dsml.diff_corpus import TOOLS, Item, build, signalled
from tests.dsml.differential import completion_of

OK_VERDICTS = (WELL_FORMED, NO_TOOL_CALL)
ENGINE = "vllm"


def intent(item: Item) -> oracle.View:
    """What the model meant: the clean original's prose and calls."""
    clean = item.clean or item
    content = oracle.generated_text(clean.content)
    at = content.find(f"<{m.BAR}DSML{m.BAR}")
    prose = content if at < 0 else content[:at]
    calls = tuple(
        (name, json.dumps(args, sort_keys=True, ensure_ascii=False)) for name, args in clean.calls
    )
    return oracle.View(prose.strip(), calls)


def _simulated(item: Item) -> oracle.View:
    """What the simulator posing as vLLM (exporter.sim.vllm) sends for the same raw text."""
    msg, _ = sim_vllm.message(item.text, item.thinking, TOOLS, "call")
    calls = tuple(
        (c["function"]["name"], oracle.canonical_args(c["function"]["arguments"]))
        for c in msg.get("tool_calls", [])
    )
    return oracle.View((msg.get("content") or "").strip(), calls)


def run(items: list[Item]) -> dict[str, Any]:
    tools = oracle.tools_of(TOOLS)
    toolset = ToolSet.from_any(TOOLS)
    rows: list[dict[str, Any]] = []
    for item in items:
        if item.dialect not in oracle.PARSERS:
            continue
        rng = random.Random(item.key)
        sizes = [rng.randint(1, 12) for _ in range(16)]
        ns = oracle.non_streaming(item.dialect, item.text, tools, item.thinking)
        st = oracle.streaming(item.dialect, item.text, tools, item.thinking, sizes)
        want = intent(item)
        sim = _simulated(item)
        # The dialect as the sidecar resolves it from what vLLM is started with (its
        # --tool-call-parser name), not from the corpus label.
        dialect, how = resolve_dialect("auto", oracle.PARSERS[item.dialect], None, ENGINE)
        assert how == "tool_call_parser" and dialect == qualify(item.dialect, ENGINE), dialect
        res = grade_text(
            item.text,
            grammar=dialect,
            finish_reason=item.finish_reason,
            tools=toolset,
            thinking=item.thinking,
        )
        client = grade_openai_response(
            completion_of(item, ns), grammar=dialect, tools=toolset, thinking=None
        )
        streamed = grade_openai_response(
            completion_of(item, st), grammar=dialect, tools=toolset, thinking=None
        )
        rows.append(
            {
                "key": item.key,
                "dialect": item.dialect,
                "op": item.op,
                "verdict": res.verdict,
                "reasons": list(res.reasons),
                "client_verdict": client.verdict,
                "client_stream_verdict": streamed.verdict,
                # the simulator is a V4 model restating one release's parser
                "sim_compared": item.dialect == "v4" and oracle.load_version() == sim_vllm.VERSION,
                "sim_matches": sim == ns,
                "harm_ns": ns != want,
                "harm_stream": st != want,
                "vllm_ns": [ns.content[:80], [list(c) for c in ns.calls]],
                "vllm_stream": [st.content[:80], [list(c) for c in st.calls]],
            }
        )
    return summarize(rows)


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    harmful = [r for r in rows if r["harm_ns"] or r["harm_stream"]]
    faithful = [r for r in rows if not (r["harm_ns"] or r["harm_stream"])]
    clean = [r for r in faithful if r["op"] == "clean"]
    by_op: dict[str, Counter[str]] = defaultdict(Counter)
    for r in rows:
        harm = r["harm_ns"] or r["harm_stream"]
        flagged = r["verdict"] not in OK_VERDICTS
        by_op[r["op"]][f"{'harm' if harm else 'same'}/{'flagged' if flagged else 'passed'}"] += 1
    stricter = [r for r in faithful if r["op"] != "clean" and r["verdict"] not in OK_VERDICTS]
    return {
        "version": oracle.load_version(),
        "items": len(rows),
        "clean_by_dialect": dict(Counter(r["dialect"] for r in rows if r["op"] == "clean")),
        "clean_faithful": len(clean),
        "clean_flagged": [r for r in clean if r["verdict"] not in OK_VERDICTS],
        "clean_harmed_by_vllm": sum(1 for r in harmful if r["op"] == "clean"),
        "harmful": len(harmful),
        "harm_ns_only": sum(1 for r in harmful if not r["harm_stream"]),
        "harm_stream_only": sum(1 for r in harmful if not r["harm_ns"]),
        "missed": [
            r for r in harmful if r["verdict"] in OK_VERDICTS and not signalled(r["reasons"])
        ],
        "signalled_by_op": dict(
            Counter(
                r["op"] for r in harmful if r["verdict"] in OK_VERDICTS and signalled(r["reasons"])
            )
        ),
        "client_view_clean_flagged": sum(
            1 for r in clean if r["client_verdict"] not in OK_VERDICTS
        ),
        "client_stream_view_clean_flagged": sum(
            1 for r in clean if r["client_stream_verdict"] not in OK_VERDICTS
        ),
        "stricter_by_op": dict(Counter(r["op"] for r in stricter)),
        "simulator_compared": sum(1 for r in rows if r["sim_compared"]),
        "simulator_mismatch": [
            r["key"] for r in rows if r["sim_compared"] and not r["sim_matches"]
        ],
        "by_op": {k: dict(v) for k, v in sorted(by_op.items())},
    }


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    version = args[0] if args else oracle.RELEASES[-1]
    oracle.load(version)
    json.dump(run(build(20261201, 300)), sys.stdout, ensure_ascii=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
