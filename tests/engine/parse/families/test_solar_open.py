"""engine/parse/families/solar_open.py (Solar Open 100B): every parser rule
(tests/engine/parse/family_rules.py) and the family's own cases, each parsed at every chunking,
stream_tools off and on. The outputs are what upstage-Solar-Open-100B.jinja writes for an
assistant turn, and vLLM's tests of its Solar Open parsers (tests/tool_parsers/
test_solar_open_tool_parser.py, tests/reasoning/test_solar_open_reasoning_parser.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.chat.detect import detect, start_state
from engine.chat.template import ChatTemplate
from engine.parse.families import solar_open as s
from tests.engine.parse.family_harness import read_all_ways
from tests.engine.parse.family_rules import RULES, Family
from tests.engine.parse.parser_harness import anomalies, parse_all_ways

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {
        "type": "object", "properties": {"tz": {"type": "string"}}}}}]
REAL = Path(__file__).resolve().parents[5] / "shared" / "templates"  # the real ones


def one(name: str, args, call_id: str = "a1b2c3d4e5") -> str:
    body = args if isinstance(args, str) else json.dumps(args)
    return f"{s.CALL}{call_id}{s.CALL_NAME}{name}{s.CALL_ARGS}{body}{s.CALL_END}"


def call(name: str, args: dict) -> str:
    return s.CALLS + one(name, args)


FAMILY = Family("solar-open", call, s.CALLS + one("get_weather", '{"city": Paris}'),
                think=(s.THINK, s.END))


def parse(text: str, **kw):
    kw.setdefault("start", "content")
    return parse_all_ways(text, family="solar-open", tools=TOOLS, **kw)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.__name__)
def test_rule(rule):
    rule(FAMILY)


# --- what the template writes (upstage-Solar-Open-100B.jinja) ------------------------------------


def test_reasoning_then_the_answer_message():
    res = parse("<|think|>Let me think.<|end|><|begin|>assistant<|content|>The answer is 42.")
    assert (res.reasoning, res.content) == ("Let me think.", "The answer is 42.")
    assert res.tool_calls == ()
    assert not anomalies(res) and res.finish_reason == "stop"


def test_reasoning_then_a_tool_calls_message():
    res = parse("<|think|>I should call a tool.<|end|><|begin|>assistant" + call(
        "get_weather", {"city": "Seoul"}) + s.CALLS_END)
    assert res.reasoning == "I should call a tool." and res.content == ""
    assert [(c.id, c.name, c.arguments) for c in res.tool_calls] == [
        ("a1b2c3d4e5", "get_weather", {"city": "Seoul"})]
    assert not anomalies(res) and res.finish_reason == "tool_calls"


def test_an_answer_message_then_a_tool_calls_message():
    # vLLM's test_content_before_tool_calls: the content message ends at <|end|>
    text = ("Let me check.<|end|><|begin|>assistant<|tool_calls|>"
            + one("get_weather", {"city": "Seoul"}))
    res = parse(text)
    assert res.content == "Let me check." and len(res.tool_calls) == 1 and not anomalies(res)


def test_parallel_calls_share_one_message_and_keep_their_ids():
    text = (s.CALLS + one("get_weather", {"city": "Seoul"}, "a1b2c3d4e5")
            + one("get_time", {"tz": "UTC"}, "f6g7h8i9j0") + s.CALLS_END)
    res = parse(text, stream_tools=True)
    assert [(c.id, c.name, c.arguments) for c in res.tool_calls] == [
        ("a1b2c3d4e5", "get_weather", {"city": "Seoul"}), ("f6g7h8i9j0", "get_time", {"tz": "UTC"})]
    assert res.content == ""


def test_low_effort_prompt_closed_the_reasoning():
    # reasoning_effort low: the prompt ends `<|think|><|end|><|begin|>assistant`
    prompt = "<|begin|>user<|content|>Hi<|end|><|begin|>assistant<|think|><|end|><|begin|>assistant"
    assert start_state(prompt, "solar-open") == "content"
    res = parse("<|content|>Hello!")
    assert (res.reasoning, res.content) == ("", "Hello!")


def test_truncated_reasoning_and_an_empty_answer():
    assert parse("<|think|>Still thinking").reasoning == "Still thinking"
    res = parse("<|think|>Done.<|end|><|begin|>assistant<|content|>")
    assert (res.reasoning, res.content) == ("Done.", "")


def test_text_between_messages_is_answer_text():
    # vLLM's test_streaming_unexpected_transition_text_no_marker_leak
    res = parse("<|think|>R<|end|>stray<|begin|>assistant<|content|>Hi")
    assert (res.reasoning, res.content) == ("R", "strayHi") and not anomalies(res)


def test_an_answer_message_ended_by_end_or_flush_is_not_a_stray_closer():
    for text in ("Hello.<|end|>", "Hello.<|end|>\n", "Hello.<|flush|>", "Hello.<|end|><|flush|>"):
        res = parse(text)
        assert res.content == "Hello." and not anomalies(res), text


def test_a_stray_end_mid_answer_is_dropped_and_counted():
    res = parse("One.<|end|>Two.<|end|><|begin|>assistant<|content|>Three.")
    assert res.content == "One.Two.Three." and anomalies(res) == {"stray_think_end": 1}


def test_markup_never_leaks_with_angle_brackets_in_the_text():
    # vLLM's test_streaming_no_template_tokens_leak
    res = parse("<|think|>Some thought with < and <| inside.<|end|>"
                "<|begin|>assistant<|content|>Answer with < bracket.")
    assert (res.reasoning, res.content) == ("Some thought with < and <| inside.",
                                            "Answer with < bracket.")


def test_a_forgotten_end_still_opens_the_answer_and_think_reopens_reasoning():
    res = parse("<|think|>R<|begin|>assistant<|content|>A<|end|><|begin|>assistant<|think|>S"
                "<|end|><|begin|>assistant<|content|>B")
    assert (res.reasoning, res.content) == ("RS", "AB") and not anomalies(res)


def test_arguments_are_json_typed_and_kept_with_markup_inside():
    res = parse(call("get_weather", {"city": "<b>", "days": 3}))
    assert res.tool_calls[0].arguments == {"city": "<b>", "days": 3}
    res = parse(call("get_weather", {"city": "x<|tool_call:end|>y"}))
    assert res.tool_calls[0].arguments == {"city": "x<|tool_call:end|>y"}


def test_python_literal_arguments_are_a_repaired_call():
    # vLLM's test_python_literal_args_normalized
    res = parse(s.CALLS + one("get_weather", "{'city': 'Seoul', 'days': 3}"), stream_tools=True)
    assert res.tool_calls[0].arguments == {"city": "Seoul", "days": 3}
    assert anomalies(res) == {"repaired_call": 1}
    # begun as JSON, then a Python string: the streamed part is kept, the rest follows
    res = parse(s.CALLS + one("get_weather", "{\"city\": 'Seoul', \"days\": True}"),
                stream_tools=True)
    assert res.tool_calls[0].arguments == {"city": "Seoul", "days": True}


@pytest.mark.parametrize("args", ['{"city": "Seoul", broken', "[" * 2000, "{'a': {1, 2}}", "[1]"])
def test_arguments_neither_json_nor_a_literal_object_leave_the_call_as_text(args):
    # vLLM's test_malformed_args_round_trip and test_deeply_nested_args_do_not_crash keep the raw
    # string as arguments; here the call is text, counted malformed
    text = s.CALLS + one("get_weather", args)
    res = parse(text)
    assert res.tool_calls == () and res.content == text
    assert anomalies(res) == {"malformed_call": 1}


def test_ids_empty_or_any_word_and_a_call_without_its_message_opener():
    # vLLM's test_tool_call_without_section_wrapper and its empty, invalid ids
    res = parse(one("get_weather", {}, "") + one("get_weather", {}, "NOT-VALID"))
    assert [c.id for c in res.tool_calls][1] == "NOT-VALID"
    assert res.tool_calls[0].id != "" and len(res.tool_calls) == 2


def test_unicode_arguments():
    res = parse(call("get_weather", {"city": "서울"}))
    assert res.tool_calls[0].arguments == {"city": "서울"}


def test_tool_call_markup_in_the_answer_without_a_name_tag_is_text():
    text = "Use <|tool_call:begin|> to start a call."
    res = parse(text)
    assert res.content == text and res.tool_calls == ()


def test_reader_directly():
    body = one("get_weather", {"q": [1]}) + " " + s.CALLS_END
    p = read_all_ways(s, body + "tail")
    assert (p.name, p.arguments, p.end, p.call_id) == ("get_weather", {"q": [1]}, len(body),
                                                        "a1b2c3d4e5")
    p = read_all_ways(s, one("get_weather", "{'q': None}"))
    assert (p.arguments, p.repairs) == ({"q": None}, ["python literal arguments"])
    p = read_all_ways(s, "a1<|tool_call:name|>f<|tool_call:args|>{}", eof=True)
    assert p.done and p.arguments == {}  # a whole body at the end of output, no call end


def test_writer_and_ids_in_the_templates_form():
    fam = s.FAMILY
    from engine.parse.events import ToolCall

    text = fam.writer.write("r", "a", [ToolCall("call_0", "f", {"x": 1}, 0)])
    assert text == ("<|think|>r<|end|><|begin|>assistant<|content|>a<|end|><|begin|>assistant"
                    '<|tool_calls|><|tool_call:begin|>call_0<|tool_call:name|>f'
                    '<|tool_call:args|>{"x": 1}<|tool_call:end|>')
    cid = fam.call_id("3fa9c0de", 7)
    assert len(cid) == 10 and cid.isalnum() and cid == cid.lower() and cid.endswith("7")
    assert fam.call_id("3fa9c0de", 1) != fam.call_id("3fa9c0de", 11)


# --- detection, stops, the pack ---------------------------------------------------------------


@pytest.mark.skipif(not REAL.is_dir(), reason="needs ../shared/templates (the real templates)")
def test_the_real_template_is_detected_and_harmony_stays_harmony():
    assert detect((REAL / "upstage-Solar-Open-100B.jinja").read_text()).family == "solar-open"
    assert detect((REAL / "openai-gpt-oss-120b.jinja").read_text()).family == "harmony"
    for name in ("google-gemma-4-31B-it.jinja", "microsoft-Phi-3.5-mini-instruct.jinja"):
        assert detect((REAL / name).read_text()).family != "solar-open", name


def test_end_is_never_a_stop_and_the_pack_stops_on_the_turn_ends_only():
    from engine.chat.packs import builtin_packs

    fam = s.FAMILY
    assert s.END in fam.never_stops and s.END not in fam.stops
    spec = builtin_packs()["solar-open"]
    assert s.END not in spec.stop and spec.stop == (s.FLUSH, s.CALLS_END)


def test_the_pack_renders_the_real_template_for_the_parser():
    from engine.chat.packs import TEMPLATES
    from engine.chat.request import Message

    tmpl = ChatTemplate((TEMPLATES / "solar_open.jinja").read_text(), family="solar-open")
    call_msg = {"id": "a1b2c3d4e5", "type": "function",
                "function": {"name": "get_weather", "arguments": {"city": "Seoul"}}}
    ask = [Message("user", "Weather in Seoul?")]
    prompt = tmpl.render(ask, tools=TOOLS)
    assert prompt.endswith("<|begin|>assistant") and start_state(prompt, "solar-open") == "content"
    whole = tmpl.render([*ask, Message("assistant", "", tool_calls=(call_msg,))], tools=TOOLS,
                        add_generation_prompt=False)
    written = whole[len(prompt):].removesuffix(s.CALLS_END)
    res = parse(written)
    assert [(c.id, c.name, c.arguments) for c in res.tool_calls] == [
        ("a1b2c3d4e5", "get_weather", {"city": "Seoul"})]
    assert res.content == "" and not anomalies(res)
