"""engine/parse/parser.py: one table case per rule, the mention-only controls, the recorded
failures. What a tag turns out to be is in test_parser_tags.py; what an open call emits, or gives
back as text, in test_parser_calls.py.

Every case is parsed whole, 1 character at a time and in random chunks, with stream_tools off
and on (parse_all_ways), so each row also checks the chunking invariants.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.parse.events import MARKUP, TOOL_ARGS
from engine.parse.parser import OutputParser
from tests.engine.parse.parser_harness import (
    BARE_CALL,
    HERMES_CALL,
    TOOLS,
    XML_CALL,
    anomalies,
    parse_all_ways,
    run,
    xml_call,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
REAL_TAIL = "\n</think>\n\n" + XML_CALL

# --- rule 1, 2: start state, <think>, </think>, newlines belong to tags ---------------------


def test_reasoning_then_answer_newlines_belong_to_tags():
    res = parse_all_ways("Let me see.\n\n</think>\n\nThe answer is 4.")
    assert res.reasoning == "Let me see."
    assert res.content == "The answer is 4."
    assert res.finish_reason == "stop" and not anomalies(res)


def test_model_written_think_at_start_is_consumed_from_content_start():
    res = parse_all_ways("  \n<think>\nhmm\n</think>\n\nok", start="content")
    assert (res.reasoning, res.content) == ("hmm", "ok")


def test_whitespace_before_the_models_think_is_held_then_goes_with_the_tag():
    p = OutputParser(start="content", id_prefix="")
    assert p.feed(" \n" * 300) == [] and p.held == " \n" * 300
    events = p.feed("<think>x</think>y") + p.finish()
    assert events[0].kind == MARKUP and events[0].text == " \n" * 300 + "<think>"
    res = parse_all_ways("\t \n" * 50 + "<think>\nhm\n</think>\nok", start="content")
    assert (res.reasoning, res.content) == ("hm", "ok")


def test_model_written_think_at_start_when_template_opened_it():
    res = parse_all_ways("<think>\nhmm\n</think>\nok")
    assert (res.reasoning, res.content) == ("hmm", "ok")


def test_think_later_in_content_is_text():
    res = parse_all_ways("Use <think> tags.", start="content")
    assert res.content == "Use <think> tags." and res.reasoning == ""


def test_content_start_plain_answer():
    res = parse_all_ways("Hello there\nsecond line", start="content")
    assert (res.reasoning, res.content) == ("", "Hello there\nsecond line")


def test_empty_thinking_block():
    res = parse_all_ways("\n\n</think>\n\nAnswer")
    assert (res.reasoning, res.content) == ("", "Answer")


def test_unclosed_reasoning_stays_reasoning_with_partial_tag():
    res = parse_all_ways("still thinking </thi")
    assert res.reasoning == "still thinking </thi" and res.content == ""


def test_think_close_inside_reasoning_fence_still_ends_reasoning():
    res = parse_all_ways("```\ncode\n</think>\nanswer")
    assert (res.reasoning, res.content) == ("```\ncode", "answer")


# --- rule 3: implicit end of reasoning --------------------------------------------------------


def test_implicit_end_real_call_in_reasoning():
    res = parse_all_ways("I will check the weather.\n\n" + XML_CALL, tools=TOOLS)
    assert res.reasoning == "I will check the weather."
    assert [c.name for c in res.tool_calls] == ["get_weather"]
    assert res.tool_calls[0].arguments == {"city": "Paris"}
    assert res.finish_reason == "tool_calls"
    assert anomalies(res) == {"implicit_reasoning_end": 1}


def test_implicit_end_call_begins_the_reasoning():
    res = parse_all_ways(XML_CALL, tools=TOOLS)
    assert res.reasoning == "" and len(res.tool_calls) == 1
    assert anomalies(res) == {"implicit_reasoning_end": 1}


def test_implicit_end_with_whitespace_before_opener_and_hermes_opener():
    res = parse_all_ways("go\n<tool_call>  \n\n" + HERMES_CALL[len("<tool_call>\n"):])
    assert res.reasoning == "go" and res.tool_calls[0].name == "read_file"


def test_implicit_end_counted_once_per_response():
    res = parse_all_ways("r\n" + XML_CALL + "\n" + XML_CALL, tools=TOOLS)
    assert len(res.tool_calls) == 2 and res.anomalies["implicit_reasoning_end"] == 1


# --- the ten mention-only controls (docs/design.md, section 4, rule 3) ------------------------

CONTROLS = {
    "backticks": "The format is `<tool_call>` with `<function=name>` inside.",
    "whole_call_mid_sentence": "It looks like <tool_call>\n<function=get_weather>\n"
    "<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call> in the docs.",
    "backticks_at_line_start": "Example:\n`<tool_call>\n<function=get_weather>\n</function>\n"
    "</tool_call>`\nthat is all.",
    "line_start_tag_no_opener": "Next step:\n<tool_call>\nI should call read_file next.",
    "another_tag_after_it": "Next step:\n<tool_call>\n</tool_call>\nthen think more.",
    "indented": "Steps:\n  <tool_call>\n  <function=get_weather>\n  </function>\n  </tool_call>",
    "quote": "Quoted:\n> <tool_call>\n> <function=get_weather>\n> </function>\n> </tool_call>",
    "backtick_fence": "Like this:\n```xml\n<tool_call>\n<function=get_weather>\n"
    "<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>\n```\nok.",
    "tilde_fence": "Like this:\n~~~\n<tool_call>\n<function=get_weather>\n</function>\n"
    "</tool_call>\n~~~\nok.",
    "bare_tag_before_think_close": "I will now call it.\n<tool_call>",
}


@pytest.mark.parametrize("name", sorted(CONTROLS))
def test_mention_only_control_gives_no_call(name):
    text = CONTROLS[name]
    res = parse_all_ways(text, tools=TOOLS)
    assert res.tool_calls == () and res.reasoning == text and res.content == ""
    assert res.anomalies["implicit_reasoning_end"] == 0


@pytest.mark.parametrize("name", sorted(CONTROLS))
def test_mention_only_control_then_think_close_and_real_call(name):
    text = CONTROLS[name]
    res = parse_all_ways(text + REAL_TAIL, tools=TOOLS)
    assert res.reasoning == text
    assert [c.name for c in res.tool_calls] == ["get_weather"]
    assert res.anomalies["implicit_reasoning_end"] == 0
    assert res.finish_reason == "tool_calls"


# --- the four real recorded failures ----------------------------------------------------------


def _recorded():
    data = json.loads((FIXTURES / "recorded_tool_call_in_thinking.json").read_text("utf-8"))
    return data["falhas"]


@pytest.mark.parametrize("i", range(4))
def test_recorded_failure_gives_exactly_one_call(i):
    case = _recorded()[i]
    raw = case["reasoning_content"]
    before = raw[: raw.index("<tool_call>")].rstrip("\n")
    res = parse_all_ways(raw, seeds=(i,))
    assert len(res.tool_calls) == 1
    assert res.reasoning == before
    assert res.finish_reason == "tool_calls"
    assert res.anomalies["implicit_reasoning_end"] == 1
    call = res.tool_calls[0]
    assert call.name in ("tool_call", "execute_code")
    key = "calls" if call.name == "tool_call" else "code"
    assert key in call.arguments
    if key == "calls":  # no schema: the JSON value is decoded
        assert isinstance(call.arguments["calls"], list)


# --- rule 7: Qwen XML bodies ------------------------------------------------------------------


def test_value_may_contain_end_parameter():
    body = "<parameter=code>\nif a </parameter> b:\n    pass\n</parameter>\n"
    res = parse_all_ways(xml_call(body), start="content", tools=TOOLS)
    assert res.tool_calls[0].arguments == {"code": "if a </parameter> b:\n    pass"}


def test_missing_end_parameter_recovered():
    res = parse_all_ways(xml_call("<parameter=city>\nRome\n"), start="content", tools=TOOLS)
    assert res.tool_calls[0].arguments == {"city": "Rome"}


def test_one_leading_and_one_trailing_newline_stripped():
    res = parse_all_ways(xml_call("<parameter=city>\n\nRome\n\n</parameter>\n"), start="content",
                         tools=TOOLS)
    assert res.tool_calls[0].arguments == {"city": "\nRome\n"}


def test_schema_typing():
    body = (
        "<parameter=city>\n123\n</parameter>\n<parameter=days>\n3\n</parameter>\n"
        "<parameter=metric>\ntrue\n</parameter>\n<parameter=opts>\n{\"a\": [1, 2]}\n</parameter>\n"
        "<parameter=tags>\nnot json\n</parameter>\n"
    )
    res = parse_all_ways(xml_call(body), start="content", tools=TOOLS)
    assert res.tool_calls[0].arguments == {
        "city": "123", "days": 3, "metric": True, "opts": {"a": [1, 2]}, "tags": "not json"}


def test_no_schema_values_json_with_raw_fallback():
    body = "<parameter=n>\n42\n</parameter>\n<parameter=s>\nhello\n</parameter>\n"
    res = parse_all_ways(xml_call(body, name="other"), start="content")
    assert res.tool_calls[0].arguments == {"n": 42, "s": "hello"}


def test_repeated_parameter_keeps_first():
    body = "<parameter=city>\nA\n</parameter>\n<parameter=city>\nB\n</parameter>\n"
    res = parse_all_ways(xml_call(body), start="content", tools=TOOLS)
    assert res.tool_calls[0].arguments == {"city": "A"}


# --- issue 11: what real models write, and what the other servers' parsers accept ------------
# (shapes from vLLM's, llama.cpp's and SGLang's Qwen3-Coder parser tests)

# Optional[str] and Optional[int] as Pydantic, OpenAPI, a type list and $refs write them.
_OPT_STR = [
    {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
    {"oneOf": [{"type": "string"}, {"type": "null"}]},
    {"$ref": "#/$defs/Text"},
    {"type": ["string", "null"]},
    {"type": "string", "nullable": True},
]


def _typed_tool(note_schema: dict) -> list:
    return [{"type": "function", "function": {"name": "save", "parameters": {
        "type": "object",
        "properties": {"note": note_schema, "count": {"type": ["integer", "null"]},
                       "limit": {"anyOf": [{"$ref": "#/definitions/N"}, {"type": "null"}]}},
        "$defs": {"Text": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
        "definitions": {"N": {"type": "integer"}},
    }}}]


@pytest.mark.parametrize("note_schema", _OPT_STR)
def test_union_declared_string_keeps_raw_text_and_equivalent_schemas_agree(note_schema):
    tools = _typed_tool(note_schema)
    for raw, want in (("42", "42"), ("true", "true"), ("null", None), ("[1]", "[1]")):
        body = (f"<parameter=note>\n{raw}\n</parameter>\n<parameter=count>\n7\n</parameter>\n"
                "<parameter=limit>\nnull\n</parameter>\n")
        res = parse_all_ways(xml_call(body, name="save"), start="content", tools=tools)
        assert res.tool_calls[0].arguments == {"note": want, "count": 7, "limit": None}
        assert not anomalies(res)


def test_vllm_anyof_vector():
    # vLLM's test_extract_tool_calls_anyof_type_conversion (Qwen3-Coder parser), as written
    # there: values on the tag's line, Optional[...] as anyOf and as a type list.
    tools = [{"type": "function", "function": {"name": "test_anyof", "parameters": {
        "type": "object", "properties": {
            "anyof_int": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
            "anyof_str": {"anyOf": [{"type": "string"}, {"type": "null"}]},
            "anyof_array": {"anyOf": [{"type": "array", "items": {"type": "string"}},
                                      {"type": "null"}]},
            "anyof_obj": {"anyOf": [{"type": "object"}, {"type": "null"}]},
            "type_as_array": {"type": ["integer", "null"]},
            "multi_non_null": {"anyOf": [{"type": "string"}, {"type": "integer"},
                                         {"type": "null"}]}}}}}]
    text = ("<tool_call>\n<function=test_anyof>\n<parameter=anyof_int>5</parameter>\n"
            "<parameter=anyof_str>hello</parameter>\n"
            '<parameter=anyof_array>["a", "b", "c"]</parameter>\n'
            '<parameter=anyof_obj>{"key": "value"}</parameter>\n'
            "<parameter=type_as_array>42</parameter>\n"
            "<parameter=multi_non_null>some text</parameter>\n</function>\n</tool_call>")
    res = parse_all_ways(text, start="content", tools=tools)
    assert res.tool_calls[0].arguments == {
        "anyof_int": 5, "anyof_str": "hello", "anyof_array": ["a", "b", "c"],
        "anyof_obj": {"key": "value"}, "type_as_array": 42, "multi_non_null": "some text"}
    assert not anomalies(res)


def test_optional_string_streams_before_it_is_complete():
    value = "a long note that streams as it is written"
    text = xml_call(f"<parameter=note>\n{value}\n</parameter>\n", name="save")
    p = OutputParser(start="content", tools=_typed_tool(_OPT_STR[0]), stream_tools=True,
                     id_prefix="")
    cut = text.index(value) + 10
    early = [e.text for e in p.feed(text[:cut]) if e.kind == TOOL_ARGS]
    assert "".join(early) == '{"note": "a long not'  # 10 characters in, before the closer
    rest = [e.text for e in p.feed(text[cut:]) + p.finish() if e.kind == TOOL_ARGS]
    assert "".join(early + rest) == json.dumps({"note": value})


def test_missing_end_parameter_before_a_declared_parameter_is_repaired():
    body = "<parameter=city>\nDallas\n<parameter=days>\n3\n</parameter>\n"
    res = parse_all_ways(xml_call(body), start="content", tools=TOOLS)
    assert res.tool_calls[0].arguments == {"city": "Dallas", "days": 3}
    assert anomalies(res) == {"repaired_call": 1}


def test_tag_like_text_in_a_value_stays_unless_a_declared_parameter_follows():
    body = ("<parameter=city>\nDallas <parameter=zip> 75201\n</parameter>\n"
            "<parameter=days>\n3\n</parameter>\n")
    res = parse_all_ways(xml_call(body), start="content", tools=TOOLS)
    assert res.tool_calls[0].arguments == {"city": "Dallas <parameter=zip> 75201", "days": 3}
    assert not anomalies(res)
    # A tool with no schema: any parameter name ends the value before it.
    body = "<parameter=a>\nx\n<parameter=zip>\n75201\n</parameter>\n"
    res = parse_all_ways(xml_call(body, name="other"), start="content", tools=TOOLS)
    assert res.tool_calls[0].arguments == {"a": "x", "zip": 75201}
    assert anomalies(res) == {"unknown_tool": 1, "repaired_call": 1}


@pytest.mark.parametrize("closer", ["</parameter1>", "</parameter_function>", "</parameter"])
def test_drifted_end_parameter_is_repaired(closer):
    body = f"<parameter=city>\nShanghai\n{closer}\n<parameter=days>\n3\n</parameter>\n"
    res = parse_all_ways(xml_call(body), start="content", tools=TOOLS)
    assert res.tool_calls[0].arguments == {"city": "Shanghai", "days": 3}
    assert anomalies(res) == {"repaired_call": 1}


@pytest.mark.parametrize("value", ["<config>\n  <p>1</p>\n</parameters>", "x </parameterList>",
                                   "a </parameter1> b"])
def test_closed_value_that_ends_like_a_drifted_closer_is_kept(value):
    body = f"<parameter=city>\n{value}\n</parameter>\n"
    res = parse_all_ways(xml_call(body), start="content", tools=TOOLS)
    assert res.tool_calls[0].arguments == {"city": value} and not anomalies(res)


def test_python_literals_for_typed_parameters_are_repaired():
    body = ("<parameter=metric>\nTrue\n</parameter>\n<parameter=opts>\n{'a': [1, 2], 'b': None}\n"
            "</parameter>\n<parameter=tags>\n['x', 2]\n</parameter>\n"
            "<parameter=city>\nTrue\n</parameter>\n")
    res = parse_all_ways(xml_call(body), start="content", tools=TOOLS)
    assert res.tool_calls[0].arguments == {
        "metric": True, "opts": {"a": [1, 2], "b": None}, "tags": ["x", 2], "city": "True"}
    assert anomalies(res) == {"repaired_call": 1}  # once per call, however many repairs


def test_missing_end_parameter_before_end_function_counts_as_repaired():
    res = parse_all_ways(xml_call("<parameter=city>\nRome\n"), start="content", tools=TOOLS)
    assert res.tool_calls[0].arguments == {"city": "Rome"}
    assert anomalies(res) == {"repaired_call": 1}


def test_bare_function_at_line_start_in_content_is_a_repaired_call():
    text = "Let me check.\n" + BARE_CALL + "\nDone."
    res = parse_all_ways(text, start="content", tools=TOOLS)
    assert [(c.name, c.arguments) for c in res.tool_calls] == [("get_weather", {"city": "Paris"})]
    assert res.content == "Let me check.Done."
    assert anomalies(res) == {"repaired_call": 1}
    events = run(text, start="content", tools=TOOLS)
    assert [e.text for e in events if e.anomaly == "repaired_call"] == ["no <tool_call>"]
    # several in a row, and a stray </tool_call> after one is the call's
    res = parse_all_ways(BARE_CALL + "\n</tool_call>\n" + BARE_CALL, start="content", tools=TOOLS)
    assert len(res.tool_calls) == 2 and res.content == ""


@pytest.mark.parametrize("text", [
    "Write `" + BARE_CALL + "` like that.",  # inline code
    "Like:\n```\n" + BARE_CALL + "\n```\n",  # a fence
    "Mid-line " + BARE_CALL,  # not at a line start
    "  " + BARE_CALL,  # indented
])
def test_bare_function_quoted_or_mid_line_stays_text(text):
    res = parse_all_ways(text, start="content", tools=TOOLS)
    assert res.tool_calls == () and res.content == text and not anomalies(res)


def test_bare_function_in_reasoning_is_not_an_implicit_end():
    text = "I could write\n" + BARE_CALL + "\nbut first think."
    res = parse_all_ways(text, tools=TOOLS)
    assert res.tool_calls == () and res.reasoning == text and not anomalies(res)


def test_bare_function_that_is_not_a_call_is_text():
    text = "The tag\n<function=name> opens a call."
    res = parse_all_ways(text, start="content", tools=TOOLS)
    assert res.tool_calls == () and res.content == text
    assert anomalies(res) == {"malformed_call": 1}


def test_bare_function_only_in_qwen_xml():
    res = parse_all_ways(BARE_CALL, start="content", family="hermes-json", tools=TOOLS)
    assert res.tool_calls == () and res.content == BARE_CALL


# --- Hermes JSON ------------------------------------------------------------------------------


def test_hermes_json_call_with_nested_arguments():
    args = {"q": "sky </tool_call> blue", "n": [1, 2.5, None, True], "o": {"k": "é😀"}}
    text = "<tool_call>\n" + json.dumps({"name": "search", "arguments": args}) + "\n</tool_call>"
    res = parse_all_ways(text, start="content")
    assert res.tool_calls[0].name == "search" and res.tool_calls[0].arguments == args


def test_hermes_arguments_as_string_and_name_after_arguments():
    text = ('<tool_call>\n{"name": "f", "arguments": "{\\"a\\": 1}"}\n</tool_call>'
            '<tool_call>{"name": "g", "arguments": {"b": 2}, "name2": 0}</tool_call>')
    res = parse_all_ways(text, start="content", family="hermes-json")
    assert [(c.name, c.arguments) for c in res.tool_calls] == [("f", {"a": 1}), ("g", {"b": 2})]


# --- Unicode and the held tail ------------------------------------------------------------------


def test_unicode_everywhere():
    call = xml_call("<parameter=city>\nZürich 東京\n</parameter>\n")
    text = "思考中 😀\n</think>\n\nRéponse: ✓\n" + call
    res = parse_all_ways(text, tools=TOOLS)
    assert res.reasoning == "思考中 😀" and res.content == "Réponse: ✓"
    assert res.tool_calls[0].arguments == {"city": "Zürich 東京"}


def test_held_tail_is_visible_and_resolves():
    p = OutputParser(start="reasoning", id_prefix="")
    p.feed("abc\n<tool_")
    assert p.held == "\n<tool_"
    assert p.state == "reasoning"
    p.feed("call>\n<function=f>")
    assert p.state == "call"
    p.feed("\n</function>\n</tool_call>")
    assert p.held == "" and p.state == "content"


def test_bad_arguments_rejected():
    with pytest.raises(ValueError, match="start"):
        OutputParser(start="answer")
    with pytest.raises(ValueError, match="family"):
        OutputParser(family="yaml")
