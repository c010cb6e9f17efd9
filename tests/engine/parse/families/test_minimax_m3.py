"""engine/parse/families/minimax_m3.py (MiniMax-M3): every parser rule
(tests/engine/parse/family_rules.py) and the family's own cases, each parsed at every chunking,
stream_tools off and on. The shapes come from MiniMax-M3's real chat template
(/work/shared/templates/MiniMax-M3.jinja: its `to_xml` macro, its `</mm:think>` prefix of
non-thinking turns), from vLLM's `minimax_m3` tool parser (several `<invoke>` per
wrapper, nested arguments as parameter-named elements), from SGLang's `MiniMaxM3Detector` (a
non-thinking reply may open with one `</mm:think>`, dropped) and from a recorded M3 reply
whose values close without the namespace token (`]<]minimax[>[<query>…</query>`)."""

from __future__ import annotations

import json

import pytest

from engine.chat.detect import detect, start_state
from engine.chat.request import Message
from engine.chat.template import ChatTemplate
from engine.parse.events import ToolCall
from engine.parse.families import REGISTRY, minimax_m3
from tests.engine.parse.family_harness import read_all_ways
from tests.engine.parse.family_rules import RULES, Family
from tests.engine.parse.parser_harness import anomalies, parse_all_ways
from tests.support import LIBRARY

NS = minimax_m3.NS
REAL = LIBRARY


def value(v) -> str:
    return v if isinstance(v, str) else json.dumps(v)


def invoke(name: str, args: dict) -> str:
    params = "".join(f"{NS}<{k}>{value(v)}{NS}</{k}>" for k, v in args.items())
    return f'{NS}<invoke name="{name}">{params}{NS}</invoke>\n'


def call(name: str, args: dict) -> str:
    return f"{NS}<tool_call>\n{invoke(name, args)}{NS}</tool_call>"


def typed(key: str, raw: str) -> str:
    return call("get_weather", {key: raw})


FAMILY = Family("minimax-m3", call,
                f'{NS}<tool_call>\n{NS}<invoke name="get_weather">stray{NS}</invoke>',
                think=("<mm:think>", "</mm:think>"), typed=typed)

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"},
        "opts": {"type": "object", "properties": {
            "tags": {"type": "array", "items": {"type": "string"}},
            "metric": {"type": "boolean"}}},
        "stops": {"type": "array", "items": {"$ref": "#/$defs/stop"}},
        "empty": {"type": "array"}},
    "$defs": {"stop": {"type": "object", "properties": {"n": {"type": "string"}}}}}}}]


def parse(text: str, **kw):
    kw.setdefault("start", "content")
    return parse_all_ways(text, family="minimax-m3", tools=TOOLS, **kw)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.__name__)
def test_rule(rule):
    rule(FAMILY)


# --- what the real template writes ---------------------------------------------------------


def real(name: str) -> str:
    path = REAL / name
    if not path.is_file():
        pytest.skip(reason=f"needs the real template {path} (../shared)")
    return path.read_text(encoding="utf-8")


def test_the_real_template_is_detected_as_m3_and_m2s_stays_minimax_xml():
    assert detect(real("MiniMax-M3.jinja")).family == "minimax-m3"
    assert detect(real("MiniMax-M2.jinja")).family == "minimax-xml"
    others = [p for p in sorted(REAL.glob("*.jinja")) if p.name != "MiniMax-M3.jinja"]
    assert [p.name for p in others if detect(p.read_text("utf-8")).family == "minimax-m3"] \
        == []


def test_a_turn_the_real_template_writes_reads_back_with_nested_values():
    """The template's to_xml expands objects and arrays into elements; typed by the schema
    (tags are strings even where they read as numbers), the call comes back whole."""
    args = {"city": "Paris", "days": 2,
            "opts": {"tags": ["1", "sunny day"], "metric": True},
            "stops": [{"n": "7"}, {"n": "x"}]}
    tmpl = ChatTemplate(real("MiniMax-M3.jinja"))
    ask = [Message("user", "Weather?")]
    turn = Message("assistant", "Checking.", reasoning_content="Need it.", tool_calls=(
        {"id": "c0", "type": "function", "function": {"name": "get_weather",
                                                      "arguments": args}},))
    prompt = tmpl.render(ask, tools=TOOLS)
    whole = tmpl.render([*ask, turn], tools=TOOLS, add_generation_prompt=False)
    assert whole.startswith(prompt)
    written = whole[len(prompt):].removesuffix("[e~[\n")
    assert f"{NS}<opts>{NS}<tags>{NS}<item>1{NS}</item>" in written
    res = parse(written, start=start_state(prompt, "minimax-m3"))
    assert (res.reasoning, res.content) == ("Need it.", "Checking.")
    assert [(c.name, c.arguments) for c in res.tool_calls] == [("get_weather", args)]
    assert not anomalies(res)


