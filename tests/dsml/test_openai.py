"""Reassembling OpenAI-shaped responses into channels, and grading what the server returned."""

from __future__ import annotations

import json

import pytest

from exporter.dsml import (
    Assembler,
    StreamingResponseGrader,
    grade_openai_response,
    reassemble,
    render_completion,
)
from tests.dsml.builders import openai_message, tool

TOOLS = [tool("read_file", ("path",), path="string"), tool("ls", ())]


def chunks(
    reasoning: str = "", content: str = "", calls: list[tuple[str, str]] = (), finish="tool_calls"
) -> list[dict]:
    """Stream pieces the way servers do: text in small deltas, tool calls by index."""
    out: list[dict] = []

    def add(delta: dict, finish_reason: str | None = None) -> None:
        out.append(
            {
                "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
            }
        )

    add({"role": "assistant"})
    for i in range(0, len(reasoning), 5):
        add({"reasoning_content": reasoning[i : i + 5]})
    for i in range(0, len(content), 7):
        add({"content": content[i : i + 7]})
    for idx, (name, args) in enumerate(calls):
        add(
            {
                "tool_calls": [
                    {
                        "index": idx,
                        "id": f"c{idx}",
                        "type": "function",
                        "function": {"name": name, "arguments": ""},
                    }
                ]
            }
        )
        for i in range(0, len(args), 4):
            add({"tool_calls": [{"index": idx, "function": {"arguments": args[i : i + 4]}}]})
    add({}, finish)
    return out


def sse(objs: list[dict], *, crlf: bool = False, comments: bool = True) -> bytes:
    nl = "\r\n" if crlf else "\n"
    parts = [f": keep-alive{nl}{nl}"] if comments else []
    parts += [f"data: {json.dumps(o, ensure_ascii=False)}{nl}{nl}" for o in objs]
    parts.append(f"data: [DONE]{nl}{nl}")
    return "".join(parts).encode()


STREAM = chunks("I should read it.", "Reading 配置.", [("read_file", '{"path": "a.py"}')])


def test_reassemble_chunk_objects() -> None:
    asm = reassemble(STREAM)
    assert asm.reasoning == "I should read it."
    assert asm.content == "Reading 配置."
    assert [(c.name, c.arguments) for c in asm.calls] == [("read_file", '{"path": "a.py"}')]
    assert asm.finish_reason == "tool_calls"
    assert asm.error is None


@pytest.mark.parametrize("crlf", [False, True])
def test_raw_sse_equals_chunk_objects(crlf: bool) -> None:
    assert reassemble(sse(STREAM, crlf=crlf)) == reassemble(STREAM)


def test_sse_split_anywhere_equals_whole() -> None:
    body = sse(STREAM)
    whole = grade_openai_response(body, tools=TOOLS)
    assert whole.verdict == "well_formed"
    for step in (1, 3, 17, 64):
        grader = StreamingResponseGrader(tools=TOOLS)
        for i in range(0, len(body), step):
            grader.feed(body[i : i + step])
        assert grader.done
        assert grader.finish() == whole


def test_stream_without_done_or_final_blank_line() -> None:
    body = sse(STREAM).replace(b"data: [DONE]\n\n", b"").rstrip(b"\n")
    assert reassemble(body) == reassemble(STREAM)


def test_chat_completion_channels_and_offsets() -> None:
    resp = openai_message("Let me look.", "Plan: read.", [("read_file", {"path": "a.py"})])
    result = grade_openai_response(resp, tools=TOOLS)
    assert result.verdict == "well_formed"
    assert result.text == 'Plan: read.Let me look.read_file{"path": "a.py"}'
    assert [(c.channel, result.text[c.start : c.end]) for c in result.channels] == [
        ("reasoning", "Plan: read."),
        ("content", "Let me look."),
        ("tool_calls", 'read_file{"path": "a.py"}'),
    ]
    (call,) = result.calls
    assert (call.name, call.arguments) == ("read_file", {"path": "a.py"})


