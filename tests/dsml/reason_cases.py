"""For every reason code: inputs that must trigger it, and near misses that must not.

Built from the grammar in the reference (not from any parser's test suite). The phenotypes the
reference lists under load appear as triggers: damaged wrappers (``toolcalls``, ``toolcall``,
a spaced ``SugarPanel``, doubled bars, ASCII pipes, a V3.2 block from a V4 model), unbalanced
and orphan tags, bare ``<parameter``, bad flags, duplicates, empty names, invalid JSON, special
tokens in values, U+FFFD, byte-level leaks, control characters, loops, salads, think and role
markers in content, truncation and empty stops.
"""

from __future__ import annotations

from tests.dsml.builders import (
    CLOSE,
    CLOSE32,
    EOS,
    INVOKE_CLOSE,
    OPEN,
    OPEN32,
    PARAM_CLOSE,
    B,
    Case,
    block,
    block41,
    call,
    completion,
    inv,
    invoke,
    invoke41,
    openai_message,
    par,
    par41,
    tool,
)

READ = invoke("read_file", par("path", "src/app.py"))
LS = invoke("list_dir", par("path", "."), par("depth", "2", string=False))
READ41 = invoke41("read_file", par41("path", "src/app.py"))
GOOD = "I'll look at the file first." + block(READ)
GOOD2 = "Reading two things." + block(READ, LS)
TOOLS = [
    tool("read_file", ("path",), path="string", limit="integer"),
    tool("list_dir", (), path="string", depth="integer"),
]
FENCE = "```"
V41 = "Checking." + block41(invoke41("ls", par41("path", ".")))
V41_CLEAN_TEXT = V41
NO_PROPS = {"ping": {"type": "object", "properties": {}, "additionalProperties": False}}
SOUP = "ation ment ness ity ous ly"
LONG = " ".join(f"word{i}" for i in range(400)) + "."

