"""engine/parse/parser_calls.py, through the parser: what an open call emits (tool_start / tool_args
fragments and their spans, the tool_call with its raw text and channel, unknown_tool,
repaired_call) and how a body that is no call goes back as text (unfinished_call,
malformed_call). Every case is parsed whole, per character and in random chunks, with
stream_tools off and on (parse_all_ways), except where the events themselves are asserted."""

from __future__ import annotations

import json

from engine.parse.events import ANOMALY, CONTENT, REASONING, TOOL_ARGS, TOOL_START
from tests.engine.parse.parser_harness import (
    BARE_CALL,
    TOOLS,
    XML_CALL,
    anomalies,
    parse_all_ways,
    run,
    xml_call,
)


def test_implicit_call_unfinished_is_reasoning_verbatim():
    text = "thinking\n<tool_call>\n<function=get_weather>\n<parameter=city>\nPar"
    res = parse_all_ways(text, tools=TOOLS)
    assert res.reasoning == text and res.tool_calls == ()
    assert anomalies(res) == {"unfinished_call": 1}


def test_implicit_call_after_mention_then_think_close_inside_would_be_call():
    # A would-be call in the thinking that never completes but contains </think>: the
    # thinking still ends there, the answer after it is not swallowed.
    text = "x\n<tool_call>\n<function=f>\n<parameter=a>\nv\n</think>\nThe answer."
    res = parse_all_ways(text)
    assert res.content == "The answer."
    assert res.reasoning == "x\n<tool_call>\n<function=f>\n<parameter=a>\nv"
    assert anomalies(res) == {"unfinished_call": 1}


def test_content_unfinished_call_returned_as_content():
    text = "ok " + XML_CALL[:40]
    res = parse_all_ways(text, start="content", tools=TOOLS)
    assert res.content == text and res.tool_calls == ()
    assert anomalies(res) == {"unfinished_call": 1}


def test_unknown_tool_is_called_and_flagged():
    res = parse_all_ways(xml_call("", name="launch_rockets"), start="content", tools=TOOLS)
    assert res.tool_calls[0].name == "launch_rockets" and res.tool_calls[0].arguments == {}
    assert anomalies(res) == {"unknown_tool": 1}


def test_malformed_xml_body_returned_as_text():
    text = "<tool_call>\n<function=get_weather>\nsome prose instead\n</tool_call> after"
    res = parse_all_ways(text, start="content", tools=TOOLS)
    assert res.tool_calls == () and res.content == text
    assert anomalies(res) == {"malformed_call": 1}


def test_repaired_call_names_its_repairs():
    body = "<parameter=city>\nA\n</parameter1>\n<parameter=metric>\nFalse\n"
    events = run(xml_call(body), start="content", tools=TOOLS)
    marks = [e for e in events if e.kind == ANOMALY]
    assert [(e.anomaly, e.text) for e in marks] == [
        ("repaired_call", "drifted </parameter>, missing </parameter>, Python literal")]
    assert marks[0].call_id == "call_0" and marks[0].span[0] == marks[0].span[1]


def test_call_keeps_its_raw_text_and_channel():
    text = "Plan.\n\n" + XML_CALL + "\n\nAfter."
    res = parse_all_ways(text, tools=TOOLS)
    call = res.tool_calls[0]
    assert call.raw == "\n\n" + XML_CALL and call.origin == REASONING
    res = parse_all_ways("Hi " + BARE_CALL, start="content", tools=TOOLS)  # mid-line: text
    assert res.tool_calls == ()
    res = parse_all_ways("Hi\n" + BARE_CALL, start="content", tools=TOOLS)
    assert res.tool_calls[0].raw == "\n" + BARE_CALL and res.tool_calls[0].origin == CONTENT


def test_declared_no_tools_makes_every_call_unknown():
    # The server's requests declare their tools, even none (tools_declared); `prism parse`
    # without --tools knows nothing of them, and counts nothing.
    res = parse_all_ways(XML_CALL, start="content", tools_declared=True)
    assert len(res.tool_calls) == 1 and anomalies(res) == {"unknown_tool": 1}
    res = parse_all_ways(XML_CALL, start="content")
    assert len(res.tool_calls) == 1 and not anomalies(res)
    res = parse_all_ways(XML_CALL, start="content", tools=TOOLS, tools_declared=True)
    assert not anomalies(res)


def test_hermes_malformed_json_returned_as_text():
    text = '<tool_call>\n{"name": "f", "arguments": {"a": 1,}}\n</tool_call>'
    res = parse_all_ways(text, start="content")
    assert res.tool_calls == () and res.content == text
    assert anomalies(res) == {"malformed_call": 1}


def test_hermes_streamed_fragment_span_ignores_the_silent_characters_after_it():
    # The `:` and space after a key write nothing; a fragment's span must not stretch over
    # them when they happen to arrive in the same feed (found by the property tests).
    text = '<tool_call>{"name": "g", "arguments": {"name": "g", "arguments": '
    res = parse_all_ways(text)
    assert res.tool_calls == () and res.reasoning == text
    assert anomalies(res) == {"unfinished_call": 1}


def test_stream_tools_emits_start_then_fragments_that_join_to_arguments():
    body = "<parameter=city>\nNew \"York\" é\n</parameter>\n<parameter=days>\n2\n</parameter>\n"
    events = run(xml_call(body), [1] * 200, start="content", tools=TOOLS, stream_tools=True)
    kinds = [e.kind for e in events]
    first_start = kinds.index(TOOL_START)
    assert events[first_start].text == "get_weather" and events[first_start].call_id == "call_0"
    frags = [e.text for e in events if e.kind == TOOL_ARGS]
    assert len(frags) > 5  # the string value streamed as it was written
    assert "".join(frags) == json.dumps({"city": 'New "York" é', "days": 2})
    assert kinds.index(TOOL_START) < kinds.index(TOOL_ARGS) < kinds.index("tool_call")
