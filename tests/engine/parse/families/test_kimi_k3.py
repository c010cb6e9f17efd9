"""engine/parse/families/kimi_k3.py (Kimi K3): every parser rule
(tests/engine/parse/family_rules.py) and the family's own cases, each parsed at every chunking,
stream_tools off and on. The shapes come from Kimi K3's real chat template
(/work/shared/templates/Kimi-K3.jinja: its `open_tag` / `close_tag` channels, `xtml_type`,
the `json` form of a call's arguments) and from vLLM's K3 parser tests (vllm-ascend's
`test_kimi_k3_parsers`: every argument type, a JSON block with a zero-argument call, the
non-thinking reply that opens with `<|close|>response<|sep|>`, an argument that is not its
declared type)."""

from __future__ import annotations

import json

import pytest

from engine.chat.detect import detect, start_state
from engine.chat.request import Message
from engine.chat.template import ChatTemplate
from engine.parse.events import ToolCall
from engine.parse.families import REGISTRY, kimi_k3
from tests.engine.parse.family_harness import read_all_ways
from tests.engine.parse.family_rules import RULES, Family
from tests.engine.parse.parser_harness import anomalies, parse_all_ways
from tests.support import LIBRARY

REAL = LIBRARY
THINK_END = "<|close|>think<|sep|>"
RESPONSE_START, RESPONSE_END = "<|open|>response<|sep|>", "<|close|>response<|sep|>"
TOOLS_START, TOOLS_END = "<|open|>tools<|sep|>", "<|close|>tools<|sep|>"
MESSAGE_END = "<|close|>message<|sep|>"


def argument(key: str, kind: str | None, raw: str) -> str:
    typ = f' type="{kind}"' if kind else ""
    return f'<|open|>argument key="{key}"{typ}<|sep|>{raw}<|close|>argument<|sep|>'


def one(name: str, args: str = "", index: int = 1) -> str:
    return f'<|open|>call tool="{name}" index="{index}"<|sep|>{args}<|close|>call<|sep|>'


def call(name: str, args: dict) -> str:
    body = "".join(argument(k, kimi_k3.xtml_type(v), v if isinstance(v, str) else json.dumps(v))
                   for k, v in args.items())
    return TOOLS_START + one(name, body) + TOOLS_END


def typed(key: str, raw: str) -> str:  # no `type`: the schema decides
    return TOOLS_START + one("get_weather", argument(key, None, raw)) + TOOLS_END


FAMILY = Family("kimi-k3", call, TOOLS_START + one("get_weather", "oops"),
                think=("<|open|>think<|sep|>", THINK_END), typed=typed)

TOOLS = [{"type": "function", "function": {"name": "plan_trip", "parameters": {
    "type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "number"}, "flexible": {"type": "boolean"},
        "metadata": {"type": "object"}, "stops": {"type": "array"},
        "note": {"type": ["string", "null"]}}}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {
        "type": "object", "properties": {}}}}]


def parse(text: str, **kw):
    kw.setdefault("start", "content")
    return parse_all_ways(text, family="kimi-k3", tools=TOOLS, **kw)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.__name__)
def test_rule(rule):
    rule(FAMILY)


# --- the real template ------------------------------------------------------------------------


def real(name: str) -> str:
    path = REAL / name
    if not path.is_file():
        pytest.skip(reason=f"needs the real template {path} (../shared)")
    return path.read_text(encoding="utf-8")


def test_the_real_template_is_detected_as_k3_and_k2s_stay_kimi_k2():
    assert detect(real("Kimi-K3.jinja")).family == "kimi-k3"
    for k2 in ("Kimi-K2-Instruct.jinja", "Kimi-K2-Thinking.jinja", "moonshotai-Kimi-K2.jinja"):
        assert detect(real(k2)).family == "kimi-k2", k2
    others = [p for p in sorted(REAL.glob("*.jinja")) if p.name != "Kimi-K3.jinja"]
    assert [p.name for p in others if detect(p.read_text("utf-8")).family == "kimi-k3"] == []