TRIGGERS: dict[str, list[Case]] = {
    "marker_ascii_pipe": [
        Case("nfkc block", GOOD.replace(B, "|"), verdict="suspect"),
        Case("ascii eos", GOOD + "<|end\u2581of\u2581sentence|>", verdict="suspect"),
    ],
    "marker_doubled_bar": [
        Case("doubled opener", GOOD.replace(OPEN, f"<{B}{B}DSML{B}{B}tool_calls>")),
    ],
    "marker_spaced": [
        Case(
            "spaced invoke in v4",
            GOOD.replace(f"<{B}DSML{B}invoke", f"<{B}DSML{B} invoke"),
            kwargs={"grammar": "v4"},
            verdict="degenerate",
        ),
        Case("SugarPanel", f"Sure.\n\n<{B}DSML{B} SugarPanel>\n" + READ, kwargs={"grammar": "v4"}),
        Case("unspaced invoke in v4.1", V41.replace(f"<{B}DSML{B} invoke", f"<{B}DSML{B}invoke")),
        Case("double space in v4.1", V41.replace(f"<{B}DSML{B} invoke", f"<{B}DSML{B}  invoke")),
    ],
    "marker_damaged": [
        Case("no angle", GOOD.replace(f"<{B}DSML{B}invoke", f"{B}DSML{B}invoke")),
        Case("missing bar", GOOD.replace(OPEN, f"<{B}DSML tool_calls>")),
    ],
    # issue 32: every bar one look-alike; SGLang and vLLM return the markup as content, no call
    "marker_confusable": [
        Case(f"all bars U+{ord(c):04X}", GOOD.replace(B, c), verdict="degenerate")
        for c in "\u01c0\ufe31\u4e28\u2223\u2502\uffe8\u2758\u05c0"
    ],
    "marker_missing": [
        Case(
            "bare tags in prose",
            'Calling it now: <invoke name="read_file">\n'
            '<parameter name="path" string="true">a.py</parameter>\n</invoke>',
            verdict="suspect",
        ),
    ],
    "tag_unknown": [
        Case("toolcalls", GOOD.replace(OPEN, f"<{B}DSML{B}toolcalls>")),
        Case("toolcall Read", f"OK.\n\n<{B}DSML{B}toolcall>Read the file"),
        Case("empty tag name", f"x <{B}DSML{B}> y"),
    ],
    "dialect_mismatch": [
        Case("v4.1 block, v4 deployment", V41, kwargs={"grammar": "v4"}),
        Case("v4 block, v4.1 deployment", GOOD, kwargs={"grammar": "v4.1"}),
        Case(
            "v3.2 block, v4.1 deployment",
            GOOD.replace(OPEN, OPEN32).replace(CLOSE, CLOSE32),
            kwargs={"grammar": "v4.1"},
        ),
    ],
    "version_mismatch": [
        Case(
            "v3.2 block from v4",
            GOOD.replace(OPEN, OPEN32).replace(CLOSE, CLOSE32),
            kwargs={"grammar": "v4"},
            verdict="suspect",
        ),
        Case(
            "self-closing in v3.2",
            completion("x", call("ls"), grammar="v3.2", self_closing=True),
            verdict="suspect",
        ),
    ],
    "bare_invoke": [
        Case("invoke without block", "Let me look.\n\n" + READ),
        Case("param in block", "x" + block(par("path", "a"))),
    ],
    "nested_tag": [
        Case("invoke in invoke", "x" + block(inv("a") + "\n" + READ + "\n" + INVOKE_CLOSE)),
        Case(
            "param opened in value",
            "x" + block(invoke("w", f"{par('a', '1')[: -len(PARAM_CLOSE)]}{par('b', '2')}")),
        ),
    ],
    "unbalanced": [
        Case("block never closed", GOOD[: -len(CLOSE)], kwargs={"finish_reason": "stop"}),
        Case(
            "value closed by invoke",
            "x" + block(f"{inv('w')}\n{par('a', 'v')[: -len(PARAM_CLOSE)]}{INVOKE_CLOSE}"),
        ),
        Case("ends inside a tag", GOOD[:40], kwargs={"finish_reason": "stop"}),
        Case("mismatched block closer", GOOD.replace(CLOSE, CLOSE32), kwargs={"grammar": "v4"}),
        Case(
            "partial marker at stop",
            "Let me check.\n\n<" + B + "DS",
            kwargs={"finish_reason": "stop"},
        ),
        Case("partial closer at stop", "Done.</" + B, kwargs={"finish_reason": "stop"}),
        Case("v4.1 block never closed", V41[: V41.rindex("</")], kwargs={"finish_reason": "stop"}),
        Case(
            "v4.1 closed as v4",
            V41.replace(f"</{B}DSML{B} calls>", CLOSE),
            kwargs={"grammar": "v4.1"},
        ),
    ],
    "orphan_closer": [
        Case("closer in prose", f"Done.{INVOKE_CLOSE} All good."),
        Case("block closer alone", f"Done.\n{CLOSE}"),
    ],
    "stray_text": [
        Case("prose between invokes", "x" + block(READ + "\nAnd now the second one:", LS)),
    ],
    "empty_block": [Case("no invokes", f"Nothing.\n\n{OPEN}\n{CLOSE}")],
    "text_after_block": [
        Case("chatter after", GOOD + "\n\nLet me know if you need more."),
        Case("EOS then text", GOOD + EOS + "more"),
    ],
    "multiple_blocks": [Case("two blocks", GOOD + block(LS))],
    "whitespace_layout": [
        Case("blank line between invokes", "x" + block(READ + "\n", LS), verdict="suspect"),
        Case("indented tags", "x" + block(READ, sep="\n  "), verdict="suspect"),
    ],
    "attr_malformed": [
        Case("single quotes", GOOD.replace('name="read_file"', "name='read_file'")),
        Case(
            "swapped order",
            GOOD.replace('name="path" string="true"', 'string="true" name="path"'),
        ),
        Case("extra attribute", GOOD.replace('name="read_file"', 'name="read_file" id="1"')),
    ],
    "string_flag_missing": [Case("no flag", GOOD.replace(' string="true"', ""))],
    "string_flag_invalid": [Case("yes", GOOD.replace('string="true"', 'string="yes"'))],
    "param_duplicate": [
        Case("path twice", "x" + block(invoke("read_file", par("path", "a"), par("path", "b")))),
    ],
    "name_invalid": [
        Case("empty tool name", "x" + block(invoke("", par("path", "a")))),
        Case("space in name", "x" + block(invoke("read file", par("path", "a")))),
        Case("no name attr", GOOD.replace(' name="read_file"', "")),
    ],
    "tool_unknown": [
        Case("not offered", completion("x", call("delete_all")), kwargs={"tools": TOOLS}),
        Case(
            "openai unknown",
            response=openai_message("", tool_calls=[("rm_rf", {"path": "/"})]),
            kwargs={"tools": TOOLS},
        ),
    ],
    "json_invalid": [
        Case("unquoted key", "x" + block(invoke("w", par("cfg", "{path: 1}", string=False)))),
        Case("NaN", "x" + block(invoke("w", par("x", "NaN", string=False)))),
        Case("trailing comma", "x" + block(invoke("w", par("x", "[1, 2,]", string=False)))),
        Case(
            "openai args not json",
            response=openai_message("", tool_calls=[("read_file", '{"path": "a.py"')]),
        ),
        Case("openai args a list", response=openai_message("", tool_calls=[("ls", "[1]")])),
    ],
    "args_empty_required": [
        Case("no params", completion("x", call("read_file")), kwargs={"tools": TOOLS}),
        Case(
            "openai {}",
            response=openai_message("", tool_calls=[("read_file", "{}")]),
            kwargs={"tools": TOOLS},
        ),
    ],
    "schema_mismatch": [
        Case(
            "string for integer",
            completion("x", call("read_file", path="a.py", limit="10")),
            kwargs={"tools": TOOLS},
            verdict="suspect",
        ),
        Case(
            "openai wrong type",
            response=openai_message("", tool_calls=[("read_file", {"path": 3})]),
            kwargs={"tools": TOOLS},
            verdict="suspect",
        ),
        Case(
            "argument for a closed tool with no properties",
            completion("x", call("ping", host="a")),
            kwargs={"tools": NO_PROPS},
            verdict="suspect",
        ),
    ],
    "dsml_in_reasoning": [
        Case("block in reasoning", "I will call" + block(READ) + "</think>Done."),
        Case(
            "openai reasoning",
            response=openai_message("Done.", reasoning="Plan:" + block(READ)),
        ),
    ],
    "think_tag_leak": [
        Case("second </think>", "plan</think>Answer.</think> more"),
        Case("<think> in content", "Answer <think> again", kwargs={"thinking": False}),
        Case("</think> without thinking", "a</think>b", kwargs={"thinking": False}),
    ],
    "special_token_leak": [
        Case("role marker", f"Sure.<{B}User{B}>What next?"),
        Case("eos mid text", f"Sure.{EOS} And more."),
        Case("token in value", "x" + block(invoke("w", par("a", f"x<{B}Assistant{B}>y")))),
        Case("fim token", f"code <{B}fim\u2581hole{B}> here"),
    ],
    "unparsed_block": [
        Case("block in content", response=openai_message(GOOD), verdict="suspect"),
    ],
    "ngram_loop": [
        Case("sentence loop", "Okay. " + "I will call the tool now. " * 12),
        Case("word loop", "the " * 40),
        Case("tag loop", f"x\n\n{OPEN}\n" + f'<{B}DSML{B}invoke name="' * 30),
        Case("cjk loop", "我们" + "的的" * 70),
        Case("loop in a value", "x" + block(invoke("w", par("a", "retry the request; " * 10)))),
    ],
    "symbol_salad": [
        Case("em-dash salad", "The result is " + "— , — . … ; ! ? " * 6 + "done"),
        Case("cjk punctuation flood", "结果是" + "。" * 40),
        Case("ascii punctuation mix", "ok " + ".,;:!?" * 6),
    ],
    "token_soup": [
        Case("pieces in a value", "x" + block(invoke("search", par("q", SOUP)))),
        Case("pieces in a v4.1 value", "x" + block41(invoke41("search", par41("q", "a " + SOUP)))),
    ],
    "script_mix": [
        Case(
            "word salad",
            "The model returns данных 的 values كل ของ result в 数据 و result для "
            "ข้อมูล the данных 模型 في and การ для 数据 output",
        ),
    ],
    "replacement_char": [Case("fffd", "caf\ufffd is open", verdict="suspect")],
    "bpe_mojibake": [
        Case("byte-level spaces", "theĠmodelĠisĠreadyĠnow"),
        Case("double-encoded", "rÃ©sumÃ© and cafÃ©"),
        Case("byte-level quote", "itâĢĻs fine, isnâĢĻt it"),
    ],
    "control_chars": [
        Case("nul", "hello\x00world"),
        Case("bell in value", "x" + block(invoke("w", par("a", "ding\x07")))),
        Case("c1", "text\x85more"),
        Case("bare escape", "red\x1bZ"),
    ],
    "length_in_block": [
        Case("cut in value", GOOD[:-30], kwargs={"finish_reason": "length"}, verdict="truncated"),
        Case("cut in tag", GOOD[:45], kwargs={"finish_reason": "length"}, verdict="truncated"),
    ],
    "length_no_call": [
        Case("cut in prose", "A long answer that", kwargs={"finish_reason": "length"}),
        Case(
            "cut in reasoning",
            "still thinking about",
            kwargs={"finish_reason": "length", "thinking": True},
            verdict="truncated",
        ),
    ],
    "empty_stop": [
        Case("empty", "", kwargs={"finish_reason": "stop"}, verdict="degenerate"),
        Case("only eos", EOS, kwargs={"finish_reason": "stop"}),
        Case("reasoning only", "hmm", kwargs={"finish_reason": "stop", "thinking": True}),
        Case("openai empty", response=openai_message("", finish_reason="stop")),
    ],
    "oversized": [
        Case("cut", LONG + GOOD, kwargs={"max_chars": 1000}, verdict="well_formed"),
    ],
    "bad_input": [
        Case("not a response", response="hello", verdict="error"),
        Case("none", response=None, verdict="error"),
        Case("bad sse json", response=b"data: {oops\n\n", verdict="error"),
    ],
}