@pytest.mark.parametrize(("mode", "want"), [("enabled", "reasoning"), ("disabled", "content"),
                                            ("adaptive", "content")])
def test_the_thinking_modes_start_where_the_template_leaves_the_model(mode, want):
    prompt = ChatTemplate(real("MiniMax-M3.jinja")).render([Message("user", "hi")],
                                                          extra={"thinking_mode": mode})
    assert start_state(prompt, "minimax-m3") == want


def test_prisms_copy_maps_enable_thinking_to_the_thinking_mode():
    from engine.chat.packs import TEMPLATES

    tmpl = ChatTemplate((TEMPLATES / "minimax_m3.jinja").read_text("utf-8"))
    ask = [Message("user", "hi")]
    assert tmpl.render(ask, enable_thinking=True).endswith("]~b]ai\n<mm:think>")
    assert tmpl.render(ask, enable_thinking=False).endswith("]~b]ai\n</mm:think>")
    assert tmpl.render(ask).endswith("]~b]ai\n")  # the template's own default: adaptive
    assert tmpl.render(ask) == ChatTemplate(real("MiniMax-M3.jinja")).render(ask)


# --- reasoning -------------------------------------------------------------------------------


def test_a_reply_that_does_not_think_opens_with_the_closer_and_that_is_no_anomaly():
    # adaptive mode (SGLang's MiniMaxM3Detector drops it too): the template's own prefix
    res = parse("</mm:think>Hello there.")
    assert (res.reasoning, res.content) == ("", "Hello there.") and not anomalies(res)
    res = parse("\n</mm:think>\nHello there.")
    assert res.content == "Hello there." and not anomalies(res)


def test_the_closer_anywhere_else_in_the_answer_is_stray():
    res = parse("Hello</mm:think> there.")
    assert res.content == "Hello there." and anomalies(res) == {"stray_think_end": 1}
    res = parse("</mm:think>Hi.</mm:think>")
    assert res.content == "Hi." and anomalies(res) == {"stray_think_end": 1}


def test_a_reply_that_thinks_in_adaptive_mode_opens_the_block_itself():
    res = parse("<mm:think>Short.</mm:think>Hello.")
    assert (res.reasoning, res.content) == ("Short.", "Hello.") and not anomalies(res)


def test_enabled_mode_the_prompt_opened_it():
    res = parse("Let me see.</mm:think>" + call("get_weather", {"city": "Oslo"}),
                start="reasoning")
    assert res.reasoning == "Let me see." and res.content == ""
    assert [c.arguments for c in res.tool_calls] == [{"city": "Oslo"}]


def test_m2s_think_tags_are_text_here():
    res = parse("<think>x</think>Hello.")
    assert res.content == "<think>x</think>Hello." and not anomalies(res)


# --- calls -------------------------------------------------------------------------------------


def test_several_invokes_in_one_section():
    text = (f"{NS}<tool_call>\n" + invoke("get_weather", {"city": "Paris", "days": 2})
            + invoke("get_weather", {"city": "Lyon"}) + f"{NS}</tool_call>")
    res = parse(text)
    assert [c.arguments for c in res.tool_calls] == [{"city": "Paris", "days": 2},
                                                     {"city": "Lyon"}]
    assert res.content == "" and not anomalies(res)


def test_an_invoke_without_its_section_is_a_call():
    res = parse("On it. " + invoke("get_weather", {"city": "Rome"}))
    assert res.content == "On it. " and [c.arguments for c in res.tool_calls] == [
        {"city": "Rome"}]


def test_values_closed_without_the_namespace_token_are_read_and_counted():
    # as a recorded M3 reply writes them: `]<]minimax[>[<query>字节 AI 新闻</query>`
    text = (f'{NS}<tool_call>\n{NS}<invoke name="get_weather">{NS}<city>字节 AI 新闻</city>'
            f"{NS}<days>6</days>{NS}</invoke>\n{NS}</tool_call>")
    res = parse(text)
    assert [c.arguments for c in res.tool_calls] == [{"city": "字节 AI 新闻", "days": 6}]
    assert anomalies(res) == {"repaired_call": 1}


def test_a_bare_closer_followed_by_the_real_one_is_text():
    text = call("get_weather", {"city": "<b>x</city>"})
    res = parse(text)
    assert [c.arguments for c in res.tool_calls] == [{"city": "<b>x</city>"}]
    assert not anomalies(res)