@pytest.mark.parametrize("thinking", [True, False])
def test_a_turn_the_real_template_writes_reads_back(thinking):
    args = {"city": "北京 & 海淀", "days": 3, "flexible": False,
            "metadata": {"seat": "window"}, "stops": ["上海", "东京"], "note": None}
    tmpl = ChatTemplate(real("Kimi-K3.jinja"))
    ask = [Message("user", "Plan it.")]
    turn = Message("assistant", "I will check.", reasoning_content="Use the planner.",
                   tool_calls=({"id": "c0", "type": "function",
                                "function": {"name": "plan_trip", "arguments": args}},
                               {"id": "c1", "type": "function",
                                "function": {"name": "get_time", "arguments": {}}}))
    kw = {"tools": TOOLS, "extra": {"thinking": thinking}}
    prompt = tmpl.render(ask, **kw)
    whole = tmpl.render([*ask, turn], add_generation_prompt=False, **kw)
    assert whole.startswith(prompt)
    written = whole[len(prompt):].removesuffix("<|end_of_msg|>")
    res = parse(written, start=start_state(prompt, "kimi-k3"))
    assert res.reasoning == ("Use the planner." if thinking else "")
    assert res.content == "I will check."
    assert [(c.name, c.arguments) for c in res.tool_calls] == [("plan_trip", args),
                                                               ("get_time", {})]
    assert not anomalies(res)


def test_prisms_copy_maps_enable_thinking():
    from engine.chat.packs import TEMPLATES

    tmpl = ChatTemplate((TEMPLATES / "kimi_k3.jinja").read_text("utf-8"))
    ask = [Message("user", "hi")]
    assert tmpl.render(ask, enable_thinking=True).endswith(
        '<|open|>message role="assistant"<|sep|><|open|>think<|sep|>')
    assert tmpl.render(ask, enable_thinking=False).endswith(RESPONSE_START)
    assert tmpl.render(ask) == ChatTemplate(real("Kimi-K3.jinja")).render(ask)


# --- vLLM's K3 cases --------------------------------------------------------------------------


def test_every_argument_type_after_reasoning():
    body = "".join([argument("city", "string", "北京 & 海淀"), argument("days", "number", "3"),
                    argument("flexible", "boolean", "false"),
                    argument("metadata", "object", '{"seat":"window"}'),
                    argument("stops", "array", '["上海","东京"]'),
                    argument("note", "null", "null")])
    text = ("I should use the trip planner." + THINK_END + RESPONSE_START + "I will check. "
            + RESPONSE_END + TOOLS_START + one("plan_trip", body) + TOOLS_END + MESSAGE_END)
    res = parse(text, start="reasoning")
    assert (res.reasoning, res.content) == ("I should use the trip planner.", "I will check. ")
    assert res.tool_calls[0].arguments == {
        "city": "北京 & 海淀", "days": 3, "flexible": False, "metadata": {"seat": "window"},
        "stops": ["上海", "东京"], "note": None}
    assert not anomalies(res)


def test_a_json_block_and_a_call_without_arguments():
    block = '<|open|>json type="object"<|sep|>{"city":"New York","days":2}<|close|>json<|sep|>'
    text = RESPONSE_END + TOOLS_START + one("plan_trip", block) + one("get_time", index=2) \
        + TOOLS_END + MESSAGE_END
    res = parse(text)
    assert [(c.name, c.arguments) for c in res.tool_calls] == [
        ("plan_trip", {"city": "New York", "days": 2}), ("get_time", {})]
    assert res.content == "" and not anomalies(res)


def test_without_thinking_the_reply_continues_the_response_the_prompt_opened():
    body = "".join(argument(k, "number", v) for k, v in (("a", "2"), ("b", "6"), ("c", "5")))
    res = parse(RESPONSE_END + TOOLS_START + one("solve", body) + TOOLS_END + MESSAGE_END)
    assert res.content == "" and res.tool_calls[0].arguments == {"a": 2, "b": 6, "c": 5}
    res = parse("plain answer" + RESPONSE_END + MESSAGE_END)
    assert res.content == "plain answer" and not anomalies(res)


@pytest.mark.parametrize("bad", [
    one("plan_trip", argument("days", "number", "not-a-number")),
    one("plan_trip", argument("flexible", "boolean", "yes")),
    one("plan_trip", argument("days", "number", "3")
        + '<|open|>json type="object"<|sep|>{"days": 2}<|close|>json<|sep|>'),
])
def test_a_value_that_is_not_its_type_or_mixed_forms_make_a_malformed_call(bad):
    text = TOOLS_START + bad + TOOLS_END
    res = parse(text)
    assert res.tool_calls == () and res.content == text
    assert anomalies(res) == {"malformed_call": 1}


