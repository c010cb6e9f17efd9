"""engine/parse/families/command_r_plus.py (Command R+, Command R): every parser rule
(tests/engine/parse/family_rules.py) and the family's own cases, each parsed at every chunking,
stream_tools off and on. The outputs come from the family's real template
(/work/shared/templates/CohereForAI-c4ai-command-r-plus-tool_use.jinja: what it writes for an
assistant turn with calls, and the example its instructions give). Neither llama.cpp, vLLM nor
SGLang parses this format (llama.cpp's tests read this template as content only), so there
are no cases of theirs to take."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.chat.detect import detect
from engine.chat.request import Message
from engine.chat.template import ChatTemplate, TemplateError
from engine.parse.events import ToolCall
from engine.parse.families import REGISTRY
from engine.parse.families import command_r_plus as rp
from tests.engine.parse.family_harness import read_all_ways
from tests.engine.parse.family_rules import RULES, Family
from tests.engine.parse.parser_harness import TOOLS, parse_all_ways

SHARED = Path(__file__).resolve().parents[5] / "shared" / "templates"
TEMPLATE = "CohereForAI-c4ai-command-r-plus-tool_use.jinja"
needs_templates = pytest.mark.skipif(not SHARED.is_dir(),
                                     reason="needs ../shared/templates (the real templates)")


def call(name: str, args: dict) -> str:
    return REGISTRY["command-r-plus"].writer.write_call(ToolCall("c", name, args, 0))


FAMILY = Family("command-r-plus", call,
                'Action:\n```json\n[{"tool_name": "get_weather", "parameters": {"city": '
                '"Paris",}}]```', think=None)


def parse(text: str, **kw):
    kw.setdefault("start", "content")
    kw.setdefault("tools", TOOLS)
    return parse_all_ways(text, family="command-r-plus", **kw)


def anomalies(res) -> dict:
    return {k: v for k, v in res.anomalies.items() if v}


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.__name__)
def test_rule(rule):
    rule(FAMILY)


def test_the_written_call_is_the_templates_layout():
    assert call("get_weather", {"city": "Paris", "days": 2}) == (
        "Action:\n```json\n[\n    {\n        \"tool_name\": \"get_weather\",\n"
        "        \"parameters\": {\n            \"city\": \"Paris\",\n            \"days\": 2\n"
        "        }\n    }\n]```")
    assert call("ping", {}).endswith('"parameters": {}\n    }\n]```')


# --- the real template --------------------------------------------------------------------------

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather",
           "parameters": {"type": "object", "properties": {
               "city": {"type": "string", "description": "The city"},
               "days": {"type": "integer", "description": "How many days"}},
               "required": ["city"]}}}
TWO = (("get_weather", {"city": "Paris", "days": 2}), ("get_weather", {"city": "Lyon"}))


def template() -> ChatTemplate:
    return ChatTemplate((SHARED / TEMPLATE).read_text("utf-8"), bos_token="<BOS_TOKEN>",
                        family="command-r-plus")


@needs_templates
def test_the_real_template_is_detected_and_no_other_is():
    for path in sorted(SHARED.glob("*.jinja")):
        found = detect(path.read_text("utf-8")).family
        assert (found == "command-r-plus") == (path.name == TEMPLATE), path.name


@needs_templates
def test_what_the_real_template_writes_for_two_calls_is_read_back():
    turn = Message("assistant", "Checking both.",
                   tool_calls=tuple({"id": f"call_{i}", "type": "function",
                                     "function": {"name": n, "arguments": a}}
                                    for i, (n, a) in enumerate(TWO)))
    whole = template().render([Message("user", "Weather?"), turn], tools=[WEATHER],
                              add_generation_prompt=False)
    opener = "<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>"
    # the turn runs to the next one (the template closes a turn with calls by no token)
    text = whole[whole.rindex(opener) + len(opener):whole.index("<|START_OF_TURN_TOKEN|>",
                                                                 whole.rindex(opener) + 1)]
    res = parse(text, tools=[WEATHER])
    assert res.content == "Checking both." and not anomalies(res)
    assert [(c.name, c.arguments) for c in res.tool_calls] == list(TWO)
    # and the writer writes that turn as the template does
    written = REGISTRY["command-r-plus"].writer.write(
        None, "Checking both.", [ToolCall(f"call_{i}", n, a, i) for i, (n, a) in enumerate(TWO)])
    assert written + "\n" == text


@needs_templates
def test_the_instructions_example_is_not_a_call():
    """The template's own example (in its last system turn) has placeholders, not JSON."""
    prompt = template().render([Message("user", "Hi")], tools=[WEATHER])
    example = prompt[prompt.rindex("```json"):prompt.rindex("```") + 3]
    res = parse("Action:\n" + example)
    assert res.tool_calls == () and anomalies(res) == {"malformed_call": 1}


@needs_templates
def test_why_the_real_template_ships_no_pack():
    """It cannot render a request without tools, nor a tool whose parameters have no
    description (transformers fails alike: jinja's `Undefined` + a string)."""
    with pytest.raises(TemplateError):
        template().render([Message("user", "Hi")])
    bare = {"type": "function", "function": {"name": "f", "description": "d", "parameters": {
        "type": "object", "properties": {"x": {"type": "string"}}, "required": []}}}
    with pytest.raises(TemplateError, match="description"):
        template().render([Message("user", "Hi")], tools=[bare])
    assert REGISTRY["command-r-plus"].pack is None


# --- the family's own cases ---------------------------------------------------------------------


def test_directly_answer_is_a_call_to_an_undeclared_tool():
    text = 'Action:\n```json\n[\n    {\n        "tool_name": "directly-answer",\n' \
           '        "parameters": {}\n    }\n]```'
    res = parse(text)
    assert [(c.name, c.arguments) for c in res.tool_calls] == [("directly-answer", {})]
    assert anomalies(res) == {"unknown_tool": 1}


def test_plan_then_action():
    text = ("Plan: First I will search for the weather.\nAction: ```json\n"
            '[{"tool_name": "get_weather", "parameters": {"city": "Oslo"}}]\n```')
    res = parse(text)
    assert res.content == "Plan: First I will search for the weather."
    assert [(c.name, c.arguments) for c in res.tool_calls] == [("get_weather", {"city": "Oslo"})]


def test_action_without_a_fence_and_a_lone_object():
    for text in ('Action: [{"tool_name": "get_weather", "parameters": {"days": 1}}]',
                 'Action:\n{"tool_name": "get_weather", "parameters": {"days": 1}}'):
        res = parse(text)
        assert [(c.name, c.arguments) for c in res.tool_calls] == [("get_weather", {"days": 1})]
        assert res.content == "" and not anomalies(res), text


def test_action_in_prose_is_text():
    for text in ("The next Action: is to wait.", "Action: wait for the user.",
                 "Action:\n```python\nprint(1)\n```", "  Action: [{\"tool_name\": \"x\"}]"):
        res = parse(text)
        assert res.tool_calls == () and res.content == text, text


def test_reader_directly():
    body = '\n```json\n[{"tool_name": "f", "parameters": {"q": [1]}}]```'
    p = read_all_ways(rp, body + "\ntail")
    assert (p.name, p.arguments, p.end) == ("f", {"q": [1]}, len(body))
    p = read_all_ways(rp, ' ```json\n[{"tool_name": "f"}, {"tool_name": "g"}]```')
    assert (p.name, p.end) == ("f", len(' ```json\n[{"tool_name": "f"},'))
    assert json.dumps(p.arguments) == "{}"
