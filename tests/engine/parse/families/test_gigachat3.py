"""engine/parse/families/gigachat3.py (GigaChat 3): every parser rule
(tests/engine/parse/family_rules.py) and the family's own cases, each parsed at every chunking,
stream_tools off and on. The outputs are what GigaChat3-10B-A1.8B.jinja writes for an assistant
turn and SGLang's GigaChat3Detector tests (test/srt/function_call/test_gigachat3_detector.py),
which vLLM's gigachat3 parser shares."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.chat.detect import detect
from engine.parse.events import ToolCall
from engine.parse.families import gigachat3 as g
from tests.engine.parse.family_harness import read_all_ways
from tests.engine.parse.family_rules import RULES, Family
from tests.engine.parse.parser_harness import anomalies, parse_all_ways

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}},
    {"type": "function", "function": {"name": "manage_user_memory", "parameters": {
        "type": "object", "properties": {
            "content": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "action": {"type": "string", "enum": ["create", "update", "delete"]},
            "id": {"anyOf": [{"type": "string"}, {"type": "null"}]}}}}}]
REAL = Path(__file__).resolve().parents[5] / "shared" / "templates"  # the real ones
SEP = g.MESSAGE_SEP + "\n\n"


def call(name: str, args: dict) -> str:
    return g.CALL_ROLE + "\n" + json.dumps({"name": name, "arguments": args})


FAMILY = Family("gigachat3", call, g.CALL_ROLE + '\n{"name": "get_weather", "arguments": {x}}',
                think=None)


def parse(text: str, family: str = "gigachat3", **kw):
    kw.setdefault("start", "content")
    return parse_all_ways(text, family=family, tools=TOOLS, **kw)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.__name__)
def test_rule(rule):
    rule(FAMILY)


# --- what the template writes, and SGLang's cases ----------------------------------------------

MEMORY = {"action": "create", "id": "preferences"}


@pytest.mark.parametrize("family", ["gigachat3", "gigachat3.1"])
def test_a_call_in_a_message_of_its_own_after_an_empty_answer(family):
    res = parse(SEP + call("manage_user_memory", MEMORY), family, stream_tools=True)
    assert res.content == "" and [(c.name, c.arguments) for c in res.tool_calls] == [
        ("manage_user_memory", MEMORY)]
    assert not anomalies(res) and res.finish_reason == "tool_calls"


def test_a_call_at_the_very_start_and_a_role_without_a_body():
    # SGLang's test_single_call_role_sep and test_malformed_json_returns_text
    res = parse(call("get_weather", {"city": "Tokyo"}))
    assert [(c.name, c.arguments) for c in res.tool_calls] == [("get_weather", {"city": "Tokyo"})]
    text = g.CALL_ROLE + "\nnot valid json"
    res = parse(text)
    assert res.tool_calls == () and res.content == text and not anomalies(res)


def test_the_answer_then_the_call_and_the_end_of_turn():
    for tail in ("", g.MESSAGE_SEP, SEP):
        res = parse("I'll remember that." + SEP + call("manage_user_memory", MEMORY) + tail)
        assert res.content == "I'll remember that." and len(res.tool_calls) == 1, tail
        assert not anomalies(res)
    # the separator without its blank line (SGLang's test_content_before_call)
    res = parse("Sure, let me check." + g.MESSAGE_SEP + call("get_weather", {"city": "Paris"}))
    assert res.content == "Sure, let me check." and len(res.tool_calls) == 1


def test_nested_and_empty_arguments():
    args = {"action": "create", "id": "prefs", "content": {"likes": ["short", "clear"],
                                                           "hate_emojis": True}}
    assert parse(SEP + call("manage_user_memory", args)).tool_calls[0].arguments == args
    assert parse(SEP + call("manage_user_memory", {})).tool_calls[0].arguments == {}


@pytest.mark.parametrize("body", [
    '{"name": "manage_user_memory", "arguments": {invalid json}}',
    '{"name": "manage_user_memory", "arguments": "string_args"}',
    '{"name": "get_weather", "arguments": {"city": "London"',
])
def test_a_body_that_is_no_call_is_answer_text(body):
    text = SEP + g.CALL_ROLE + "\n" + body
    res = parse(text)
    assert res.tool_calls == () and res.content == text.removeprefix(SEP)
    assert set(anomalies(res)) <= {"malformed_call", "unfinished_call"} and anomalies(res)


def test_no_name_first_is_no_call_and_missing_arguments_are_none():
    text = g.CALL_ROLE + '\n{"arguments": {"action": "create"}}'
    assert parse(text).tool_calls == ()
    res = parse(g.CALL_ROLE + '\n{"name": "manage_user_memory"}')  # SGLang drops it
    assert [(c.name, c.arguments) for c in res.tool_calls] == [("manage_user_memory", {})]


def test_the_role_only_counts_at_a_line_start_with_its_separator():
    for text in ("Call the function call<|role_sep|> tool.",
                 'Then function call<|role_sep|>\n{"name": "get_weather", "arguments": {}}',
                 'function call{"name": "get_weather", "arguments": {}}'):
        res = parse(text)
        assert res.tool_calls == () and res.content == text, text


def test_both_versions_openers_are_read():
    res = parse("Checking." + g.FUNCTION_CALL + json.dumps(
        {"name": "get_weather", "arguments": {"city": "Oslo"}}) + g.MESSAGE_SEP)
    assert res.content == "Checking." and res.tool_calls[0].arguments == {"city": "Oslo"}


def test_reader_directly():
    body = '{"name": "f", "arguments": {"q": [1]}}'
    p = read_all_ways(g, "\n" + body + g.MESSAGE_SEP)
    assert (p.name, p.arguments, p.end) == ("f", {"q": [1]}, len(body) + 1)
    p = read_all_ways(g, body)  # the end of output ends the call
    assert p.done and p.end == len(body)


def test_writer_writes_a_function_call_message():
    fam = g.FAMILY
    text = fam.writer.write(None, "Checking.", [ToolCall("c0", "f", {"x": 1}, 0)])
    assert text == ('Checking.<|message_sep|>\n\nfunction call<|role_sep|>\n'
                    '{"name": "f", "arguments": {"x": 1}}')


# --- detection, stops ----------------------------------------------------------------------------


@pytest.mark.skipif(not REAL.is_dir(), reason="needs ../shared/templates (the real templates)")
def test_the_real_templates_are_detected_each_as_its_version():
    assert detect((REAL / "GigaChat3-10B-A1.8B.jinja").read_text()).family == "gigachat3"
    assert detect((REAL / "GigaChat3.1-10B-A1.8B.jinja").read_text()).family == "gigachat3.1"


def test_message_sep_is_never_gigachat3s_stop():
    from engine.chat.packs import builtin_packs

    assert g.MESSAGE_SEP in g.FAMILY.never_stops and g.MESSAGE_SEP not in g.FAMILY.stops
    assert g.MESSAGE_SEP not in builtin_packs()["gigachat3"].stop
