"""engine/parse/families/glm.py (GLM-4.5, 4.6, 4.7, and the templates detected as GLM: Ling 3.0,
poolside Laguna): every parser rule (tests/engine/parse/family_rules.py) and the family's own
cases, each parsed at every chunking, stream_tools off and on. Ling's and Laguna's come from their
real templates (/work/shared/templates: inclusionai-ling-3.0-flash.jinja, poolside-Laguna-*.jinja)
and llama.cpp's tests (tests/test-chat.cpp, "Ling 3.0 / Bailing V3 dedicated parser")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.backends.queued import StopGate
from engine.chat.detect import detect, start_state
from engine.chat.packs import pack_from_template
from engine.chat.request import Message
from engine.chat.template import ChatTemplate
from engine.parse.families import glm
from tests.engine.parse.family_harness import read_all_ways
from tests.engine.parse.family_rules import RULES, Family
from tests.engine.parse.parser_harness import anomalies, parse_all_ways

SHARED = Path(__file__).resolve().parents[5] / "shared" / "templates"
needs_templates = pytest.mark.skipif(not SHARED.is_dir(),
                                     reason="needs ../shared/templates (the real templates)")


def call(name: str, args: dict, sep: str = "\n") -> str:
    pairs = "".join(f"<arg_key>{k}</arg_key>{sep}<arg_value>"
                    f"{v if isinstance(v, str) else json.dumps(v)}</arg_value>{sep}"
                    for k, v in args.items())
    return f"<tool_call>{name}{sep}{pairs}</tool_call>"


def typed(key: str, raw: str) -> str:
    return call("get_weather", {key: raw})


FAMILY = Family("glm", call, "<tool_call>get_weather\n<arg_key>city</arg_key>\n<oops>\n",
                typed=typed)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.__name__)
def test_rule(rule):
    rule(FAMILY)


def test_glm_4_7_without_newlines():
    res = parse_all_ways(call("get_weather", {"city": "Oslo", "days": 2}, sep=""),
                         family="glm", start="content")
    assert res.tool_calls[0].arguments == {"city": "Oslo", "days": 2}


def test_tool_call_followed_by_prose_is_text():
    text = "<tool_call>is the tag GLM uses</tool_call> here"
    res = parse_all_ways(text, family="glm", start="content")
    assert res.tool_calls == () and res.content == text


def test_reader_directly():
    p = read_all_ways(glm, "get_weather\n<arg_key>days</arg_key>\n<arg_value>\n4\n</arg_value>\n"
                      "</tool_call>tail", schemas={})
    assert (p.name, p.arguments) == ("get_weather", {"days": 4})
    assert p.end == len("get_weather\n<arg_key>days</arg_key>\n<arg_value>\n4\n</arg_value>\n"
                        "</tool_call>")


def test_auto_reads_only_qwen_xml_and_hermes_json():
    text = call("get_weather", {"city": "Oslo"})
    res = parse_all_ways(text, family="auto", start="content")
    assert res.tool_calls == () and res.content == text


# --- Ling 3.0 and poolside Laguna, detected as GLM (issue 19, item 2.5) ----------------------

GET_TIME = [{"type": "function", "function": {
    "name": "get_time", "description": "Time",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
# llama.cpp tests/test-chat.cpp, Ling 3.0: its `get_time_call`
LING_CALL = ("<tool_call>get_time\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
             "</tool_call>")
PARIS = [("get_time", {"city": "Paris"})]


def calls(res) -> list:
    return [(c.name, c.arguments) for c in res.tool_calls]


@pytest.mark.parametrize(("text", "start", "reasoning", "content"), [
    # llama.cpp tests/test-chat.cpp, Ling 3.0: a call before the think block is closed; closed
    # think, prose, then a call; prose after the call; whitespace variation between the tags
    ("I need to check the time first.\n" + LING_CALL, "reasoning",
     "I need to check the time first.", ""),
    ("Let me check the time.\n</think>\nChecking it now.\n" + LING_CALL, "reasoning",
     "Let me check the time.", "Checking it now."),
    (LING_CALL + "\nThe time has been checked.", "content", "", "The time has been checked."),
    ("</think>\n<tool_call>get_time<arg_key>city</arg_key><arg_value>Paris</arg_value>"
     "</tool_call>", "reasoning", "", ""),
])
def test_ling_outputs(text, start, reasoning, content):
    res = parse_all_ways(text, family="glm", start=start, tools=GET_TIME)
    assert (res.reasoning, res.content, calls(res)) == (reasoning, content, PARIS)


def test_ling_values_typed_by_a_union_with_a_string():
    """Issue 19, item 2.6, through a whole call: llama.cpp tests/test-chat.cpp, Ling 3.0 "String
    unions: object and integer values parse as JSON, strings stay raw"."""
    union = [{"type": "function", "function": {"name": "set_union", "parameters": {
        "type": "object", "properties": {"value": {"type": ["string", "object"]},
                                         "amount": {"type": ["string", "integer"]}}}}}]
    for value, amount, want in (('{"a": 1}', "7", {"value": {"a": 1}, "amount": 7}),
                                ("plain text", "1abc", {"value": "plain text", "amount": "1abc"}),
                                ("x", "007", {"value": "x", "amount": "007"})):
        text = (f"</think>\n<tool_call>set_union\n<arg_key>value</arg_key>\n<arg_value>{value}"
                f"</arg_value>\n<arg_key>amount</arg_key>\n<arg_value>{amount}</arg_value>\n"
                "</tool_call>")
        res = parse_all_ways(text, family="glm", start="reasoning", tools=union)
        assert calls(res) == [("set_union", want)] and not anomalies(res)


