"""engine/parse/families/nemotron_v2.py (NVIDIA Nemotron Nano v2): every parser rule
(tests/engine/parse/family_rules.py) and the family's own cases, each parsed at every chunking,
stream_tools off and on. The cases come from the real template (NVIDIA-Nemotron-Nano-v2.jinja;
the pack's nemotron_v2.jinja), from llama.cpp's tests/test-chat-parsers (test_nemotron_v2_parser)
and from vLLM's tests/tool_parsers/test_nemotron_nano_v2_tool_parser.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.chat.detect import detect, start_state
from engine.chat.packs import TEMPLATES, resolve_pack
from engine.chat.request import Message
from engine.parse.families import nemotron_v2
from tests.engine.parse.family_harness import read_all_ways
from tests.engine.parse.family_rules import RULES, Family
from tests.engine.parse.parser_harness import anomalies, parse_all_ways

SHARED = Path(__file__).resolve().parents[5] / "shared" / "templates"
REAL = "NVIDIA-Nemotron-Nano-v2.jinja"
OPEN, CLOSE = "<TOOLCALL>", "</TOOLCALL>"


def call(name: str, args: dict) -> str:
    return OPEN + json.dumps([{"name": name, "arguments": args}]) + CLOSE


FAMILY = Family("nemotron-v2", call,
                OPEN + '[{"name": "get_weather", "arguments": {"city": "Paris",}}]' + CLOSE)
SPECIAL = OPEN + '[{"name": "special_function", "arguments": {"arg1": 1}}]' + CLOSE


def parse(text: str, **kw):
    kw.setdefault("start", "content")
    return parse_all_ways(text, family="nemotron-v2", **kw)


def calls(res) -> list:
    return [(c.name, c.arguments) for c in res.tool_calls]


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.__name__)
def test_rule(rule):
    rule(FAMILY)


# --- llama.cpp's cases (tests/test-chat-parsers, test_nemotron_v2_parser) -----------------------


def test_llama_cpp_content_and_thinking():
    res = parse("Hello, world!\nWhat's up?")
    assert res.content == "Hello, world!\nWhat's up?"
    res = parse("<think>I'm\nthinking</think>Hello, world!\nWhat's up?")
    assert (res.reasoning, res.content) == ("I'm\nthinking", "Hello, world!\nWhat's up?")


@pytest.mark.parametrize(("head", "tail", "reasoning", "content"), [
    ("", "", "", ""),
    ("<think>I'm\nthinking</think>", "", "I'm\nthinking", ""),
    ("", "Hello, world!\nWhat's up?", "", "Hello, world!\nWhat's up?"),
    ("<think>I'm\nthinking</think>", "Hello, world!\nWhat's up?", "I'm\nthinking",
     "Hello, world!\nWhat's up?"),
])
def test_llama_cpp_calls_with_thinking_and_content_after(head, tail, reasoning, content):
    res = parse(head + SPECIAL + tail)
    assert (res.reasoning, res.content) == (reasoning, content)
    assert calls(res) == [("special_function", {"arg1": 1})] and not anomalies(res)


# --- vLLM's cases (tests/tool_parsers/test_nemotron_nano_v2_tool_parser.py) ---------------------


def test_vllm_content_before_the_list():
    res = parse('Let me check that.<TOOLCALL>[{"name": "get_weather", '
                '"arguments": {"city": "Tokyo", "unit": "celsius"}}]</TOOLCALL>')
    assert res.content == "Let me check that."
    assert calls(res) == [("get_weather", {"city": "Tokyo", "unit": "celsius"})]


def test_vllm_a_single_object_and_string_arguments():
    res = parse('<TOOLCALL>{"name": "lookup", "arguments": {"query": "vllm"}}</TOOLCALL>')
    assert calls(res) == [("lookup", {"query": "vllm"})] and res.content == ""
    res = parse('<TOOLCALL>[{"name": "run_query", '
                '"arguments": "{\\"sql\\": \\"select 1\\"}"}]</TOOLCALL>')
    assert calls(res) == [("run_query", {"sql": "select 1"})]


def test_vllm_malformed_is_text():
    text = '<TOOLCALL>[{"name": "broken", "arguments": {}</TOOLCALL>'
    res = parse(text)
    assert res.tool_calls == () and res.content == text
    assert anomalies(res) == {"malformed_call": 1}


def test_vllm_nested_arguments_and_several_calls():
    res = parse('<TOOLCALL>[{"name": "search", "arguments": {"filters": {"city": "Tokyo"}, '
                '"items": [{"name": "rain", "value": true}]}}]</TOOLCALL>')
    assert calls(res) == [("search", {"filters": {"city": "Tokyo"},
                                      "items": [{"name": "rain", "value": True}]})]
    res = parse('<TOOLCALL>[{"name": "get_weather", "arguments": {"city": "Tokyo"}}, '
                '{"name": "lookup_timezone", "arguments": {"city": "Tokyo"}}]</TOOLCALL>')
    assert [c.name for c in res.tool_calls] == ["get_weather", "lookup_timezone"]
    assert [c.index for c in res.tool_calls] == [0, 1]


def test_vllm_think_block_is_reasoning_here():
    # vLLM's nemotron_nano_v2 parser leaves the think block in the content; Prism reads it
    res = parse("<think>\nI need the weather for Tokyo.\n</think>\n"
                '<TOOLCALL>[{"name": "get_weather", "arguments": {"city": "Tokyo"}}]</TOOLCALL>')
    assert res.reasoning == "I need the weather for Tokyo." and res.content == ""
    assert calls(res) == [("get_weather", {"city": "Tokyo"})]


# --- the template's and the family's own cases --------------------------------------------------


def test_the_prompt_opens_the_reasoning_unless_thinking_is_off():
    pack = resolve_pack("nemotron-v2", require_model=False)
    tmpl = pack.chat_template()
    ask = [Message("user", "Weather?")]
    on = tmpl.render(ask)
    assert on.endswith("<SPECIAL_11>Assistant\n<think>\n")
    assert start_state(on, "nemotron-v2") == "reasoning"
    off = tmpl.render(ask, enable_thinking=False)
    assert off.endswith("<think></think>") and start_state(off, "nemotron-v2") == "content"
    # the model's own switch in the conversation wins, as in the original
    no = tmpl.render([Message("user", "Weather? /no_think")], enable_thinking=True)
    assert no.endswith("<think></think>") and "/no_think" not in no


def test_what_the_pack_template_writes_is_read_back():
    pack = resolve_pack("nemotron-v2", require_model=False)
    tmpl = pack.chat_template()
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}}}}
    ask = [Message("user", "Weather in Paris and Lyon?")]
    turn = Message("assistant", "Checking.", reasoning_content="Two cities.", tool_calls=tuple(
        {"id": f"c{i}", "type": "function",
         "function": {"name": "get_weather", "arguments": {"city": c}}}
        for i, c in enumerate(("Paris", "Lyon"))))
    prompt = tmpl.render(ask, tools=[tool])
    whole = tmpl.render([*ask, turn], tools=[tool], add_generation_prompt=False)
    assert whole.startswith(prompt)
    written = whole[len(prompt):].removesuffix("\n<SPECIAL_12>\n")
    res = parse(written, tools=[tool], start=start_state(prompt, "nemotron-v2"))
    assert (res.reasoning, res.content) == ("Two cities.", "Checking.")
    assert calls(res) == [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Lyon"})]
    assert not anomalies(res)


def test_the_real_template_writes_the_same_calls():
    src = (SHARED / REAL).read_text("utf-8") if SHARED.is_dir() else None
    if src is None:
        pytest.skip(reason="needs ../shared/templates (the real templates)")
    from engine.chat.template import ChatTemplate

    tmpl = ChatTemplate(src)
    turn = Message("assistant", "Checking.", tool_calls=(
        {"id": "c0", "type": "function",
         "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},))
    text = tmpl.render([Message("user", "Weather?"), turn, Message("user", "Thanks")])
    block = text[text.index(OPEN):text.index(CLOSE) + len(CLOSE)]
    assert calls(parse(block)) == [("get_weather", {"city": "Paris"})]


def test_a_list_without_its_bracket_or_its_closer():
    res = parse(OPEN + '[{"name": "f", "arguments": {}}' + CLOSE + " ok")
    assert calls(res) == [("f", {})] and res.content == " ok"
    assert anomalies(res) == {"repaired_call": 1}
    res = parse(OPEN + '[{"name": "f", "arguments": {}}]')
    assert calls(res) == [("f", {})] and not anomalies(res)


def test_reader_directly():
    p = read_all_ways(nemotron_v2, '[{"name": "f", "arguments": {"a": 1}}] </TOOLCALL>tail')
    assert (p.name, p.arguments) == ("f", {"a": 1})
    assert p.end == len('[{"name": "f", "arguments": {"a": 1}}] </TOOLCALL>')
    assert p.follow() is None


def test_detected_by_its_call_tag_and_before_llama3():
    assert detect((TEMPLATES / "nemotron_v2.jinja").read_text("utf-8")).family == "nemotron-v2"
    # Llama-Nemotron: <TOOLCALL> lists inside Llama 3 turns
    llama_nemotron = "<|start_header_id|>assistant<|end_header_id|>\n\n<TOOLCALL>[{{ calls }}]"
    assert detect(llama_nemotron).family == "nemotron-v2"


@pytest.mark.skipif(not SHARED.is_dir(), reason="needs ../shared/templates (the real templates)")
def test_nano_v2_is_nemotron_v2_and_nemotron_3_nano_stays_qwen_xml():
    found = {p.name for p in SHARED.glob("*.jinja")
             if detect(p.read_text("utf-8")).family == "nemotron-v2"}
    assert found == {REAL}
    nano3 = (SHARED / "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja").read_text("utf-8")
    assert detect(nano3).family == "qwen-xml"
