"""Run the differential against one vLLM release: every corpus item through vLLM's own parsers
and through the grader with the deployment's dialect and engine.

``python -m tests.dsml.vllm_differential <version>`` prints one JSON summary. It runs in its own
process (the parsers are imported with stand-in package modules, one release per process): the
test in ``test_vllm_differential.py`` starts one per release and checks the figures.

The corpus is the SGLang differential's (:mod:`tests.dsml.diff_corpus`) in the dialects the
release has a parser for (``deepseek_v32``, ``deepseek_v4``; ``deepseek_v41`` from 0.30), plus
hand-built cases (:data:`CASES`). Unlike the SGLang differential, which
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

from exporter.dsml import (
    NO_TOOL_CALL,
    WELL_FORMED,
    ToolSet,
    grade_openai_response,
    grade_text,
    render_completion,
)
from exporter.dsml import markers as m
from exporter.dsml.dialect import resolve_dialect
from exporter.dsml.engines import qualify
from exporter.sim import vllm as sim_vllm
from exporter.sim.generation import complete
from tests.dsml import vllm_oracle as oracle
from tests.dsml.builders import tool
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


def _simulated(
    text: str, thinking: bool, version: str, tools: list[dict[str, Any]] = TOOLS
) -> oracle.View:
    """What the simulator posing as vLLM ``version`` (exporter.sim.vllm) sends for the same
    raw text."""
    msg, _ = sim_vllm.message(text, thinking, tools, "call", version)
    calls = tuple(
        (c["function"]["name"], oracle.canonical_args(c["function"]["arguments"]))
        for c in msg.get("tool_calls", [])
    )
    return oracle.View((msg.get("content") or "").strip(), calls)


def run(items: list[Item]) -> dict[str, Any]:
    tools = oracle.tools_of(TOOLS)
    toolset = ToolSet.from_any(TOOLS)
    rows: list[dict[str, Any]] = []
    version = oracle.load_version()
    served = oracle.parsers(version)
    for item in items:
        if item.dialect not in served:
            continue
        rng = random.Random(item.key)
        sizes = [rng.randint(1, 12) for _ in range(16)]
        ns = oracle.non_streaming(item.dialect, item.text, tools, item.thinking)
        st = oracle.streaming(item.dialect, item.text, tools, item.thinking, sizes)
        want = intent(item)
        sim = _simulated(item.text, item.thinking, version)
        # The dialect as the sidecar resolves it from what vLLM is started with (its
        # --tool-call-parser name) and the release its /version reports, not from the corpus
        # label.
        dialect, how = resolve_dialect("auto", served[item.dialect], None, ENGINE, version)
        assert how == "tool_call_parser", how
        assert dialect == qualify(item.dialect, ENGINE, version), dialect
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
                # the simulator is a V4 model restating each release's parser
                "sim_compared": item.dialect == "v4",
                "sim_matches": sim == ns,
                "non_finite": any(f">{w}<" in item.text for w in _NON_FINITE),
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
        "harmful_by_dialect": dict(Counter(r["dialect"] for r in harmful)),
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
            r["key"]
            for r in rows
            if r["sim_compared"] and not r["sim_matches"] and not r["non_finite"]
        ],
        "simulator_mismatch_non_finite": [
            r["key"] for r in rows if r["sim_compared"] and not r["sim_matches"] and r["non_finite"]
        ],
        "by_op": {k: dict(v) for k, v in sorted(by_op.items())},
    }


_TWO = [("list_tasks", {}), ("read_file", {"path": "a"})]
_FENCE = "```"
_FENCED_INVOKE = (
    f"For example:\n{_FENCE}\n{m.invoke_open('read_file')}\n{m.INVOKE_CLOSE}\n{_FENCE}\nDone."
)
_FENCED_SELF_CLOSING = (
    f"With no arguments, write:\n{_FENCE}\n{m.invoke_self_closing('now')}\n{_FENCE}\nThat is all."
)


def _self_closing(grammar: str, calls: list[tuple[str, dict[str, Any]]]) -> str:
    return render_completion("", calls, grammar=grammar, self_closing=True)


# Hand-built cases (name, dialect, raw text, the intent's calls): issue 32's deepseek_v41 case
# (a self-closing invoke followed by another becomes one call whose name swallows the next tag),
# the same invoke last in the block, and 0.30+'s bare invoke quoted in prose (a call to 0.30+,
# content to 0.23-0.29).
CASES: tuple[tuple[str, str, str, list[tuple[str, dict[str, Any]]]], ...] = (
    ("v41_self_closing_then_invoke", "v4.1", _self_closing("v4.1", _TWO), _TWO),
    ("v41_self_closing_last", "v4.1", _self_closing("v4.1", _TWO[::-1]), _TWO[::-1]),
    ("v4_self_closing_then_invoke", "v4", _self_closing("v4", _TWO), _TWO),
    ("v4_fenced_bare_invoke", "v4", _FENCED_INVOKE, []),
    ("v4_fenced_self_closing", "v4", _FENCED_SELF_CLOSING, []),
)


def run_cases(version: str) -> list[dict[str, Any]]:
    """Each case through the release's parser (both views) and the grader in the dialect the
    sidecar resolves for it: harm (a view differs from the intent) and the verdict."""
    tools = oracle.tools_of(TOOLS)
    toolset = ToolSet.from_any(TOOLS)
    served = oracle.parsers(version)
    rows = []
    for name, dialect, text, calls in CASES:
        if dialect not in served:
            continue
        at = text.find("\n\n<｜DSML｜") if calls else -1
        want = oracle.View(
            (text if at < 0 else text[:at]).strip(),
            tuple((n, json.dumps(a, sort_keys=True)) for n, a in calls),
        )
        views = [
            oracle.non_streaming(dialect, text, tools, False),
            oracle.streaming(dialect, text, tools, False, [1, 4, 9]),
        ]
        grammar, _ = resolve_dialect("auto", served[dialect], None, ENGINE, version)
        res = grade_text(text, grammar=grammar, finish_reason="stop", tools=toolset)
        rows.append(
            {
                "case": name,
                "grammar": grammar,
                "harm": any(v != want for v in views),
                "verdict": res.verdict,
                "reasons": list(res.reasons),
                "vllm": [[v.content[:60], [list(c) for c in v.calls]] for v in views],
            }
        )
    return rows


_NON_FINITE = ("NaN", "Infinity", "-Infinity")
# The simulated model's requests: the tools its answers call (exporter/sim/generation.py's
# argument templates), typed as a client would declare them.
SIM_TOOLS = [
    tool("get_weather", ("city",), city="string", unit="string"),
    tool("search_web", ("query",), query="string", max_results="integer"),
    tool("run_shell", ("command",), command="string"),
    tool("read_file", ("path",), path="string", limit="integer"),
]


def run_simulated_model(version: str, answers: int = 600) -> dict[str, Any]:
    """The simulated model's own answers (clean and every corruption phenotype, with and
    without thinking) through the release's parser and through the simulator posing as it:
    the message the simulator sends must be the release's."""
    tools = oracle.tools_of(SIM_TOOLS)
    seen: Counter[str] = Counter()
    mismatch: list[str] = []
    for seed in range(answers):
        rng = random.Random(seed)
        thinking = seed % 2 == 0
        ask = [{"role": "user", "content": "check it"}]
        c = complete(rng, ask, SIM_TOOLS, 1.0 if seed % 3 else 0.0, thinking=thinking)
        phenotype = c.phenotype or "clean"
        seen[phenotype] += 1
        want = oracle.non_streaming("v4", c.raw, tools, thinking)
        if _simulated(c.raw, thinking, version, SIM_TOOLS) != want:
            mismatch.append(f"{seed}/{phenotype}")
    return {"phenotypes": dict(seen), "mismatch": mismatch}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    version = args[0] if args else oracle.RELEASES[-1]
    oracle.load(version)
    summary = run(build(20261201, 300))
    summary["cases"] = run_cases(version)
    summary["simulated_model"] = run_simulated_model(version)
    json.dump(summary, sys.stdout, ensure_ascii=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