def test_nested_values_follow_the_schema_and_without_one_the_item_rule():
    opts = (f"{NS}<opts>{NS}<tags>{NS}<item>1{NS}</item>{NS}<item>2{NS}</item>{NS}</tags>"
            f"{NS}<metric>false{NS}</metric>{NS}</opts>")
    free = (f"{NS}<other>{NS}<item>1{NS}</item>{NS}<item>true{NS}</item>{NS}</other>"
            f"{NS}<more>{NS}<a>1{NS}</a>{NS}</more>{NS}<empty>{NS}</empty>")
    text = f'{NS}<tool_call>\n{NS}<invoke name="get_weather">{opts}{free}{NS}</invoke>\n'
    res = parse(text)
    assert res.tool_calls[0].arguments == {
        "opts": {"tags": ["1", "2"], "metric": False},  # items are strings by the schema
        "other": [1, True], "more": {"a": 1},  # no schema: <item> children are an array
        "empty": []}  # an empty element where the schema wants an array


def test_json_text_where_the_schema_wants_a_container():
    res = parse(call("get_weather", {"opts": '{"metric": true}', "stops": '[{"n": "1"}]'}))
    assert res.tool_calls[0].arguments == {"opts": {"metric": True}, "stops": [{"n": "1"}]}


def test_values_keep_their_text_exactly():
    res = parse(call("get_weather", {"city": "\n  New York \n"}))
    assert res.tool_calls[0].arguments == {"city": "\n  New York \n"}


def test_a_repeated_key_keeps_its_first_value():
    res = parse(call("get_weather", {"city": "A"}).replace(
        f"{NS}</invoke>", f"{NS}<city>B{NS}</city>{NS}</invoke>"))
    assert res.tool_calls[0].arguments == {"city": "A"}


@pytest.mark.parametrize("bad", [
    f'{NS}<invoke name="get_weather">{NS}<city>Paris{NS}</days>{NS}</invoke>',  # wrong closer
    f'{NS}<invoke name="get_weather">{NS}<opts>x{NS}<a>1{NS}</a>{NS}</opts>{NS}</invoke>',
    f'{NS}<invoke name="get_weather">{NS}</city>{NS}</invoke>',  # a closer with nothing open
    f'{NS}<invoke name="get_weather">{NS}city>{NS}</invoke>',  # NS without a tag
])
def test_broken_markup_is_a_malformed_call_given_back_as_text(bad):
    res = parse(bad)
    assert res.tool_calls == () and res.content == bad
    assert anomalies(res) == {"malformed_call": 1}


def test_reader_directly_streams_fragments_that_join_to_the_arguments():
    body = (f'get_weather">{NS}<city>Paris{NS}</city>{NS}<opts>{NS}<metric>true{NS}</metric>'
            f"{NS}</opts>{NS}</invoke>\n{NS}</tool_call>tail")
    schemas = {"get_weather": TOOLS[0]["function"]["parameters"]}
    p = read_all_ways(minimax_m3, body, schemas=schemas)
    assert (p.name, p.arguments) == ("get_weather", {"city": "Paris", "opts": {"metric": True}})
    assert p.end == len(body) - len("tail")


# --- the writer ------------------------------------------------------------------------------


def test_the_writer_writes_what_the_template_writes():
    w = REGISTRY["minimax-m3"].writer
    c = ToolCall("call_0", "get_weather", {"city": "Paris", "days": 3,
                                           "opts": {"tags": ["a b"]}}, 0)
    assert w.write("r", "a", [c]) == (
        f"<mm:think>r</mm:think>a{NS}<tool_call>\n"
        f'{NS}<invoke name="get_weather">{NS}<city>Paris{NS}</city>{NS}<days>3{NS}</days>'
        f"{NS}<opts>{NS}<tags>{NS}<item>a b{NS}</item>{NS}</tags>{NS}</opts>{NS}</invoke>\n"
        f"{NS}</tool_call>")


def test_the_writer_falls_back_to_json_where_elements_would_not_read_back():
    w = REGISTRY["minimax-m3"].writer
    args = {"opts": {"tags": ["1"]}, "stops": [], "empty": [[]]}
    text = w.write_call(ToolCall("c", "get_weather", args, 0))
    assert f'{NS}<opts>{{"tags": ["1"]}}{NS}</opts>' in text and f"{NS}<stops>{NS}</stops>" in text
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"opts": {"type": "object"}, "stops": {"type": "array"},
                                         "empty": {"type": "array"}}}}}]
    res = parse_all_ways(text, family="minimax-m3", tools=tools, start="content")
    assert res.tool_calls[0].arguments == args


def test_the_forced_call_grammar_writes_the_namespaced_elements():
    pytest.importorskip("llama_cpp")
    from engine.grammar.tools import forced_call

    g = forced_call("minimax-m3", TOOLS, "get_weather")
    assert f'"{NS}<invoke name=\\"get_weather\\">"' in g
    assert f'"{NS}<city>"' in g and f'"{NS}</city>"' in g
    assert f'root ::= "{NS}<tool_call>\\n" tc-any "{NS}</tool_call>"' in g