NEAR_MISSES: dict[str, list[Case]] = {
    "marker_ascii_pipe": [
        Case("canonical", GOOD, verdict="well_formed"),
        Case("pipes in a table", "| a | b |\n|---|---|\n| 1 | 2 |", verdict="no_tool_call"),
    ],
    "marker_doubled_bar": [
        Case("fullwidth bars in prose", f"选项A{B}{B}选项B", verdict="no_tool_call"),
    ],
    "marker_spaced": [
        Case("v4.1 dialect, grammar unknown", V41, verdict="well_formed"),
        Case("v4.1 dialect, grammar v4.1", V41, kwargs={"grammar": "4.1"}, verdict="well_formed"),
        Case("canonical", GOOD, verdict="well_formed"),
    ],
    "marker_confusable": [
        Case("box-drawn table cell", "│DSML│ format │\n│v4  │ tool_calls│", verdict="no_tool_call"),
        Case("one bar replaced", GOOD.replace(f"<{B}DSML{B}invoke", f"<\u01c0DSML{B}invoke")),
        Case(
            "in a fence",
            f"Look-alike bars:\n{FENCE}\n<\u2502DSML\u2502invoke>\n{FENCE}\n",
            verdict="no_tool_call",
        ),
    ],
    "marker_damaged": [
        Case("the word DSML", "The DSML format wraps tool calls.", verdict="no_tool_call"),
        Case(
            "DSML in a value",
            "x" + block(invoke("w", par("a", "see DSML docs"))),
            verdict="well_formed",
        ),
    ],
    "marker_missing": [
        Case(
            "bare tags in a fence",
            f'Example:\n{FENCE}xml\n<invoke name="x">\n</invoke>\n{FENCE}\n',
            verdict="no_tool_call",
        ),
        Case(
            "bare tags in a value",
            "x" + block(invoke("write", par("body", '<parameter name="p">v</parameter>'))),
            verdict="well_formed",
        ),
    ],
    "tag_unknown": [
        Case("canonical", GOOD, verdict="well_formed"),
        Case(
            "unknown tag quoted",
            f"Broken outputs look like `<{B}DSML{B}toolcalls>`.",
            verdict="no_tool_call",
        ),
        Case(
            "truncated tag name",
            GOOD[: GOOD.index("invoke") + 3],
            kwargs={"finish_reason": "length"},
            verdict="truncated",
        ),
    ],
    "dialect_mismatch": [
        Case("v4.1 block, v4.1 deployment", V41, kwargs={"grammar": "v4.1"}, verdict="well_formed"),
        Case("v4.1 block, dialect unknown", V41, verdict="well_formed"),
        Case(
            "v3.2 block, v4 deployment (same invoke spelling)",
            GOOD.replace(OPEN, OPEN32).replace(CLOSE, CLOSE32),
            kwargs={"grammar": "v4"},
            verdict="suspect",
        ),
    ],
    "version_mismatch": [
        Case(
            "v3.2 declared",
            GOOD.replace(OPEN, OPEN32).replace(CLOSE, CLOSE32),
            kwargs={"grammar": "v3.2"},
            verdict="well_formed",
        ),
        Case("auto", GOOD.replace(OPEN, OPEN32).replace(CLOSE, CLOSE32), verdict="well_formed"),
        Case(
            "self-closing in v4",
            completion("x", call("ls"), self_closing=True),
            verdict="well_formed",
        ),
    ],
    "bare_invoke": [Case("in block", GOOD, verdict="well_formed")],
    "nested_tag": [
        Case(
            "bare xml in a value",
            "x" + block(invoke("w", par("a", "<invoke><parameter/></invoke>"))),
            verdict="well_formed",
        ),
    ],
    "unbalanced": [
        Case(
            "cut by length",
            GOOD[: -len(CLOSE)],
            kwargs={"finish_reason": "length"},
            verdict="truncated",
        ),
        Case(
            "partial marker cut by length",
            "Let me check.\n\n<" + B + "DS",
            kwargs={"finish_reason": "length"},
            verdict="truncated",
        ),
        Case(
            "fullwidth bar after < in prose",
            "a <" + B + " b",
            kwargs={"finish_reason": "stop"},
            verdict="no_tool_call",
        ),
        Case("v4.1 complete", V41, kwargs={"finish_reason": "stop"}, verdict="well_formed"),
    ],
    "orphan_closer": [
        Case("closer in backticks", f"The closer is `{INVOKE_CLOSE}`.", verdict="no_tool_call"),
    ],
    "stray_text": [
        Case("only whitespace", "x" + block(READ + "\n", LS), verdict="suspect"),
    ],
    "empty_block": [
        Case("zero-arg invoke", completion("x", call("list_all")), verdict="well_formed"),
    ],
    "text_after_block": [
        Case("eos after", GOOD + EOS, verdict="well_formed"),
        Case("whitespace after", GOOD + "\n\n", verdict="well_formed"),
    ],
    "multiple_blocks": [Case("two invokes", GOOD2, verdict="well_formed")],
    "whitespace_layout": [Case("canonical", GOOD2, verdict="well_formed")],
    "attr_malformed": [Case("canonical", GOOD2, verdict="well_formed")],
    "string_flag_missing": [Case("flag present", GOOD, verdict="well_formed")],
    "string_flag_invalid": [Case("false with json", GOOD2, verdict="well_formed")],
    "param_duplicate": [
        Case(
            "same name, two invokes",
            "x" + block(READ, invoke("read_file", par("path", "b"))),
            verdict="well_formed",
        ),
    ],
    "name_invalid": [
        Case(
            "mcp style name",
            completion("x", call("mcp__fs.read-file", path="a")),
            verdict="well_formed",
        ),
        Case(
            "unicode names", completion("x", call("获取天气", 城市="北京")), verdict="well_formed"
        ),
    ],
    "tool_unknown": [
        Case("tools unknown", completion("x", call("delete_all")), verdict="well_formed"),
        Case(
            "offered",
            completion("x", call("read_file", path="a")),
            kwargs={"tools": TOOLS},
            verdict="well_formed",
        ),
    ],
    "json_invalid": [
        Case(
            "rich json",
            completion("x", call("w", cfg={"a": [1, -2.5e3, None, True], "ü": "ß\n"})),
            verdict="well_formed",
        ),
        Case(
            "json string literal",
            "x" + block(invoke("w", par("a", '"text"', string=False))),
            verdict="well_formed",
        ),
    ],
    "args_empty_required": [
        Case(
            "nothing required",
            completion("x", call("list_dir")),
            kwargs={"tools": TOOLS},
            verdict="well_formed",
        ),
    ],
    "schema_mismatch": [
        Case(
            "types right",
            completion("x", call("read_file", path="a.py", limit=10)),
            kwargs={"tools": TOOLS},
            verdict="well_formed",
        ),
        Case(
            "integral float for integer",
            completion("x", call("read_file", path="a.py", limit=10.0)),
            kwargs={"tools": TOOLS},
            verdict="well_formed",
        ),
        Case(
            "no argument for a closed tool with no properties",
            completion("x", call("ping")),
            kwargs={"tools": NO_PROPS},
            verdict="well_formed",
        ),
    ],
    "dsml_in_reasoning": [
        Case(
            "quoted in reasoning",
            f'The format is `<{B}DSML{B}invoke name="x">`.</think>Done.',
            verdict="no_tool_call",
        ),
        Case("block after reasoning", "Plan: read it.</think>" + GOOD, verdict="well_formed"),
    ],
    "think_tag_leak": [
        Case("one </think>", "plan</think>Answer.", verdict="no_tool_call"),
        Case("quoted in content", "plan</think>Strip `</think>` first.", verdict="no_tool_call"),
        Case(
            "in a code value",
            "x" + block(invoke("w", par("code", 'text.split("</think>")[-1]'))),
            verdict="well_formed",
        ),
    ],
    "special_token_leak": [
        Case("eos at end", GOOD + EOS + "\n", verdict="well_formed"),
        Case(
            "quoted token",
            f"The BOS token is `<{B}begin\u2581of\u2581sentence{B}>`.",
            verdict="no_tool_call",
        ),
        Case(
            "chatml in a value",
            "x" + block(invoke("w", par("t", "<|im_start|>user"))),
            verdict="well_formed",
        ),
    ],
    "unparsed_block": [
        Case(
            "parsed by server",
            response=openai_message("Looking.", tool_calls=[("read_file", {"path": "a"})]),
            verdict="well_formed",
        ),
        Case(
            "block quoted in content",
            response=openai_message(f"Format:\n{FENCE}\n{GOOD}\n{FENCE}\n"),
            verdict="no_tool_call",
        ),
    ],
    "ngram_loop": [
        Case(
            "sentence five times",
            "Okay. " + "I will call the tool now. " * 5,  # phrase_loop since issue 32
        ),
        Case("laughing", "ha" * 20, verdict="no_tool_call"),
        Case("zeros", "[" + "0, " * 300 + "0]", verdict="no_tool_call"),
        Case("rule", "=" * 200, verdict="no_tool_call"),
        Case(
            "similar rows",
            "\n".join(f"| row {i} | value {i * 7} | ok |" for i in range(60)),
            verdict="no_tool_call",
        ),
    ],
    "symbol_salad": [
        Case("table rule", "|" + "---|" * 30, verdict="no_tool_call"),
        Case("banner", "# " + "*" * 80, verdict="no_tool_call"),
        Case("ellipsis leader", "Chapter 1 " + "." * 60 + " 5", verdict="no_tool_call"),
        Case(
            "morse", "... --- ... / .... . .-.. .--. / -- . / ..--.. " * 2, verdict="no_tool_call"
        ),
        Case("cjk pair", "他说——这不可能……真的吗？！", verdict="no_tool_call"),
    ],
    "token_soup": [
        Case(
            "suffixes listed with commas",
            "x" + block(invoke("search", par("q", "ation, ment, ness, ity, ous, ly"))),
            verdict="well_formed",
        ),
        Case(
            "five pieces",
            "x" + block(invoke("search", par("q", "ation ment ness ity ous"))),
            verdict="well_formed",
        ),
        Case(
            "pieces in prose, not a value", "Suffixes: " + SOUP + "." + GOOD, verdict="well_formed"
        ),
    ],
    "script_mix": [
        Case(
            "translation list",
            "Hello in other languages:\n- Russian: Привет\n- Greek: Γειά σου\n- Japanese: "
            "こんにちは\n- Arabic: مرحبا\n- Hebrew: שלום\n- Thai: สวัสดี\n- Korean: 안녕하세요",
            verdict="no_tool_call",
        ),
        Case(
            "bilingual technical",
            "使用 Python 编写一个 HTTP 服务器，然后用 curl 测试 GET 和 POST 请求。"
            "Запустите docker compose up и проверьте logs контейнера.",
            verdict="no_tool_call",
        ),
    ],
    "replacement_char": [Case("accented", "café and naïve résumé", verdict="no_tool_call")],
    "bpe_mojibake": [
        Case("maltese", "Ġużeppi qal li Ċensu ġie l-Ħamrun ilbieraħ.", verdict="no_tool_call"),
        Case("polish", "Zażółć gęślą jaźń, łódź i źródło.", verdict="no_tool_call"),
        Case("one example", "A classic mojibake is Ã© for é.", verdict="no_tool_call"),
    ],
    "control_chars": [
        Case("tabs and crlf", "a\tb\r\nc\x0cd", verdict="no_tool_call"),
        Case("ansi colour", "\x1b[31mred\x1b[0m", verdict="no_tool_call"),
    ],
    "length_in_block": [
        Case(
            "cut in prose", "A long answer", kwargs={"finish_reason": "length"}, verdict="truncated"
        ),
    ],
    "length_no_call": [
        Case(
            "stop", "A complete answer.", kwargs={"finish_reason": "stop"}, verdict="no_tool_call"
        ),
        Case("cut in block", GOOD[:-30], kwargs={"finish_reason": "length"}, verdict="truncated"),
    ],
    "empty_stop": [
        Case("unknown finish", "", verdict="no_tool_call"),
        Case("empty by length", "", kwargs={"finish_reason": "length"}, verdict="truncated"),
        Case(
            "calls only",
            GOOD.removeprefix("I'll look at the file first."),
            kwargs={"finish_reason": "stop"},
            verdict="well_formed",
        ),
    ],
    "oversized": [Case("under cap", LONG + GOOD, verdict="well_formed")],
    "bad_input": [
        Case("valid response", response=openai_message("Hi."), verdict="no_tool_call"),
        Case(
            "valid sse",
            response=b'data: {"choices": []}\n\ndata: [DONE]\n\n',
            verdict="no_tool_call",
        ),
    ],
}