@needs_templates
def test_glm_4_6_stops_are_its_own():
    for name in ("GLM-4.6.jinja", "GLM-4.7-Flash.jinja"):
        pack = pack_from_template(name, (SHARED / name).read_text("utf-8"), name)
        assert pack.family == "glm" and pack.stop == ("<|user|>", "<|observation|>")


TURN_ENDS = {
    "inclusionai-ling-3.0-flash.jinja": ("<|role_end|>", "<role>ASSISTANT</role>\n<think>"),
    "poolside-Laguna-S-2.1.jinja": ("</assistant>", "<assistant><think>"),
    "poolside-Laguna-XS-2.1.jinja": ("</assistant>", "<assistant>\n<think>"),
    "poolside-Laguna-XS.2.jinja": ("</assistant>", "<assistant>\n<think>"),
}


@needs_templates
@pytest.mark.parametrize("name", sorted(TURN_ENDS))
def test_the_templates_own_turn_end_is_a_stop_and_only_ends_the_turn(name):
    turn_end, opened = TURN_ENDS[name]
    source = (SHARED / name).read_text("utf-8")
    assert detect(source).family == "glm"
    pack = pack_from_template(name, source, name)
    assert turn_end in pack.stop and pack.family == "glm"
    tpl = ChatTemplate(source, family="glm")
    ask = Message("user", "Time in Paris?")
    prompt = tpl.render([ask], tools=GET_TIME, enable_thinking=True)
    assert prompt.endswith(opened) and start_state(prompt, "glm") == "reasoning"
    turn = Message("assistant", "Checking.", reasoning_content="Need the time.", tool_calls=(
        {"id": "call_0", "type": "function",
         "function": {"name": "get_time", "arguments": {"city": "Paris"}}},))
    whole = tpl.render([ask, turn], tools=GET_TIME, add_generation_prompt=False,
                       enable_thinking=True)
    assert whole.startswith(prompt)
    reply = whole[len(prompt):].rstrip("\n")
    # No stop inside the turn: the first one is where the turn ends.
    first = min(k for k in (reply.find(s) for s in pack.stop) if k >= 0)
    assert first == len(reply) - len(turn_end)
    # What the engine gives the parser: the reply, cut at the stop (never emitted).
    gate = StopGate(pack.stop)
    out = [t.text for i, ch in enumerate(reply) for t in gate.push(i, ch.encode(), 0.0)]
    out += [t.text for t in gate.finish()]
    assert gate.hit == turn_end and "".join(out) == reply[: -len(turn_end)]
    res = parse_all_ways("".join(out), family="glm", start="reasoning", tools=GET_TIME)
    # (Laguna XS writes `<think>\n`: after the prompt's `<think>`, that newline is reasoning.)
    assert (res.reasoning.lstrip("\n"), res.content, calls(res)) == (
        "Need the time.", "Checking.", PARIS)
    assert not anomalies(res)


@needs_templates
def test_a_ling_turn_end_spelled_as_text_never_reaches_the_answer():
    # llama.cpp tests/test-chat.cpp, Ling 3.0: "The end-of-turn token may arrive spelled out as
    # text tokens instead of the single control token; it must not leak into content."
    name = "inclusionai-ling-3.0-flash.jinja"
    pack = pack_from_template(name, (SHARED / name).read_text("utf-8"), name)
    gate = StopGate(pack.stop)
    out = []
    for i, piece in enumerate(["Here is ", "the answer.", "<|", "role", "_end", "|>", "junk"]):
        out += [t.text for t in gate.push(i, piece.encode(), 0.0)]
        if gate.stopped:
            break
    out += [t.text for t in gate.finish()]
    assert gate.stopped and "".join(out) == "Here is the answer."
