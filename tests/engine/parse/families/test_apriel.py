"""engine/parse/families/apriel.py (Apriel 1.5 / 1.6 Thinker): every parser rule
(tests/engine/parse/family_rules.py) and the family's own cases, each parsed at every chunking,
stream_tools off and on. The outputs come from the family's real templates
(/work/shared/templates: unsloth-Apriel-1.5.jinja, Apriel-1.6-15b-Thinker-fixed.jinja), from
vLLM's `apriel` reasoning parser (vllm/reasoning/apriel_reasoning_parser.py: everything before
`[BEGIN FINAL RESPONSE]` is reasoning, `[END FINAL RESPONSE]` / `<|end|>` end the answer) and
its `apriel` tool parser (`<tool_calls>[{"name", "arguments"}, ...]</tool_calls>`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.chat.detect import detect, start_state
from engine.chat.request import Message
from engine.chat.template import ChatTemplate
from engine.parse.events import ToolCall
from engine.parse.families import REGISTRY
from engine.parse.families import apriel as ap
from tests.engine.parse.family_harness import read_all_ways
from tests.engine.parse.family_rules import RULES, Family
from tests.engine.parse.parser_harness import TOOLS, parse_all_ways

SHARED = Path(__file__).resolve().parents[5] / "shared" / "templates"
TEMPLATES = ("unsloth-Apriel-1.5.jinja", "Apriel-1.6-15b-Thinker-fixed.jinja")
needs_templates = pytest.mark.skipif(not SHARED.is_dir(),
                                     reason="needs ../shared/templates (the real templates)")


def call(name: str, args: dict) -> str:
    return f'{ap.CALLS}[{json.dumps({"name": name, "arguments": args})}]{ap.CALLS_END}'


FAMILY = Family("apriel", call,
                ap.CALLS + '[{"name": "get_weather", "arguments": {"city": "Paris",}}]'
                + ap.CALLS_END, think=(ap.REASONING, ap.FINAL))


def parse(text: str, **kw):
    kw.setdefault("start", "content")
    kw.setdefault("tools", TOOLS)
    return parse_all_ways(text, family="apriel", **kw)


def calls(res) -> list[tuple]:
    return [(c.name, c.arguments) for c in res.tool_calls]


def anomalies(res) -> dict:
    return {k: v for k, v in res.anomalies.items() if v}


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.__name__)
def test_rule(rule):
    rule(FAMILY)


# --- what the model writes (vLLM's apriel parsers) ----------------------------------------------


def test_apriel_1_5_opens_its_own_reasoning():
    res = parse("Here are my reasoning steps:\nThe user asks for a caption.\n"
                "[BEGIN FINAL RESPONSE]\nTwo tabby cats on a pink couch.\n[END FINAL RESPONSE]")
    assert res.reasoning == "The user asks for a caption."
    assert res.content == "Two tabby cats on a pink couch." and not anomalies(res)


def test_apriel_1_6_continues_the_prompts_reasoning():
    res = parse("1. x\n[BEGIN FINAL RESPONSE]\nParis.\n[END FINAL RESPONSE]", start="reasoning")
    assert (res.reasoning, res.content) == ("1. x", "Paris.")


def test_reasoning_then_the_calls():
    res = parse("Here are my reasoning steps:\nThe user wants recent news. I should search.\n"
                "[BEGIN FINAL RESPONSE]\n"
                '<tool_calls>[{"name": "get_weather", "arguments": {"city": "Paris"}}, '
                '{"name": "read_file", "arguments": {"path": "/etc/hosts"}}]</tool_calls>')
    assert res.reasoning == "The user wants recent news. I should search."
    assert calls(res) == [("get_weather", {"city": "Paris"}), ("read_file", {"path": "/etc/hosts"})]
    assert res.content == "" and res.finish_reason == "tool_calls"


def test_a_call_without_reasoning_markers():
    res = parse('<tool_calls>[{"name": "get_weather", "arguments": {"city": "Oslo"}}]</tool_calls>')
    assert calls(res) == [("get_weather", {"city": "Oslo"})] and not anomalies(res)


def test_a_reply_that_never_reaches_the_final_response_is_all_reasoning():
    res = parse("Still thinking about it", start="reasoning")
    assert (res.reasoning, res.content) == ("Still thinking about it", "")


def test_the_models_id_is_not_kept():
    res = parse('<tool_calls>[{"name": "get_weather", "arguments": {}, "id": "abc123"}]'
                "</tool_calls>")
    assert calls(res) == [("get_weather", {})] and res.tool_calls[0].id != "abc123"


def test_tool_call_tags_and_a_lone_object():
    for text in ('<tool_call>[{"name": "get_weather", "arguments": {"days": 1}}]</tool_call>',
                 '<tool_calls>\n{"name": "get_weather", "arguments": {"days": 1}}\n</tool_calls>',
                 '<tool_call>\n{"name": "get_weather", "parameters": {"days": 1}}\n</tool_call>'):
        res = parse(text)
        assert calls(res) == [("get_weather", {"days": 1})] and res.content == "", text


def test_the_instructions_placeholders_are_not_calls():
    text = ('<tool_calls>[{"name": <function-name-1>, "arguments": <args-dict-1>}]</tool_calls>')
    res = parse(text)
    assert res.tool_calls == () and res.content == text  # `"name"` is not followed by JSON
    assert anomalies(res) == {"malformed_call": 1}


def test_an_answer_then_calls_then_more_answer():
    res = parse("[BEGIN FINAL RESPONSE]\nChecking.\n" + call("get_weather", {}) + "\nDone.",
                start="reasoning")
    assert res.reasoning == "" and res.content == "Checking.Done." and len(res.tool_calls) == 1


# --- the real templates -------------------------------------------------------------------------


@needs_templates
def test_the_real_templates_are_detected_and_no_other_is():
    for path in sorted(SHARED.glob("*.jinja")):
        found = detect(path.read_text("utf-8")).family
        assert (found == "apriel") == (path.name in TEMPLATES), path.name
    # MiniMax-M1 also frames its calls in <tool_calls>: its template never writes our marker
    assert ap.FINAL not in (SHARED / "MiniMax-M1.jinja").read_text("utf-8")


WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                           "days": {"type": "integer"}}}}}
TWO = (("get_weather", {"city": "Paris", "days": 2}), ("get_weather", {"city": "Lyon"}))
ASK = Message("user", "Weather in Paris for two days, and Lyon?")


def template(name: str) -> ChatTemplate:
    return ChatTemplate((SHARED / name).read_text("utf-8"), bos_token="<s>", eos_token="</s>",
                        family="apriel")


@needs_templates
@pytest.mark.parametrize("name", TEMPLATES)
def test_where_each_templates_prompt_leaves_the_model(name):
    prompt = template(name).render([ASK], tools=[WEATHER])
    # 1.6 writes "Here are my reasoning steps:" for the model; 1.5 lets it write that itself
    assert start_state(prompt, "apriel") == ("reasoning" if "1.6" in name else "content")


@needs_templates
@pytest.mark.parametrize("name", TEMPLATES)
def test_what_the_real_templates_write_for_two_calls_is_read_back(name):
    turn = Message("assistant", "Checking.", reasoning_content="Need both cities.",
                   tool_calls=tuple({"id": f"call_{i}", "type": "function",
                                     "function": {"name": n, "arguments": a}}
                                    for i, (n, a) in enumerate(TWO)))
    tpl = template(name)
    whole = tpl.render([ASK, turn], tools=[WEATHER], add_generation_prompt=False)
    opener = "<|begin_assistant|>\n" if "1.6" in name else "<|assistant|>\n"
    text = whole[whole.rindex(opener) + len(opener):].removesuffix("</s>")
    text = text.removesuffix("\n").removesuffix("<|end|>").removesuffix("\n")
    # 1.6 shows the last turn's reasoning (without the prompt's "Here are my reasoning
    # steps:", which the prompt wrote): the turn starts in reasoning
    start = "reasoning" if "1.6" in name else "content"
    res = parse(text, start=start, tools=[WEATHER])
    assert calls(res) == list(TWO) and res.content == "Checking." and not anomalies(res)
    assert res.reasoning == ("Need both cities." if "1.6" in name else "")
    written = REGISTRY["apriel"].writer.write(
        "Need both cities." if "1.6" in name else None, "Checking.",
        [ToolCall(f"call_{i}", n, a, i) for i, (n, a) in enumerate(TWO)], opened=True)
    assert written == text


# --- the reader ---------------------------------------------------------------------------------


def test_reader_directly():
    body = '[{"name": "f", "arguments": {"q": [1]}}]' + ap.CALLS_END
    p = read_all_ways(ap, body + "tail")
    assert (p.name, p.arguments, p.end) == ("f", {"q": [1]}, len(body))
    p = read_all_ways(ap, '[{"name": "f", "arguments": [1]}]')
    assert p.error == "arguments is not an object"
