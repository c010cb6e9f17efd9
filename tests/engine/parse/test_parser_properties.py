"""engine/parse/parser.py invariants, property-tested over outputs built from the grammar's pieces.

For any text and any chunking: identical merged events and results; the events' raw spans tile
the input; streamed tool_args join to the final arguments; stream_tools never changes the
result; decided text is never lost (every reasoning/content character comes from the input).
"""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from engine.parse.events import merge, result_of
from tests.engine.parse.parser_harness import check_invariants, run

PIECES = [
    "<think>", "</think>", "<tool_call>", "</tool_call>", "<function=f>", "<function=",
    "</function>", "<parameter=a>", "<parameter=b>", "</parameter>", "<parameter=",
    '{"name": "f", "arguments": {"a": [1, "x"]}}', '{"name"', '{"name": "g", "arguments": ',
    '"s\\n\\u00e9"', "}", "{", "```", "~~~", "`", "``", ">", "<", "\n", "\n\n", " ", "   ",
    "x", "hello world", "é", "😀", '"', ":", "42", "true", "</", "<tool", "</thi",
    # issue 11: drifted closers, Python literals, null, a parameter no schema declares
    "</parameter1>", "</parameter", "</parameter_x>", "True", "None", "{'k': (1,)}", "null",
    "<parameter=z>", "[",
]

TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {
    "type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}}}}]
# The same names typed through unions and $refs: Optional[str] streams once it cannot be null.
UNION_TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {
    "type": "object",
    "properties": {"a": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                   "b": {"anyOf": [{"$ref": "#/$defs/B"}, {"type": "null"}]}},
    "$defs": {"B": {"type": ["object", "array", "integer"]}}}}}]

texts = st.lists(st.sampled_from(PIECES), max_size=40).map("".join)
chunkings = st.lists(st.integers(min_value=1, max_value=12), min_size=1, max_size=200)
options = st.fixed_dictionaries({
    "start": st.sampled_from(["reasoning", "content"]),
    "family": st.sampled_from(["auto", "qwen-xml", "hermes-json"]),
    "tools": st.sampled_from([(), TOOLS, UNION_TOOLS]),
})

# Example counts and CI derandomization come from the profiles in tests/conftest.py.


@given(text=texts, chunks=chunkings, opts=options, stream=st.booleans())
def test_chunking_never_changes_events(text, chunks, opts, stream):
    whole = run(text, stream_tools=stream, **opts)
    pieces = run(text, chunks, stream_tools=stream, **opts)
    ones = run(text, [1] * len(text), stream_tools=stream, **opts)
    check_invariants(text, whole)
    check_invariants(text, pieces)
    check_invariants(text, ones)
    assert merge(pieces) == merge(whole) == merge(ones)


@given(text=texts, opts=options)
def test_stream_tools_never_changes_the_result(text, opts):
    a = result_of(run(text, stream_tools=False, **opts))
    b = result_of(run(text, stream_tools=True, **opts))
    assert a == b
    for call in b.tool_calls:
        assert isinstance(call.arguments, dict)
        json.dumps(call.arguments)


@given(text=texts, chunks=chunkings, opts=options)
def test_streamed_arguments_join_to_final_arguments(text, chunks, opts):
    events = run(text, chunks, stream_tools=True, **opts)
    for ev in events:
        if ev.kind == "tool_call":
            frags = [e.text for e in events if e.kind == "tool_args" and e.index == ev.index]
            assert "".join(frags) == json.dumps(ev.call.arguments)


@given(text=st.text(max_size=200), chunks=chunkings)
def test_arbitrary_text_is_accounted_for(text, chunks):
    for start in ("reasoning", "content"):
        events = run(text, chunks, start=start)
        check_invariants(text, events)
        assert merge(events) == merge(run(text, start=start))


# Whole Qwen XML calls built from the shapes models write (issue 11): exact, drifted and missing
# closers, values that look like tags or literals, with and without `<tool_call>`.
VALUE_PIECES = ["x", "42", "null", "nul", "True", "{'k': 1}", '{"k": [1]}', "[", "\n", " ",
                "<p>", "</parameter>", "</parameterX>", "<parameter=z>", "é", "<", "</"]
CLOSERS = ["</parameter>", "</parameter1>", "</parameter_function>", "</parameter", ""]
values = st.lists(st.sampled_from(VALUE_PIECES), max_size=6).map("".join)
params = st.tuples(st.sampled_from(["a", "b", "z"]), values, st.sampled_from(CLOSERS))
calls = st.builds(
    lambda opener, ps, end, before, after: (
        before + opener + "<function=f>\n"
        + "".join(f"<parameter={k}>\n{v}\n{c}\n" for k, v, c in ps)
        + "</function>" + end + after),
    st.sampled_from(["<tool_call>\n", "\n", ""]),
    st.lists(params, max_size=3),
    st.sampled_from(["\n</tool_call>", "", "\n</tool_"]),
    st.sampled_from(["", "Sure.\n", "`x`\n", "```\n", "`open\n", "a ``b`\n", "  "]),
    st.sampled_from(["", "\nDone.", "\n<function=f>\n</function>"]),
)


@given(text=calls, chunks=chunkings, opts=options, stream=st.booleans())
def test_call_shapes_chunking_never_changes_events(text, chunks, opts, stream):
    whole = run(text, stream_tools=stream, **opts)
    pieces = run(text, chunks, stream_tools=stream, **opts)
    check_invariants(text, whole)
    check_invariants(text, pieces)
    assert merge(pieces) == merge(whole)
    assert result_of(whole) == result_of(run(text, stream_tools=not stream, **opts))


