"""engine/parse/families/command_r7b.py (Command R7B, Command A, Cohere2): every parser rule
(tests/engine/parse/family_rules.py) and the family's own cases, each parsed at every chunking,
stream_tools off and on. The outputs come from the family's real templates
(/work/shared/templates: CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja, Cohere2MoE.jinja),
from llama.cpp's tests/test-chat.cpp (its Command R7B cases) and from SGLang's gateway
(lightseekorg/smg tool_parser/src/parsers/cohere.rs, its tests)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.chat.detect import detect, start_state
from engine.chat.request import Message
from engine.chat.template import ChatTemplate
from engine.parse.events import TOOL_CALL, TOOL_START
from engine.parse.families import REGISTRY
from engine.parse.families import command_r7b as r7b
from tests.engine.parse.family_harness import read_all_ways
from tests.engine.parse.family_rules import RULES, Family
from tests.engine.parse.parser_harness import TOOLS, parse_all_ways, run

SHARED = Path(__file__).resolve().parents[5] / "shared" / "templates"
TEMPLATES = ("CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja", "Cohere2MoE.jinja")
needs_templates = pytest.mark.skipif(not SHARED.is_dir(),
                                     reason="needs ../shared/templates (the real templates)")


def obj(name: str, args: dict, cid: str = "0") -> str:
    return json.dumps({"tool_call_id": cid, "tool_name": name, "parameters": args})


def call(name: str, args: dict) -> str:
    return f"{r7b.ACTION}[\n    {obj(name, args)}\n]{r7b.ACTION_END}"


FAMILY = Family("command-r7b", call,
                r7b.ACTION + '[{"tool_call_id": "0", "tool_name": "get_weather", '
                '"parameters": {"city": "Paris",}}]' + r7b.ACTION_END,
                think=(r7b.THINK, r7b.THINK_END))


def parse(text: str, **kw):
    kw.setdefault("start", "content")
    kw.setdefault("tools", TOOLS)
    return parse_all_ways(text, family="command-r7b", **kw)


def calls(res) -> list[tuple]:
    return [(c.id, c.name, c.arguments) for c in res.tool_calls]


def anomalies(res) -> dict:
    return {k: v for k, v in res.anomalies.items() if v}


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.__name__)
def test_rule(rule):
    rule(FAMILY)


# --- llama.cpp's tests/test-chat.cpp (Command R7B) ------------------------------------------


def test_llama_cpp_response_only():
    res = parse("<|START_RESPONSE|>Hello, world!\nWhat's up?<|END_RESPONSE|>")
    assert (res.reasoning, res.content, res.tool_calls) == ("", "Hello, world!\nWhat's up?", ())


def test_llama_cpp_thoughts_then_response():
    res = parse("<|START_THINKING|>I'm\nthinking<|END_THINKING|>"
                "<|START_RESPONSE|>Hello, world!\nWhat's up?<|END_RESPONSE|>")
    assert (res.reasoning, res.content) == ("I'm\nthinking", "Hello, world!\nWhat's up?")
    assert not anomalies(res)


def test_llama_cpp_thoughts_then_action_keeps_the_models_call_id():
    res = parse("<|START_THINKING|>I'm\nthinking<|END_THINKING|>"
                "<|START_ACTION|>[\n"
                '    {"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"days": 1}}\n'
                "]<|END_ACTION|>")
    assert res.reasoning == "I'm\nthinking" and res.content == ""
    assert calls(res) == [("0", "get_weather", {"days": 1})]
    assert res.finish_reason == "tool_calls" and not anomalies(res)


def test_llama_cpp_empty_thoughts_then_action():
    res = parse("<|START_THINKING|><|END_THINKING|><|START_ACTION|>[\n"
                '    {"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"days": 1}}\n'
                "]<|END_ACTION|>")
    assert (res.reasoning, res.content) == ("", "")
    assert calls(res) == [("0", "get_weather", {"days": 1})]


def test_llama_cpp_partial_action_is_an_unfinished_call():
    text = ("<|START_THINKING|>I'm\nthinking<|END_THINKING|><|START_ACTION|>[\n"
            '    {"tool_call_id": "0", "tool_name": "special')
    res = parse(text)
    assert res.reasoning == "I'm\nthinking" and res.tool_calls == ()
    assert anomalies(res) == {"unfinished_call": 1}
    assert res.content == text[text.index(r7b.ACTION):]


# --- SGLang's gateway (smg tool_parser/src/parsers/cohere.rs, its tests) ---------------------


def test_smg_single_object_after_a_response():
    res = parse("<|START_RESPONSE|>Let me search for that.<|END_RESPONSE|>\n<|START_ACTION|>\n"
                '{"tool_name": "search", "parameters": {"query": "rust programming"}}\n'
                "<|END_ACTION|>", tools=())
    assert res.content == "Let me search for that."
    assert [(c.name, c.arguments) for c in res.tool_calls] == [
        ("search", {"query": "rust programming"})]
    assert res.tool_calls[0].id.startswith("call_")  # no id of its own: Prism numbers it


def test_smg_multiple_tool_calls_array():
    res = parse('<|START_ACTION|>\n[\n  {"tool_name": "search", "parameters": {"query": "rust"}},\n'
                '  {"tool_name": "get_weather", "parameters": {"city": "Paris"}}\n]\n'
                "<|END_ACTION|>", tools=())
    assert [(c.name, c.arguments) for c in res.tool_calls] == [
        ("search", {"query": "rust"}), ("get_weather", {"city": "Paris"})]
    assert [c.index for c in res.tool_calls] == [0, 1] and res.content == ""


def test_smg_empty_parameters_and_nested_json():
    res = parse('<|START_ACTION|>{"tool_name": "ping"}<|END_ACTION|>', tools=())
    assert [(c.name, c.arguments) for c in res.tool_calls] == [("ping", {})]
    res = parse('<|START_ACTION|>\n{"tool_name": "process", "parameters": {"config": '
                '{"nested": {"value": [1, 2, 3]}}}}\n<|END_ACTION|>', tools=())
    assert res.tool_calls[0].arguments == {"config": {"nested": {"value": [1, 2, 3]}}}


def test_smg_text_markers_are_markup():
    res = parse('<|START_TEXT|>Some intro<|END_TEXT|>\n<|START_ACTION|>{"tool_name": "test", '
                '"parameters": {}}<|END_ACTION|>\n<|START_TEXT|>Conclusion<|END_TEXT|>', tools=())
    assert [c.name for c in res.tool_calls] == ["test"]
    assert res.content == "Some introConclusion" and "<|" not in res.content


def test_smg_malformed_json_is_text():
    text = '<|START_ACTION|>{"tool_name": invalid}<|END_ACTION|>'
    res = parse(text, tools=())
    assert res.tool_calls == () and anomalies(res) == {"malformed_call": 1}
    assert res.content == text


# --- the real templates -------------------------------------------------------------------------


@needs_templates
@pytest.mark.parametrize("name", TEMPLATES)
def test_the_real_templates_are_detected_as_command_r7b(name):
    assert detect((SHARED / name).read_text("utf-8")).family == "command-r7b"


@needs_templates
def test_no_other_real_template_is_detected_as_command_r7b():
    for path in sorted(SHARED.glob("*.jinja")):
        if path.name not in TEMPLATES:
            assert detect(path.read_text("utf-8")).family != "command-r7b", path.name


WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                           "days": {"type": "integer"}}}}}
TWO = (("get_weather", {"city": "Paris", "days": 2}), ("get_weather", {"city": "Lyon"}))
TURN = Message("assistant", "", reasoning_content="Need both cities.",
               tool_calls=tuple({"id": f"call_{i}", "type": "function",
                                 "function": {"name": n, "arguments": a}}
                                for i, (n, a) in enumerate(TWO)))
ASK = Message("user", "Weather in Paris for two days, and Lyon?")


def turn_text(name: str, turn: Message, **kw) -> tuple[str, str]:
    """(prompt, what the template writes for `turn` after it): the text between the prompt's
    assistant opener and the turn's end. R7B's template writes its generation prompt even
    without add_generation_prompt, so the turn is cut at its end-of-turn token."""
    tpl = ChatTemplate((SHARED / name).read_text("utf-8"), bos_token="<BOS_TOKEN>",
                       family="command-r7b")
    prompt = tpl.render([ASK], tools=[WEATHER], **kw)
    whole = tpl.render([ASK, turn], tools=[WEATHER], add_generation_prompt=False, **kw)
    opener = "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"
    at = whole.rindex(opener, 0, whole.rindex(r7b.TURN_END)) + len(opener)
    body = whole[at:whole.index(r7b.TURN_END, at)]
    # where the prompt leaves the model: after the opener, less what it already wrote
    head = prompt[prompt.rindex(opener) + len(opener):]
    assert body.startswith(head) or head == r7b.THINK + r7b.THINK_END, (head, body)
    return prompt, body[len(head):] if body.startswith(head) else body


@needs_templates
@pytest.mark.parametrize("name", TEMPLATES)
def test_what_the_real_templates_write_for_two_calls_is_read_back(name):
    prompt, text = turn_text(name, TURN, enable_thinking=True)
    start = start_state(prompt, "command-r7b")
    assert start == ("reasoning" if name == "Cohere2MoE.jinja" else "content")
    res = parse(text, start=start, tools=[WEATHER])
    assert res.reasoning == "Need both cities." and res.content == ""
    # the templates number the calls themselves ("0", "1"): those ids are kept
    assert calls(res) == [(str(i), n, a) for i, (n, a) in enumerate(TWO)]
    assert not anomalies(res)


@needs_templates
@pytest.mark.parametrize("name", TEMPLATES)
def test_what_the_real_templates_write_as_an_answer_is_read_back(name):
    answer = Message("assistant", "Sunny, 21 degrees.", reasoning_content="Easy.")
    prompt, text = turn_text(name, answer, enable_thinking=True)
    res = parse(text, start=start_state(prompt, "command-r7b"))
    assert res.content == "Sunny, 21 degrees." and not anomalies(res)
    # R7B's template drops the reasoning of an answer; Cohere2's writes it
    assert res.reasoning == ("Easy." if "Easy." in text else "")


@needs_templates
def test_r7b_thinking_off_prompt_closes_the_reasoning_for_the_model():
    tpl = ChatTemplate((SHARED / TEMPLATES[0]).read_text("utf-8"))
    prompt = tpl.render([ASK])
    assert prompt.endswith(r7b.THINK + r7b.THINK_END)
    assert start_state(prompt, "command-r7b") == "content"
    assert start_state(tpl.render([ASK], enable_thinking=True), "command-r7b") == "content"


@needs_templates
def test_the_writer_writes_the_calls_as_the_template_does():
    from engine.parse.events import ToolCall

    _, text = turn_text(TEMPLATES[1], TURN)
    written = REGISTRY["command-r7b"].writer.write(
        "Need both cities.", "", [ToolCall(str(i), n, a, i) for i, (n, a) in enumerate(TWO)],
        opened=True)
    assert written == text


# --- the family's own cases ---------------------------------------------------------------------


def test_the_call_id_streams_with_the_calls_first_event():
    text = call("get_weather", {"city": "Paris"}).replace('"0"', '"7"')
    for chunks in (None, [1] * len(text)):
        events = run(text, chunks, family="command-r7b", start="content", stream_tools=True)
        ids = {e.call_id for e in events if e.kind in (TOOL_START, TOOL_CALL)}
        assert ids == {"7"}


def test_an_id_after_the_name_or_a_repeated_one_is_not_kept():
    text = (r7b.ACTION + '[{"tool_name": "get_weather", "tool_call_id": "5", "parameters": {}},'
            ' {"tool_call_id": "1", "tool_name": "read_file", "parameters": {}},'
            ' {"tool_call_id": "1", "tool_name": "read_file", "parameters": {}}]' + r7b.ACTION_END)
    res = parse(text)
    ids = [c.id for c in res.tool_calls]
    assert ids[1] == "1" and ids[0] != "5" and ids[2] not in ("1", ids[0])
    assert len(set(ids)) == 3


def test_a_call_written_inside_the_reasoning_ends_it():
    res = parse("Plan: look it up.\n" + call("get_weather", {"city": "Oslo"}), start="reasoning")
    assert res.reasoning == "Plan: look it up." and calls(res) == [
        ("0", "get_weather", {"city": "Oslo"})]
    assert anomalies(res) == {"implicit_reasoning_end": 1}


def test_an_action_in_prose_or_without_a_call_object_is_text():
    for text in ("Use <|START_ACTION|> to act.", "<|START_ACTION|>[]<|END_ACTION|>",
                 '<|START_ACTION|>["a", "b"]<|END_ACTION|>'):
        res = parse(text)
        assert res.tool_calls == () and res.content == text and not anomalies(res), text


def test_text_after_the_action_is_answer():
    res = parse(call("get_weather", {}) + "\nDone.")
    assert res.content == "Done." and len(res.tool_calls) == 1


def test_a_list_without_its_closer_still_ends_the_call():
    res = parse(r7b.ACTION + "[" + obj("get_weather", {}) + "] and more")
    assert calls(res) == [("0", "get_weather", {})] and res.content == " and more"


def test_name_and_arguments_spellings():
    res = parse(r7b.ACTION + '[{"name": "get_weather", "arguments": {"days": 2}}]' + r7b.ACTION_END)
    assert [(c.name, c.arguments) for c in res.tool_calls] == [("get_weather", {"days": 2})]


def test_stray_end_thinking_in_the_answer_is_dropped():
    res = parse("<|START_RESPONSE|>Hi<|END_THINKING|> there<|END_RESPONSE|>")
    assert res.content == "Hi there" and anomalies(res) == {"stray_think_end": 1}


def test_reader_directly():
    body = "[\n    " + obj("f", {"q": [1]}) + "\n]" + r7b.ACTION_END
    p = read_all_ways(r7b, body + "tail")
    assert (p.name, p.arguments, p.end, p.call_id) == ("f", {"q": [1]}, len(body), "0")
    p = read_all_ways(r7b, '[{"tool_name": 3}]')
    assert p.error == "no name"