# --- issue 26: the phenotypes reported on long generations ---------------------------------------
# A paragraph of about 60 words (about 400 characters): four copies back to back are a loop no
# character-level check sees when the copies differ from one another by nothing but the
# paragraph is over the ngram_loop limits' reach (period over 1024 characters: a long paragraph).
PARAGRAPH = (
    "The migration moves every tenant to the new storage tier in three phases. First the "
    "read path is switched, then writes are mirrored for a week, and finally the old volumes "
    "are retired once the checksums of both tiers agree for seven consecutive days. Each "
    "phase has its own rollback plan, its owner and a dashboard that shows the error budget, "
    "the replication lag and the number of tenants still waiting. Operators should read the "
    "runbook before the change window opens and confirm the backups. "
)
ESSAY = " ".join(
    f"Section {i} covers topic number {i * 7 % 31} with remark {i * i % 97} and detail {i}."
    for i in range(60)
)
# PARAGRAPH once, after a sentence that ends in its last word, then an essay: a loop of it later
# lines up with this copy first
SAID_BEFORE = "First confirm the backups. " + PARAGRAPH + ESSAY + " "
CODE_VALUE = "def f(x):\n    return x * 2\n"
TOOLS_OFFERED = {"tools": TOOLS}
GLUED_VALUE = invoke("read_file", par("path", "Crash on startup" + "abc" * 12))


