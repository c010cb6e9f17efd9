"""engine/parse/families/seed_oss.py (ByteDance Seed-OSS): every parser rule
(tests/engine/parse/family_rules.py) and the family's own cases, each parsed at every chunking,
stream_tools off and on. The cases come from the real template (ByteDance-Seed-OSS.jinja, the
pack's seed_oss.jinja), from vLLM's tests/tool_parsers/test_seed_oss_tool_parser.py and from
llama.cpp's tests/test-chat-parsers (test_seed_oss_parser)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.chat.detect import detect, start_state
from engine.chat.packs import TEMPLATES, resolve_pack
from engine.chat.request import Message
from engine.parse.families import qwen_xml, seed_oss
from tests.engine.parse.family_harness import read_all_ways
from tests.engine.parse.family_rules import RULES, Family
from tests.engine.parse.parser_harness import anomalies, parse_all_ways

SHARED = Path(__file__).resolve().parents[5] / "shared" / "templates"
REAL = "ByteDance-Seed-OSS.jinja"


def _value(v) -> str:
    return v if isinstance(v, str) else json.dumps(v)


def call(name: str, args: dict) -> str:
    """One call as the template writes it."""
    params = "".join(f"<parameter={k}>{_value(v)}</parameter>\n" for k, v in args.items())
    return f"<seed:tool_call>\n<function={name}>\n{params}</function>\n</seed:tool_call>"


def typed(key: str, raw: str) -> str:
    return call("get_weather", {key: raw})


FAMILY = Family("seed-oss", call,
                "<seed:tool_call>\n<function=get_weather>\n<oops>\n</function>\n"
                "</seed:tool_call>",
                think=("<seed:think>", "</seed:think>"), typed=typed)

WEATHER = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"location": {"type": "string"}, "unit": {"type": "string"}},
    "required": ["location"]}}}]
SPECIAL = [{"type": "function", "function": {"name": "special_function", "parameters": {
    "type": "object", "properties": {"arg1": {"type": "integer"}}}}},
           {"type": "function", "function": {"name": "process_data", "parameters": {
               "type": "object", "properties": {"input": {"type": "string"},
                                                "format": {"type": "string"}}}}}]


def parse(text: str, **kw):
    kw.setdefault("start", "content")
    return parse_all_ways(text, family="seed-oss", **kw)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.__name__)
def test_rule(rule):
    rule(FAMILY)


# --- what the real template writes ---------------------------------------------------------------


def test_the_templates_own_example_keeps_a_multiline_value():
    """The call format the template's system prompt shows the model."""
    text = ("<seed:tool_call>\n<function=example_function_name>\n"
            "<parameter=example_parameter_1>value_1</parameter>\n"
            "<parameter=example_parameter_2>This is the value for the second parameter\n"
            "that can span\nmultiple lines</parameter>\n</function>\n</seed:tool_call>\n")
    res = parse(text)
    assert [(c.name, c.arguments) for c in res.tool_calls] == [("example_function_name", {
        "example_parameter_1": "value_1",
        "example_parameter_2": "This is the value for the second parameter\nthat can span\n"
                               "multiple lines"})]
    assert not anomalies(res)


def test_the_pack_renders_a_turn_the_parser_reads_back():
    pack = resolve_pack("seed-oss", require_model=False)
    tmpl = pack.chat_template()
    ask = [Message("user", "Weather in Barcelona?")]
    turn = Message("assistant", "Checking.", reasoning_content="Need the city.", tool_calls=(
        {"id": "c0", "type": "function",
         "function": {"name": "get_weather", "arguments": {"location": "Barcelona, Spain"}}},
        {"id": "c1", "type": "function",
         "function": {"name": "get_weather", "arguments": {"location": "Lyon", "unit": "C"}}}))
    prompt = tmpl.render(ask, tools=WEATHER)
    assert prompt.endswith("<seed:bos>assistant\n") and start_state(prompt, "seed-oss") == "content"
    whole = tmpl.render([*ask, turn], tools=WEATHER, add_generation_prompt=False)
    written = whole[len(prompt):].removesuffix("<seed:eos>")
    res = parse(written, tools=WEATHER)
    assert (res.reasoning, res.content) == ("Need the city.", "Checking.")
    assert [c.arguments for c in res.tool_calls] == [{"location": "Barcelona, Spain"},
                                                      {"location": "Lyon", "unit": "C"}]
    assert not anomalies(res)