def test_arguments_given_as_object_and_completions_text() -> None:
    resp = openai_message("", tool_calls=[("ls", {})])
    resp["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = {}
    assert grade_openai_response(resp, tools=TOOLS).verdict == "well_formed"
    text = render_completion("ok", [("ls", {})])
    legacy = {"object": "text_completion", "choices": [{"index": 0, "text": text}]}
    assert grade_openai_response(legacy).verdict == "well_formed"


def test_choice_selection_and_content_parts() -> None:
    resp = {
        "choices": [
            {"index": 0, "message": {"content": "first"}, "finish_reason": "stop"},
            {
                "index": 1,
                "message": {"content": [{"type": "text", "text": "sec"}, {"text": "ond"}]},
            },
        ]
    }
    assert reassemble(resp).content == "first"
    assert reassemble(resp, choice=1).content == "second"


def test_thinking_without_reasoning_parser_splits_content() -> None:
    raw = render_completion("Reading.", [("read_file", {"path": "a"})], reasoning="I should read.")
    resp = openai_message(raw)
    assert "think_tag_leak" in grade_openai_response(resp).reasons
    split = grade_openai_response(resp, thinking=True)
    assert split.verdict == "well_formed"
    assert [c.channel for c in split.channels][:2] == ["reasoning", "content"]


def test_length_cut_arguments_are_truncation_not_corruption() -> None:
    cut = chunks("", "Writing.", [("read_file", '{"path": "a very long')], finish="length")
    result = grade_openai_response(cut, tools=TOOLS)
    assert result.verdict == "truncated"
    assert "length_in_block" in result.reasons
    assert "json_invalid" not in result.reasons


def test_damaged_block_in_content_is_corruption_not_config() -> None:
    raw = render_completion("x", [("read_file", {"path": "a"})]).replace(
        "tool_calls>", "toolcalls>"
    )
    result = grade_openai_response(openai_message(raw))
    assert result.verdict == "degenerate"
    assert "tag_unknown" in result.reasons
    assert "unparsed_block" not in result.reasons


def test_dsml_and_special_tokens_inside_parsed_arguments() -> None:
    leaked = '{"path": "a.py</\uff5cDSML\uff5cparameter>"}'
    result = grade_openai_response(openai_message("", tool_calls=[("read_file", leaked)]))
    assert "nested_tag" in result.reasons
    escaped_nul = '{"path": "a\\u0000b"}'
    result = grade_openai_response(openai_message("", tool_calls=[("read_file", escaped_nul)]))
    assert "control_chars" in result.reasons


def test_oversized_channels_are_cut_per_channel() -> None:
    long = " ".join(f"w{i}" for i in range(3000))
    resp = openai_message(long, reasoning=long)
    result = grade_openai_response(resp, max_chars=2000)
    assert result.verdict == "no_tool_call"
    assert [r for r in result.reasons] == ["oversized"]
    assert len(result.cuts) == 2
    assert len(result.text) == 4000


@pytest.mark.parametrize(
    "bad",
    [
        None,
        42,
        "text, not sse",
        b"",
        [],
        {},
        {"choices": "x"},
        {"error": {"message": "boom"}},
        b"event: ping\n\n",
        [1, 2],
        b"data: [1]\n\n",
    ],
)
def test_unreadable_inputs_give_error(bad: object) -> None:
    result = grade_openai_response(bad)
    assert result.verdict == "error"
    assert result.reasons == ("bad_input",)
    assert result.error


def test_assembler_ignores_other_choices_and_usage_chunks() -> None:
    asm = Assembler()
    asm.feed_chunk({"choices": [{"index": 1, "delta": {"content": "other"}}]})
    asm.feed_chunk({"choices": [], "usage": {"total_tokens": 3}})
    asm.feed_chunk({"choices": [{"index": 0, "delta": {"content": "mine"}}]})
    assert asm.result().content == "mine"


def test_unknown_grammar_is_an_error_result_not_an_exception() -> None:
    assert grade_openai_response(openai_message("hi"), grammar="v9").verdict == "error"


def test_grade_tool_calls_alone() -> None:
    from exporter.dsml import grade_tool_calls

    ok = grade_tool_calls(
        [("read_file", {"path": "a"}), {"name": "ls", "arguments": "{}"}], tools=TOOLS
    )
    assert ok.verdict == "well_formed"
    assert [c.name for c in ok.calls] == ["read_file", "ls"]
    bad = grade_tool_calls(
        [{"function": {"name": "read_file", "arguments": "{}"}}, ("rm", "{}"), ("ls", "not json")],
        tools=TOOLS,
    )
    assert {"args_empty_required", "tool_unknown", "json_invalid"} <= set(bad.reasons)
    assert grade_tool_calls("nope").verdict == "error"
    assert grade_tool_calls([42]).verdict == "error"


def _held(asm: Assembler) -> int:
    """Characters the assembler holds for the unfinished SSE line and event."""
    return sum(map(len, asm._line)) + sum(map(len, asm._data))


def test_an_sse_event_that_never_ends_is_dropped_at_the_cap() -> None:
    """Data lines with no blank line after them: held up to the cap, then the event is dropped
    and the stream graded as an error, never kept whole."""
    asm = Assembler(max_chars=1000)
    line = "data: " + "x" * 998 + "\n"
    for _ in range(20_000):
        asm.feed_sse(line)
        assert _held(asm) <= asm._held_cap
    assert asm.result().error == "an SSE event exceeds the size cap"


def test_an_sse_line_in_small_reads_is_held_in_pieces_and_capped() -> None:
    asm = Assembler(max_chars=1000)
    asm.feed_sse("data: ")
    for _ in range(10_000):
        asm.feed_sse("y" * 1024)
        assert _held(asm) <= asm._held_cap
    assert asm.result().error == "an SSE line exceeds the size cap"
    # a line split into pieces still reads as the line once it ends
    ok = Assembler()
    chunk = json.dumps({"choices": [{"index": 0, "delta": {"content": "hello"}}]})
    for ch in "data: " + chunk:
        ok.feed_sse(ch)
    ok.feed_sse("\n\n")
    assert ok.result().content == "hello" and ok.result().error is None


def test_a_streamed_tool_name_is_held_to_one_over_the_name_limit() -> None:
    from exporter.dsml.structure import MAX_NAME

    asm = Assembler()
    for _ in range(5_000):
        asm.feed_chunk(
            {
                "choices": [
                    {
                        "index": 0,
                        "delta": {"tool_calls": [{"index": 0, "function": {"name": "n" * 1000}}]},
                    }
                ]
            }
        )
    (call,) = asm.result().calls
    assert len(call.name) == MAX_NAME + 1  # still too long to pass the name check