def _with_value(value: str) -> str:
    return "Searching." + block(invoke("read_file", par("path", value)))


# issue 32: clean answers that end without a full stop (a list item, a URL, a CJK sentence
# without its 。): the reason it once graded them suspect is now a signal
CLEAN_UNTERMINATED = (
    "需要检查以下几项：\n1. 配置文件\n2. 日志目录",
    "確認する項目：\n- 設定ファイル\n- ログ",
    "설정 파일을 확인했습니다. 포트는 8080입니다",
    "文档在这里：https://example.com/docs",
    "I'll do two things:\n\n1. look at the config\n2. run the tests",
)

PHENOTYPE_TRIGGERS: dict[str, list[Case]] = {
    "length_tools_no_call": [
        Case(
            "long prose cut by length",
            ESSAY,
            kwargs={"finish_reason": "length", **TOOLS_OFFERED},
            verdict="suspect",
        ),
        Case(
            "openai length, no call",
            response=openai_message(ESSAY, finish_reason="length"),
            kwargs=TOOLS_OFFERED,
            verdict="suspect",
        ),
    ],
    # a signal: counted, never a verdict (issue 32)
    "cut_under_stop": [
        Case(
            "cut mid-word",
            "I will first read the configuration and then the serv",
            kwargs={"finish_reason": "stop", **TOOLS_OFFERED},
            verdict="no_tool_call",
        ),
        Case(
            "announced and stopped",
            "Let me look at the file with the reader tool:",
            kwargs={"finish_reason": "stop", **TOOLS_OFFERED},
            verdict="no_tool_call",
        ),
        Case(
            "openai cut",
            response=openai_message("Checking the deployment now, starting with the pod"),
            kwargs=TOOLS_OFFERED,
            verdict="no_tool_call",
        ),
        # issue 32's clean answers: counted the same way, and graded no_tool_call
        *(
            Case(f"clean ending {i}", text, kwargs={"finish_reason": "stop", **TOOLS_OFFERED})
            for i, text in enumerate(CLEAN_UNTERMINATED)
        ),
    ],
    "prose_loop": [
        Case("paragraph x4", "Here is the plan. " + PARAGRAPH * 4, verdict="degenerate"),
        Case("in reasoning", PARAGRAPH * 3 + "</think>Done.", kwargs={"thinking": True}),
        Case("openai content", response=openai_message("Plan: " + PARAGRAPH * 3)),
        # said once before, then looped: the first copies line up with the earlier one (the
        # word before it is the paragraph's last), so only the nearer period is the loop's
        Case("said before, then x3", SAID_BEFORE + PARAGRAPH * 3, verdict="degenerate"),
    ],
    # issue 32: a short sentence looped before a valid block, below ngram_loop and prose_loop
    "phrase_loop": [
        Case("x3 before a block", "I will call the tool now. " * 3 + block(READ)),
        Case("x5 on lines, v4.1", "I will call the tool now.\n" * 5 + block41(READ41)),
        Case("cjk x3", "我现在调用工具。" * 3 + block(READ)),
        Case(
            "openai content",
            response=openai_message(
                "I will call the tool now. " * 3,
                tool_calls=[("read_file", {"path": "a"})],
                finish_reason="tool_calls",
            ),
        ),
    ],
    # issue 32: SGLang 0.5.23 and vLLM run a quoted example as a real call, cutting the content
    "quoted_block": [
        Case(
            "fenced example",
            f"Like this:\n{FENCE}\n{block(READ).strip()}\n{FENCE}\nDone.",
            verdict="suspect",
        ),
        Case(
            "fenced example, then a call",
            f"Example:\n{FENCE}\n{block(READ).strip()}\n{FENCE}" + block(LS),
            verdict="suspect",
        ),
        Case("backtick opener", f"The block opens with `{OPEN}` always.", verdict="suspect"),
    ],
    "template_token_leak": [
        Case("chatml end", "The answer is 42.<|im_end|>", verdict="suspect"),
        Case("llama header", "Sure.<|start_header_id|>assistant", verdict="suspect"),
        Case("inst", "Done [/INST] and more", verdict="suspect"),
    ],
    "script_glued": [
        Case("latin + cyrillic", "The function returnданных the list.", verdict="suspect"),
        Case("cyrillic + han", "Функция возвращает данных的 значение.", verdict="suspect"),
        Case("in a value", _with_value("configзначение.yaml"), verdict="suspect"),
    ],
    "value_loop": [
        Case("unit glued", "Filing." + block(GLUED_VALUE), verdict="degenerate"),
        Case("cjk glued", _with_value("docs/README.md" + "的" * 20)),
        Case("dashes after a city", _with_value("Paris" + "-" * 150)),
        Case("a letter run after a line break", _with_value("print(f(3))\n" + "了" * 16)),
        Case("a rule far wider than the code", _with_value(CODE_VALUE + "=" * 100)),
        # issue 32's last vLLM miss: under every width rule, but no text ends on such a run
        Case("em-dashes closing the code", _with_value(CODE_VALUE + "—" * 27)),
        Case("ideographic stops closing", _with_value("配置文件\n" + "。" * 16 + "\n")),
        Case("a word x8 in a query", _with_value("the " * 7 + "the")),
        Case("two words x8", _with_value("config " + "error log " * 8)),
        Case(
            "openai argument",
            response=openai_message(
                tool_calls=[("read_file", {"path": "Crash on startup" + "abc" * 12})],
                finish_reason="tool_calls",
            ),
        ),
    ],
    "value_salad": [
        Case("scripts in one value", _with_value("data данные 数据 بيانات δεδομένα data данные")),
        Case("four switches, five groups", _with_value("data данные 数据 بيانات δεδομένα")),
    ],
    "duplicate_call": [
        Case("three times", "Reading." + block(READ, READ, READ), verdict="suspect"),
        Case("six times", "Reading." + block(*([READ] * 6)), verdict="suspect"),
        Case(
            "openai three times",
            response=openai_message(
                tool_calls=[("read_file", {"path": "a"})] * 3, finish_reason="tool_calls"
            ),
            verdict="suspect",
        ),
    ],
    # a signal: both calls reach the client intact (agents poll, retry, fan out)
    "repeated_call": [
        Case("twice", "Reading." + block(READ, READ), verdict="well_formed"),
        Case("twice, apart", "Reading." + block(READ, LS, READ), verdict="well_formed"),
        Case("apart, three times", "Reading." + block(READ, LS, READ, LS, READ)),
        Case(
            "openai twice",
            response=openai_message(
                tool_calls=[("list_dir", {"path": "src"}), ("list_dir", {"path": "src"})],
                finish_reason="tool_calls",
            ),
            verdict="well_formed",
        ),
    ],
    "think_in_value": [
        Case("close in value", _with_value("src/app.py</think>"), verdict="suspect"),
        Case("open in value", _with_value("<think>Let me see src/app.py"), verdict="suspect"),
    ],
}