def test_detected_as_seed_oss_before_qwen_xml():
    text = (TEMPLATES / "seed_oss.jinja").read_text("utf-8")
    assert "<parameter=" in text  # Qwen XML's marker is there too
    assert detect(text).family == "seed-oss"
    assert detect("{{ '<seed:think>' }}").family == "seed-oss"


@pytest.mark.skipif(not SHARED.is_dir(), reason="needs ../shared/templates (the real templates)")
def test_only_seeds_own_template_is_detected_as_seed_oss():
    found = {p.name for p in SHARED.glob("*.jinja")
             if detect(p.read_text("utf-8")).family == "seed-oss"}
    assert found == {REAL}
    assert (SHARED / REAL).read_text("utf-8") == (TEMPLATES / "seed_oss.jinja").read_text("utf-8")


# --- vLLM's cases (tests/tool_parsers/test_seed_oss_tool_parser.py) -------------------------------


def test_vllm_zero_thinking_budget_call():
    text = ("<seed:tool_call>\n<function=get_weather>\n<parameter=location>Barcelona, Spain"
            "</parameter>\n</function>\n</seed:tool_call>")
    res = parse(text, tools=WEATHER)
    assert [(c.name, c.arguments) for c in res.tool_calls] == [
        ("get_weather", {"location": "Barcelona, Spain"})]
    assert res.content == "" and res.finish_reason == "tool_calls"


def test_vllm_budget_reflections_stay_reasoning():
    thought = ("The user's current thinking budget is 512.</seed:cot_budget_reflect>\nLet me "
               "analyze the question.\n<seed:cot_budget_reflect>I have used 131 tokens, and there "
               "are 381 tokens remaining for use.</seed:cot_budget_reflect>\n The unit parameter "
               "can be omitted since it's optional.")
    text = ("<seed:think>" + thought + "</seed:think>\n<seed:tool_call>\n<function=get_weather>\n"
            "<parameter=location>Barcelona, Spain</parameter>\n</function>\n</seed:tool_call>")
    res = parse(text, tools=WEATHER)
    assert res.reasoning == thought
    assert [c.arguments for c in res.tool_calls] == [{"location": "Barcelona, Spain"}]
    assert not anomalies(res)


def test_vllm_a_call_quoted_in_the_reasoning_is_not_a_call():
    """The format quoted mid-sentence in the thinking stays reasoning (vLLM: its tool parser
    reads calls after `</seed:think>` only); the real call after it is the one call."""
    quoted = ("So I should call get_weather. The format is <seed:tool_call>\n<function=get_weather>"
              "\n<parameter=location>Barcelona, Spain</parameter>\n<parameter=unit>celsius"
              "</parameter>\n</function>\n</seed:tool_call>. Wait, let me go with that.")
    text = ("<seed:think>\n" + quoted + "</seed:think><seed:tool_call>\n<function=get_weather>\n"
            "<parameter=location>Barcelona, Spain</parameter>\n<parameter=unit>celsius"
            "</parameter>\n</function>\n</seed:tool_call>")
    res = parse(text, tools=WEATHER)
    assert res.reasoning == quoted
    assert [c.arguments for c in res.tool_calls] == [
        {"location": "Barcelona, Spain", "unit": "celsius"}]
    assert not anomalies(res)


def test_vllm_no_tool_call():
    res = parse("This is a test response without any tool calls", tools=WEATHER)
    assert res.content == "This is a test response without any tool calls"
    assert res.tool_calls == ()


# --- llama.cpp's cases (test_seed_oss_parser) --------------------------------------------------


def test_llama_cpp_reasoning_then_answer():
    res = parse("<seed:think>I'm thinking about the answer</seed:think>Hello, world!")
    assert (res.reasoning, res.content) == ("I'm thinking about the answer", "Hello, world!")


def test_llama_cpp_budget_reflection_after_the_reasoning_is_answer_text():
    reflect = ("<seed:cot_budget_reflect>Token usage: 45/1000\nI should continue thinking to "
               "find the best solution.</seed:cot_budget_reflect>")
    res = parse("<seed:think>Token usage: 45/1000\nI should continue thinking to find the best "
                "solution.</seed:think>" + reflect + "I need to calculate this step by step.")
    assert res.reasoning == ("Token usage: 45/1000\nI should continue thinking to find the "
                             "best solution.")
    assert res.content == reflect + "I need to calculate this step by step."