# Model families (issue 12): each family's own markers mixed with quoting and JSON pieces, so
# every rule (implicit end, quoted markup, stray closers, frames) meets every chunking.
FAMILY_PIECES = {
    "harmony": [
        "<|channel|>analysis<|message|>", "<|end|>", "<|start|>assistant", "<|call|>",
        "<|channel|>final<|message|>", "<|channel|>commentary<|message|>", "<|return|>",
        "<|channel|>commentary to=functions.f <|constrain|>json<|message|>",
        " to=functions.f<|channel|>commentary json<|message|>", "<|channel|>", "<|", "to=",
        "functions.", '{"a": [1, "x"]}', '{"a": ', "<|channel|> final<|message|> ",
        "<|start|> assistant", "<|channel|>commentary to=assistant", "<|constrain|>",
        " to=python<|channel|>analysis code<|message|>",
    ],
    "deepseek": [
        "<think>", "</think>", "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "function",
        "<｜tool▁sep｜>", "f", "\n```json\n", "```", "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>",
        '{"a": [1, "x"]}', '{"a": ', "<｜tool", "<｜",
    ],
    "dsml": [
        "<think>", "</think>", "<｜DSML｜function_calls>", '<｜DSML｜invoke name="', 'f">',
        '<｜DSML｜parameter name="', 'a" string="true">', 'b" string="false">', '">',
        "</｜DSML｜parameter>", "</｜DSML｜invoke>", "</｜DSML｜function_calls>", "<｜DSML",
        "[1]", "null", "<｜DSML｜tool_calls>", "</｜DSML｜tool_calls>",
    ],
    "glm": [
        "<think>", "</think>", "<tool_call>", "f", "f\n", "<arg_key>", "a", "b", "</arg_key>",
        "<arg_value>", "</arg_value>", "</tool_call>", "<arg_", "</", "[1]", "null",
    ],
    "kimi-k2": [
        "<think>", "</think>", "<|tool_calls_section_begin|>", "<|tool_call_begin|>",
        "functions.f:0", "f", "<|tool_call_argument_begin|>", "<|tool_call_end|>",
        "<|tool_calls_section_end|>", "<|tool_call_section_begin|>", "<|tool", "<|",
        '{"a": [1, "x"]}', '{"a": ',
    ],
    "mistral": [
        "[THINK]", "[/THINK]", "[TOOL_CALLS]", "f", "[ARGS]", "[CALL_ID]", "a1", "[",
        "]", ", ", '{"name": "f", "arguments": {"a": 1}}', '{"a": [1, "x"]}', '{"a": ',
        "[TOOL", "[/TH", "(x)",
    ],
    "gemma4": [
        "<|channel>thought", "<channel|>", "<|tool_call>", "call:", "f", "{", "}", "a:",
        '<|"|>', "x", ",", "[1,2]", "true", "<tool_call|>", "<|tool", "<|", '{"a": 1}',
        "<|channel>",
    ],
    "llama3-json": [
        "<|python_tag|>", '{"name": "f", "parameters": {"a": 1}}', '{"name"', ': "f", ',
        '"parameters": ', '{"a": [1, "x"]}', "}", ";", "; ", "<think>", "</think>", "<|py",
    ],
    "minimax-xml": [
        "<think>", "</think>", "<minimax:tool_call>", '<invoke name="', 'f">',
        '<parameter name="', 'a">', 'b">', "</parameter>", "</invoke>", "</minimax:tool_call>",
        "<minimax", "<inv", "[1]", "null",
    ],
}
FAMILY_PIECES["lfm2"] = [
    "<think>", "</think>", "<|tool_call_start|>", "<|tool_call_end|>", "[", "]", "f(", ")",
    "a=", "b=1", ", ", "'x,)'", '"y"', '"""t"', "True", "null", "{'k': [1]}", "\\", "<|tool",
]
FAMILY_PIECES["granite"] = [
    "<think>", "</think>", "<response>", "</response>", "<|tool_call|>", "[", "]", ", ",
    '{"name": "f", "arguments": {"a": 1}}', '{"arguments": {}, "name": "f"}', '{"name"',
    "<|tool", "<resp",
]
FAMILY_PIECES["nemotron-v2"] = [
    "<think>", "</think>", "<TOOLCALL>", "</TOOLCALL>", "[", "]", ", ",
    '{"name": "f", "arguments": {"a": 1}}', '{"name": "f", "arguments": "{}"}', '{"name"',
    "<TOOL", "</TOOL",
]
SHARED_PIECES = ["```", "`", "\n", "\n\n", " ", "x", "hello world", "é", "{", "}", '"', "<",
                 "42", "[", "]"]
family_cases = st.sampled_from(sorted(FAMILY_PIECES)).flatmap(lambda d: st.tuples(
    st.just(d), st.lists(st.sampled_from(SHARED_PIECES + FAMILY_PIECES[d]), max_size=40)
    .map("".join)))


@given(case=family_cases, chunks=chunkings, start=st.sampled_from(["reasoning", "content"]),
       tools=st.sampled_from([(), TOOLS]), stream=st.booleans())
def test_families_chunking_never_changes_events(case, chunks, start, tools, stream):
    family, text = case
    opts = {"start": start, "family": family, "tools": tools}
    whole = run(text, stream_tools=stream, **opts)
    pieces = run(text, chunks, stream_tools=stream, **opts)
    ones = run(text, [1] * len(text), stream_tools=stream, **opts)
    for events in (whole, pieces, ones):
        check_invariants(text, events)
    assert merge(pieces) == merge(whole) == merge(ones)
    assert result_of(whole) == result_of(run(text, stream_tools=not stream, **opts))