PHENOTYPE_NEAR_MISSES: dict[str, list[Case]] = {
    "length_tools_no_call": [
        Case("no tools offered", ESSAY, kwargs={"finish_reason": "length"}, verdict="truncated"),
        Case(
            "cut inside the block",
            GOOD[: GOOD.index("src/")],
            kwargs={"finish_reason": "length", **TOOLS_OFFERED},
            verdict="truncated",
        ),
        Case(
            "a complete call before the cut",
            "Reading." + block(READ, LS)[:-30],
            kwargs={"finish_reason": "length", **TOOLS_OFFERED},
            verdict="truncated",
        ),
    ],
    "cut_under_stop": [
        Case(
            "a finished sentence",
            "The configuration is fine and the service is healthy.",
            kwargs={"finish_reason": "stop", **TOOLS_OFFERED},
            verdict="no_tool_call",
        ),
        Case(
            "no tools offered",
            "I will first read the configuration and then the serv",
            kwargs={"finish_reason": "stop"},
            verdict="no_tool_call",
        ),
        Case("a short reply", "Sure thing", kwargs={"finish_reason": "stop", **TOOLS_OFFERED}),
        Case(
            "ends in code",
            "Run this:\n```\nmake test\n```",
            kwargs={"finish_reason": "stop", **TOOLS_OFFERED},
            verdict="no_tool_call",
        ),
    ],
    "prose_loop": [
        Case("quoted twice", PARAGRAPH + "To repeat: " + PARAGRAPH, verdict="no_tool_call"),
        Case("numbered sections", ESSAY * 1, verdict="no_tool_call"),
        Case("data rows", "\n".join(["0 1 2 3 4 5 6 7 8 9"] * 100), verdict="no_tool_call"),
        Case("a chorus x3", ("Row, row, row your boat gently down the stream. " * 3) + ESSAY),
        Case("said before, then x2", SAID_BEFORE + PARAGRAPH * 2, verdict="no_tool_call"),
    ],
    "phrase_loop": [
        Case(
            "in reasoning",
            "Let me read the file first. " * 4 + "</think>Done." + block(READ),
            kwargs={"thinking": True},
            verdict="well_formed",
        ),
        Case("said twice", "I will call the tool now. " * 2 + block(READ), verdict="well_formed"),
        Case("emphasis", "No. No. No. Not that file." + block(READ), verdict="well_formed"),
        Case(
            "other words between",
            "Checking a. Checking b. Checking a. Checking b." + block(READ),
            verdict="well_formed",
        ),
        Case("a list of steps", "Step done.\n- a\nStep done.\n- b\nStep done." + block(READ)),
        Case(
            "code with attributes",  # the long-text corpus (ctypes): dots that end no sentence
            "Fields:\n" + "    wintypes.ULONG,\n" * 4 + block(READ),
            verdict="well_formed",
        ),
    ],
    "quoted_block": [
        Case(
            "an invoke quoted",
            f"Write `{inv('read_file')}` inside the block.",
            verdict="no_tool_call",
        ),
        Case("the word in a fence", f"{FENCE}\nDSML tool_calls\n{FENCE}\n", verdict="no_tool_call"),
        Case("a real block", GOOD, verdict="well_formed"),
        # the client's view: the server's parser ran and left the example in content
        Case(
            "openai content",
            response=openai_message(f"Example:\n{FENCE}\n{block(READ).strip()}\n{FENCE}\n"),
            verdict="no_tool_call",
        ),
        Case(
            "v4 opener quoted under v4.1",
            f"V4 wrote `{OPEN}`." + block41(READ41),
            kwargs={"grammar": "v4.1"},
            verdict="well_formed",
        ),
    ],
    "template_token_leak": [
        Case("quoted", "ChatML ends a turn with `<|im_end|>`.", verdict="no_tool_call"),
        Case("in a value", _with_value("<|im_start|>user"), verdict="well_formed"),
        Case("fenced", "```\n<|eot_id|>\n```", verdict="no_tool_call"),
    ],
    "script_glued": [
        Case("english + russian ending", "Запустите это в Pythonом сразу.", verdict="no_tool_call"),
        Case("latin + han", "使用Python编写脚本，然后调用API接口。", verdict="no_tool_call"),
        Case("latin + hangul", "Python으로 API를 호출합니다.", verdict="no_tool_call"),
        Case("micro sign", "Latency is 10μs at p50, ΔE small.", verdict="no_tool_call"),
    ],
    "value_loop": [
        Case("table rule", _with_value("|" + "-" * 40 + "|"), verdict="well_formed"),
        Case("zeros", _with_value("0x" + "0" * 40), verdict="well_formed"),
        Case("dot leaders", _with_value("Introduction" + "." * 30 + "3"), verdict="well_formed"),
        Case("laughter", _with_value("Ahahahahaha"), verdict="well_formed"),
        Case("a word x7", _with_value("the " * 6 + "the"), verdict="well_formed"),
        Case("ha x9", _with_value("ha " * 9), verdict="well_formed"),
        Case("numbers", _with_value("0 0 0 0 0 0 0 0 0 0"), verdict="well_formed"),
        Case("a rule on its own line", _with_value("Title\n" + "-" * 60), verdict="well_formed"),
        Case("a letter 15 times", _with_value("print(f(3))\n" + "了" * 15), verdict="well_formed"),
        Case("box drawing", _with_value("Table\n" + "─" * 40), verdict="well_formed"),
        Case("em-dashes 15 times", _with_value(CODE_VALUE + "—" * 15), verdict="well_formed"),
        Case(
            "an em-dash rule between sections",
            _with_value("正文。\n" + "—" * 16 + "\n版权声明：本文为博主原创文章。"),
            verdict="well_formed",
        ),
        Case("an em-dash pair", _with_value("它结束了——"), verdict="well_formed"),
        Case("a markdown rule", _with_value(CODE_VALUE + "---\n"), verdict="well_formed"),
        Case("a table separator", _with_value("| a | b |\n|---|---|"), verdict="well_formed"),
        Case("short dashes", _with_value(CODE_VALUE + "-" * 20), verdict="well_formed"),
        Case("a heavy box rule", _with_value(CODE_VALUE + "━" * 40), verdict="well_formed"),
        Case("modifier letters", _with_value("Title\n" + "ー" * 12), verdict="well_formed"),
        Case(
            "a closing rule as wide as the log",
            _with_value(("x" * 60 + "\n") * 3 + "=" * 80),
            verdict="well_formed",
        ),
        Case(
            "a wide rule between sections",
            _with_value(CODE_VALUE + "-" * 100 + "\nprint(f(3))"),
            verdict="well_formed",
        ),
    ],
    "value_salad": [
        Case(
            "a greeting list",
            _with_value("Hello, Привет, 你好, مرحبا, Γειά, שלום"),
            verdict="well_formed",
        ),
        Case("bilingual", _with_value("数据 data 报告 report 文件 file"), verdict="well_formed"),
        Case("four switches, three groups", _with_value("data данные 数据 data данные")),
    ],
    "duplicate_call": [
        Case("different arguments", GOOD2, verdict="well_formed"),
        Case(
            "same tool, other path",
            "Reading." + block(READ, invoke("read_file", par("path", "src/b.py"))),
            verdict="well_formed",
        ),
        Case("twice", "Reading." + block(READ, READ), verdict="well_formed"),
        Case("three times, apart", "Reading." + block(READ, LS, READ, LS, READ)),
    ],
    "repeated_call": [
        Case("different arguments", GOOD2, verdict="well_formed"),
        Case("a loop is duplicate_call", "Reading." + block(READ, READ, READ), verdict="suspect"),
    ],
    "think_in_value": [
        Case("code literal", _with_value('text.split("</think>")[-1]'), verdict="well_formed"),
        Case(
            "a regex", _with_value(r're.sub(r"<think>.*?</think>", "", s)'), verdict="well_formed"
        ),
    ],
}

TRIGGERS.update(PHENOTYPE_TRIGGERS)
NEAR_MISSES.update(PHENOTYPE_NEAR_MISSES)