def test_llama_cpp_typed_and_padded_values():
    res = parse("<seed:think>I need to call the special function</seed:think>"
                "<seed:tool_call>\n<function=special_function>\n<parameter=arg1>\n42\n"
                "</parameter>\n</function>\n</seed:tool_call>", tools=SPECIAL)
    assert res.reasoning == "I need to call the special function"
    assert [(c.name, c.arguments) for c in res.tool_calls] == [("special_function", {"arg1": 42})]
    res = parse("<seed:tool_call>\n<function=process_data>\n<parameter=input>\ntest\n"
                "</parameter>\n<parameter=format>\njson\n</parameter>\n</function>\n"
                "</seed:tool_call>", tools=SPECIAL)
    assert res.tool_calls[0].arguments == {"input": "test", "format": "json"}


def test_llama_cpp_unclosed_reasoning_is_reasoning():
    res = parse("<seed:think>I was thinking")
    assert (res.reasoning, res.content) == ("I was thinking", "")


def test_llama_cpp_partial_call_is_held_then_given_back():
    res = parse("<seed:tool_call>\n<function=process_data>\n<parameter=input>\ntest",
                tools=SPECIAL)
    assert res.tool_calls == () and anomalies(res) == {"unfinished_call": 1}


# --- the family's own rules --------------------------------------------------------------------


def test_several_functions_in_one_section_are_several_calls():
    text = ("<seed:tool_call>\n<function=get_weather>\n<parameter=location>A</parameter>\n"
            "</function>\n<function=get_weather>\n<parameter=location>B</parameter>\n"
            "</function>\n</seed:tool_call>\nBoth.")
    res = parse(text, tools=WEATHER)
    assert [c.arguments["location"] for c in res.tool_calls] == ["A", "B"]
    assert res.content == "Both." and not anomalies(res)


def test_missing_parameter_closer_before_the_function_end_is_repaired():
    res = parse("<seed:tool_call>\n<function=get_weather>\n<parameter=location>Paris"
                "</function>\n</seed:tool_call>", tools=WEATHER)
    assert res.tool_calls[0].arguments == {"location": "Paris"}
    assert anomalies(res) == {"repaired_call": 1}


def test_a_bare_function_is_text():
    text = "<function=get_weather>\n<parameter=location>Paris</parameter>\n</function>"
    res = parse(text, tools=WEATHER)
    assert res.tool_calls == () and res.content == text


def test_prose_after_the_opener_is_text():
    text = "Seed writes <seed:tool_call> before a call."
    res = parse(text)
    assert res.tool_calls == () and res.content == text


def test_a_complete_call_without_its_section_end_is_accepted():
    res = parse("<seed:tool_call>\n<function=get_weather>\n<parameter=location>Paris"
                "</parameter>\n</function>", tools=WEATHER)
    assert res.tool_calls[0].arguments == {"location": "Paris"} and not anomalies(res)


def test_qwen_xml_still_reads_its_own_calls_and_not_seeds():
    qwen = "<tool_call>\n<function=f>\n<parameter=k>\nv\n</parameter>\n</function>\n</tool_call>"
    res = parse_all_ways(qwen, family="qwen-xml", start="content")
    assert [(c.name, c.arguments) for c in res.tool_calls] == [("f", {"k": "v"})]
    res = parse(qwen)
    assert res.tool_calls == () and res.content == qwen


def test_reader_directly():
    body = "\n<function=f>\n<parameter=k>v</parameter>\n</function>\n</seed:tool_call>"
    p = read_all_ways(seed_oss, body + "tail")
    assert (p.name, p.arguments, p.end) == ("f", {"k": "v"}, len(body))
    assert p.follow() is None
    p = read_all_ways(seed_oss, "<function=f>\n</function>\n<function=g>\n</function>")
    assert (p.name, p.arguments, p.end) == ("f", {}, len("<function=f>\n</function>\n"))
    assert isinstance(p.follow(), seed_oss.CallParser)
    assert issubclass(seed_oss.CallParser, qwen_xml.CallParser)


def test_start_state_and_stops():
    assert start_state("<seed:bos>assistant\n", "seed-oss") == "content"
    assert start_state("<seed:bos>assistant\n<seed:think>", "seed-oss") == "reasoning"
    budget0 = ("<seed:bos>assistant\n<seed:think>\n<seed:cot_budget_reflect>The current thinking "
               "budget is 0.</seed:cot_budget_reflect>\n</seed:think>")
    assert start_state(budget0, "seed-oss") == "content"
    assert seed_oss.FAMILY.stops == ("<seed:eos>",)
    assert "<seed:cot_budget_reflect>" in seed_oss.FAMILY.preserved_tokens