def test_a_python_literal_of_the_declared_type_is_repaired():
    res = parse(TOOLS_START + one("plan_trip", argument("flexible", "boolean", "True")) + TOOLS_END)
    assert res.tool_calls[0].arguments == {"flexible": True}
    assert anomalies(res) == {"repaired_call": 1}


def test_the_type_attribute_wins_over_the_schema():
    res = parse(call("plan_trip", {"city": "42"}).replace('type="string"', 'type="number"'))
    assert res.tool_calls[0].arguments == {"city": 42}
    res = parse(call("plan_trip", {"days": "3"}))  # written as a string: stays one
    assert res.tool_calls[0].arguments == {"days": "3"}


def test_a_call_without_an_index_and_attributes_escaped():
    text = (TOOLS_START + '<|open|>call tool="lookup"<|sep|>'
            + '<|open|>argument key="q &amp; &quot;a&quot;" type="string"<|sep|>K3'
            + "<|close|>argument<|sep|><|close|>call<|sep|>" + TOOLS_END)
    res = parse(text)
    assert [(c.name, c.arguments) for c in res.tool_calls] == [("lookup", {'q & "a"': "K3"})]


def test_a_call_outside_the_tools_section_is_a_call():
    res = parse("Sure. " + one("get_time"))
    assert res.content == "Sure. " and [c.name for c in res.tool_calls] == ["get_time"]


def test_the_response_opener_inside_the_reasoning_stays_reasoning():
    res = parse("Plan." + RESPONSE_START + "more", start="reasoning")
    assert (res.reasoning, res.content) == ("Plan." + RESPONSE_START + "more", "")


def test_values_keep_their_text_exactly_and_a_repeat_keeps_the_first():
    body = argument("city", "string", "\n a \n") + argument("city", "string", "b")
    res = parse(TOOLS_START + one("plan_trip", body) + TOOLS_END)
    assert res.tool_calls[0].arguments == {"city": "\n a \n"}


def test_reader_directly():
    body = ('tool="plan_trip" index="1"<|sep|>' + argument("days", "number", "2")
            + "<|close|>call<|sep|><|close|>tools<|sep|>tail")
    p = read_all_ways(kimi_k3, body, schemas={})
    assert (p.name, p.arguments, p.end) == ("plan_trip", {"days": 2}, len(body) - len("tail"))
    p = read_all_ways(kimi_k3, 'tool="f"<|sep|><|open|>json<|sep|>{"k": [1]}\n<|close|>json'
                      "<|sep|><|close|>call<|sep|>", schemas={})
    assert (p.name, p.arguments, p.done) == ("f", {"k": [1]}, True)


# --- the writer and the grammar ------------------------------------------------------------------


def test_the_writer_writes_what_the_template_writes():
    w = REGISTRY["kimi-k3"].writer
    c = ToolCall("call_0", "get_weather", {"city": "Paris", "days": 3}, 0)
    assert w.write("r", "a", [c]) == (
        "<|open|>think<|sep|>r" + THINK_END + RESPONSE_START + "a" + RESPONSE_END + TOOLS_START
        + one("get_weather", argument("city", "string", "Paris") + argument("days", "number", "3"))
        + TOOLS_END)
    assert w.write("r", "", [c], opened=True).startswith(
        "r" + THINK_END + RESPONSE_START + RESPONSE_END + TOOLS_START)


def test_the_forced_call_grammar():
    pytest.importorskip("llama_cpp")
    from engine.grammar.tools import forced_call

    simple = {"type": "function", "function": {"name": "trip", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"]}}}
    g = forced_call("kimi-k3", (simple,), "trip")
    assert 'type=\\"number\\"<|sep|>"' in g and 'type=\\"string\\"<|sep|>"' in g
    assert f'root ::= "{RESPONSE_END}{TOOLS_START}" tc-any "{TOOLS_END}"' in g
    # no properties, or one of no single type (`note`): the JSON form
    for name in ("get_time", "plan_trip"):
        assert '<|open|>json type=\\"object\\"<|sep|>' in forced_call("kimi-k3", TOOLS, name)
