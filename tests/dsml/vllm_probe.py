"""Read one vLLM release's DSML semantics off its own parser: one probe per rule of
:class:`exporter.dsml.vllm_releases.VllmRules`, each a short output run through the release's
``deepseek_v32`` / ``deepseek_v4`` / ``deepseek_v41`` tool parser (non-streaming and streaming,
:mod:`tests.dsml.vllm_oracle`).

``python -m tests.dsml.vllm_probe <version>`` prints the observed rules as JSON (one release per
process, as the oracle imports the release once); ``test_vllm_releases.py`` compares them with
the table the grader uses.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from exporter.dsml import markers as m
from tests.dsml import vllm_oracle as oracle
from tests.dsml.diff_corpus import TOOLS
from tests.sglang_release import release_dir

PROSE = "Let me look."
# Block names a release might accept besides the dialect's own (V4.1 writes them spaced).
CANDIDATE_NAMES = {
    "v3.2": ("tool_calls", "toolcalls", "tool", "calls"),
    "v4": ("function_calls", "toolcalls", "tool", "calls"),
    "v4.1": ("tool_calls", "function_calls", "toolcalls", "tool"),
}


def _invoke(g: str, body: bool = True, flag: bool = True, path: str = "src") -> str:
    p = m.tag_prefix(g)
    attr = ' string="true"' if flag else ""
    param = f'<{p}{m.PARAMETER} name="path"{attr}>{path}</{p}{m.PARAMETER}>\n' if body else ""
    return f'<{p}{m.INVOKE} name="read_file">\n{param}</{p}{m.INVOKE}>'


def _path_of(invoke: str) -> object:
    """``path`` of the first call read_file the release delivers for a block holding
    ``invoke`` (non-streaming); None when there is none."""
    view = oracle.non_streaming("v4", _block("v4", invoke), oracle.tools_of(TOOLS), False)
    args = [json.loads(a) for n, a in view.calls if n == "read_file"]
    return args[0].get("path") if args else None


def _two_params_first_cut() -> str:
    """An invoke whose first parameter (``depth``) lost its closer's ``<``, then ``path``."""
    p = m.tag_prefix("v4")
    return (
        f'<{p}{m.INVOKE} name="read_file">\n'
        f'<{p}{m.PARAMETER} name="depth" string="false">2/{p}{m.PARAMETER}>\n'
        f'<{p}{m.PARAMETER} name="path" string="true">src</{p}{m.PARAMETER}>\n'
        f"</{p}{m.INVOKE}>"
    )


def _block(g: str, inner: str, name: str | None = None) -> str:
    p = m.tag_prefix(g)
    name = name or m.BLOCK_NAMES[g]
    return f"{PROSE}\n\n<{p}{name}>\n{inner}\n</{p}{name}>"


def _views(dialect: str, text: str) -> list[oracle.View]:
    tools = oracle.tools_of(TOOLS)
    return [
        oracle.non_streaming(dialect, text, tools, False),
        oracle.streaming(dialect, text, tools, False, [1, 3, 7]),
    ]


def _delivered(dialect: str, text: str) -> bool:
    """Both views carry read_file with path=src."""
    want = ("read_file", json.dumps({"path": "src"}))
    return all(want in v.calls for v in _views(dialect, text))


def opener_taken(dialect: str, name: str) -> bool:
    """The release reads ``<｜DSML｜NAME>`` as a block opener: the text after it is no longer
    content (no invoke follows, so a release that parses bare invokes does not confound it)."""
    p = m.tag_prefix(dialect)
    text = f"{PROSE}\n\n<{p}{name}>\nHidden words.\n</{p}{name}>"
    return all("Hidden words" not in v.content for v in _views(dialect, text))


def self_closing(dialect: str) -> str:
    p = m.tag_prefix(dialect)
    text = _block(dialect, f'<{p}{m.INVOKE} name="list_tasks"/>\n{_invoke(dialect)}')
    names = {c[0] for v in _views(dialect, text) for c in v.calls}
    if any(n.startswith('list_tasks"') for n in names):
        return "name_swallows"
    return "delivered" if "list_tasks" in names else "dropped"


def probe(version: str) -> dict[str, Any]:
    oracle.load(version)
    registry = (Path(release_dir(version, "vllm")) / "vllm/tool_parsers/__init__.py").read_text()
    served = oracle.parsers(version)
    tail = _views("v4", _block("v4", _invoke("v4")) + "\nTail words.")
    bare = f"{PROSE}\n{_invoke('v4')}\nMore prose."
    variants = sorted(
        [g, name] for g in served for name in CANDIDATE_NAMES[g] if opener_taken(g, name)
    )
    return {
        "version": version,
        "has_v41": '"deepseek_v41"' in registry,
        "self_closing": {g: self_closing(g) for g in served if g != "v3.2"},
        # [non-streaming, streaming]: is text after the block content?
        "after_block": ["Tail words" in v.content for v in tail],
        "opener_variants": variants,
        "invoke_outside_block": _delivered("v4", bare),
        # a block with no call in it: is the whole text content (non-streaming)?
        "unparsed_block_kept": "Hidden words"
        in oracle.non_streaming(
            "v4", _block("v4", "Hidden words."), oracle.tools_of(TOOLS), False
        ).content,
        "param_ends_at_next_param": _path_of(_two_params_first_cut()) == "src",
        # </think> inside a value: dropped (read as a reasoning marker) or the value's text
        "think_tags_anywhere": _path_of(_invoke("v4", path="a </think> b")) == "a  b",
        "missing_string_flag_kept": _delivered("v4", _block("v4", _invoke("v4", flag=False))),
    }


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    json.dump(probe(args[0]), sys.stdout, ensure_ascii=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
