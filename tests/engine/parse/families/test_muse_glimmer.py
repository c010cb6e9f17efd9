"""engine/parse/families/muse_glimmer.py (Muse Glimmer): the parser rules
(tests/engine/parse/family_rules.py) and the family's own cases, each parsed at every chunking,
stream_tools off and on. The shapes come from Muse Glimmer's real chat template
(/work/shared/templates/muse-glimmer.jinja: recipient messages, `render_atem`), from vLLM's
`MuseGlimmerToolParser` (a block read anywhere, values typed by the schema, `<|eot|>` after the
block), from SGLang-jax's `MuseGlimmerDetector` (`NAME.NAME` read as the declared `NAME`) and
from replies captured from the model (` to=self<|message|>17*23 = 391. …<|eom|>`)."""

from __future__ import annotations

import json

import pytest

from engine.chat.detect import detect, start_state
from engine.chat.request import Message
from engine.chat.template import ChatTemplate
from engine.parse.events import ToolCall
from engine.parse.families import REGISTRY, muse_glimmer
from tests.engine.parse.family_harness import read_all_ways
from tests.engine.parse.family_rules import RULES, Family, stray_closer_dropped
from tests.engine.parse.parser_harness import anomalies, parse_all_ways
from tests.support import LIBRARY

REAL = LIBRARY
NEXT = "<|eom|><|start|>assistant"


def block(name: str, args: dict) -> str:
    params = "".join(f'<atem:parameter name="{k}">'
                     f"{v if isinstance(v, str) else json.dumps(v)}</atem:parameter>\n"
                     for k, v in args.items())
    return (f'<atem:function_calls>\n<atem:invoke name="{name}">\n{params}</atem:invoke>\n'
            "</atem:function_calls>")


def call(name: str, args: dict) -> str:
    """A recipient message without the `<|start|>assistant` before it (the rules put calls at
    a line start and in the reasoning, where a model that skipped the frame writes them)."""
    return f"to={name}<|message|>{block(name, args)}"


def typed(key: str, raw: str) -> str:
    return call("get_weather", {key: raw})


FAMILY = Family("muse-glimmer", call,
                'to=get_weather<|message|><atem:function_calls>\n<atem:invoke name="get_weather">'
                "\noops</atem:function_calls>",
                think=("to=self<|message|>", "<|eom|>"), typed=typed)

# Muse's own template needs a description on every tool (`fn.description | tojson`).
WEATHER = {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer"}, "metric": {"type": "boolean"},
    "opts": {"type": "object"}, "note": {"type": ["string", "null"]}}}
PATCH = {"type": "object", "properties": {"input": {"type": "string"}}}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather.",
                                           "parameters": WEATHER}},
         {"type": "function", "function": {"name": "apply_patch", "description": "Patch.",
                                           "parameters": PATCH}}]


def parse(text: str, **kw):
    kw.setdefault("start", "content")
    return parse_all_ways(text, family="muse-glimmer", tools=TOOLS, **kw)


@pytest.mark.parametrize("rule", [r for r in RULES if r is not stray_closer_dropped],
                         ids=lambda r: r.__name__)
def test_rule(rule):
    rule(FAMILY)


def test_eom_in_the_answer_ends_a_message_and_is_no_stray_closer():
    # the rule for `<think>` families does not apply: <|eom|> closes every message
    res = parse(" to=user<|message|>Part one.<|eom|>")
    assert res.content == "Part one." and not anomalies(res)
    res = parse("Part one.<|eom|> part two.")
    assert res.content == "Part one. part two." and not anomalies(res)


# --- the real template ------------------------------------------------------------------------


def real(name: str) -> str:
    path = REAL / name
    if not path.is_file():
        pytest.skip(reason=f"needs the real template {path} (../shared)")
    return path.read_text(encoding="utf-8")


def test_the_real_template_is_detected_and_the_harmony_ones_stay_harmony():
    assert detect(real("muse-glimmer.jinja")).family == "muse-glimmer"
    for harmony in ("openai-gpt-oss-120b.jinja", "llm-jp-llm-jp-4.1-8b-thinking.jinja"):
        assert detect(real(harmony)).family == "harmony", harmony
    others = [p for p in sorted(REAL.glob("*.jinja")) if p.name != "muse-glimmer.jinja"]
    assert [p.name for p in others if detect(p.read_text("utf-8")).family == "muse-glimmer"] \
        == []


def test_a_turn_the_real_template_writes_reads_back():
    args = {"city": "Paris", "days": 2, "metric": True, "opts": {"a": [1, "x"]}, "note": None}
    tmpl = ChatTemplate(real("muse-glimmer.jinja"), bos_token="<|begin_of_text|>")
    ask = [Message("system", "Be brief."), Message("user", "Weather?")]
    turn = Message("assistant", "", reasoning_content="I should look it up.", tool_calls=(
        {"id": "c0", "type": "function", "function": {"name": "get_weather", "arguments": args}},
        {"id": "c1", "type": "function",
         "function": {"name": "apply_patch", "arguments": {"input": "*** Begin Patch\n"}}}))
    prompt = tmpl.render(ask, tools=TOOLS)
    whole = tmpl.render([*ask, turn], tools=TOOLS, add_generation_prompt=False)
    assert prompt.endswith("<|start|>assistant") and whole.startswith(prompt)
    written = whole[len(prompt):].removesuffix("<|eot|>")
    assert written.startswith(" to=self<|message|>I should look it up.<|eom|>")
    res = parse(written, start=start_state(prompt, "muse-glimmer"))
    assert (res.reasoning, res.content) == ("I should look it up.", "")
    assert [(c.name, c.arguments) for c in res.tool_calls] == [
        ("get_weather", args), ("apply_patch", {"input": "*** Begin Patch\n"})]
    assert not anomalies(res)


def test_prisms_copy_renders_a_later_system_message_where_it_stands():
    from engine.chat.packs import TEMPLATES

    ours = ChatTemplate((TEMPLATES / "muse_glimmer.jinja").read_text("utf-8"))
    theirs = ChatTemplate(real("muse-glimmer.jinja"))
    chat = [Message("system", "Be brief."), Message("user", "Weather?")]
    assert ours.render(chat, tools=TOOLS) == theirs.render(chat, tools=TOOLS)
    later = ours.render([Message("user", "Hi"), Message("system", "Now in French.")])
    bare = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    assert '{"name": "f", "description": "", "parameters": {"type": "object"}}' in ours.render(
        chat, tools=[bare])  # Muse's own template fails on a tool without a description
    assert later.startswith("<|start|>system<|message|>You are a helpful AI assistant.")
    assert "<|start|>system<|message|>Now in French.<|eot|><|start|>assistant" in later


# --- the model's replies, vLLM's and SGLang's cases ----------------------------------------------


def test_captured_reasoning_then_answer_and_an_answer_alone():
    res = parse(" to=self<|message|>17*23 = 391. Provide answer.<|eom|>"
                "<|start|>assistant to=user<|message|>17 × 23 = **391**.")
    assert (res.reasoning, res.content) == ("17*23 = 391. Provide answer.", "17 × 23 = **391**.")
    res = parse(" to=user<|message|>Hello there.")
    assert (res.reasoning, res.content) == ("", "Hello there.") and not anomalies(res)


def test_the_leading_space_goes_with_the_first_tag_and_may_be_missing():
    res = parse(" " + call("get_weather", {"city": "Paris"}))
    assert res.content == "" and [c.arguments for c in res.tool_calls] == [{"city": "Paris"}]
    res = parse("to=self<|message|>Hm.<|eom|><|start|>assistant to=user<|message|>Ok.")
    assert (res.reasoning, res.content) == ("Hm.", "Ok.")
    res = parse("  Just text.")  # no tag follows: the whitespace is text, as for every family
    assert res.content == "  Just text."


def test_vllms_recipient_framed_call_with_a_newline_and_eot():
    text = ("<|start|>assistant to=apply_patch<|message|>\n<atem:function_calls>\n"
            '<atem:invoke name="apply_patch">\n<atem:parameter name="input">*** Begin Patch ...'
            "</atem:parameter>\n</atem:invoke>\n</atem:function_calls><|eot|>")
    res = parse(text)
    assert [(c.name, c.arguments) for c in res.tool_calls] == [
        ("apply_patch", {"input": "*** Begin Patch ..."})]
    assert res.content == "" and not anomalies(res)


def test_a_block_without_its_recipient_message_is_a_call_and_holds_several():
    text = ("Checking. <atem:function_calls>\n" + '<atem:invoke name="get_weather">\n'
            '<atem:parameter name="city">A</atem:parameter>\n</atem:invoke>\n'
            '<atem:invoke name="get_weather">\n<atem:parameter name="city">B</atem:parameter>\n'
            "</atem:invoke>\n</atem:function_calls>")
    res = parse(text)
    assert res.content == "Checking. "
    assert [c.arguments for c in res.tool_calls] == [{"city": "A"}, {"city": "B"}]


def test_the_name_written_with_its_namespace_is_the_declared_tool():
    res = parse(" to=get_weather.get_weather<|message|>" + block("get_weather.get_weather",
                                                               {"city": "Paris"}))
    assert [c.name for c in res.tool_calls] == ["get_weather"]
    assert anomalies(res) == {"repaired_call": 1}
    res = parse(" to=x<|message|>" + block("get_weather.forecast", {}))
    assert [c.name for c in res.tool_calls] == ["get_weather.forecast"]
    assert anomalies(res) == {"unknown_tool": 1}


def test_values_keep_their_spaces_and_lines():
    value = 'This is the value for the second parameter\nthat can span\n"multiple" lines\n'
    res = parse(call("get_weather", {"city": value, "days": 3, "note": "null"}))
    assert res.tool_calls[0].arguments == {"city": value, "days": 3, "note": None}


def test_the_recipient_is_not_the_name():
    res = parse(" to=someone_else<|message|>" + block("get_weather", {"city": "Rome"}))
    assert [c.name for c in res.tool_calls] == ["get_weather"]


def test_a_new_message_ends_the_reasoning_even_without_eom():
    res = parse(" to=self<|message|>Thinking<|start|>assistant to=user<|message|>Answer")
    assert (res.reasoning, res.content) == ("Thinking", "Answer")


def test_recipients_that_are_not_calls_stay_frames():
    res = parse(" to=user<|message|>Set x to=5 and y to=self.")
    assert res.content == "Set x to=5 and y to=self." and not anomalies(res)


def test_reader_directly():
    body = ('get_weather<|message|> <atem:function_calls>\n<atem:invoke name="get_weather">\n'
            '<atem:parameter name="days">4</atem:parameter>\n</atem:invoke>\n'
            "</atem:function_calls>tail")
    p = read_all_ways(muse_glimmer, body, schemas={})
    assert (p.name, p.arguments, p.end) == ("get_weather", {"days": 4}, len(body) - len("tail"))
    p = read_all_ways(muse_glimmer, 'f">\n</atem:invoke>', schemas={})  # after an invoke opener
    assert (p.name, p.arguments, p.done) == ("f", {}, True)


# --- the writer and the grammar ------------------------------------------------------------------


def test_the_writer_writes_what_the_template_writes():
    w = REGISTRY["muse-glimmer"].writer
    c = ToolCall("call_0", "get_weather", {"city": "Paris", "days": 3}, 0)
    assert w.write("r", "", [c, c]) == (
        " to=self<|message|>r" + NEXT + " to=get_weather<|message|>"
        + block("get_weather", {"city": "Paris", "days": 3}) + NEXT
        + " to=get_weather<|message|>" + block("get_weather", {"city": "Paris", "days": 3}))
    assert w.write("r", "a") == " to=self<|message|>r" + NEXT + " to=user<|message|>a"


def test_the_forced_call_grammar():
    pytest.importorskip("llama_cpp")
    from engine.grammar.tools import forced_call

    g = forced_call("muse-glimmer", TOOLS, "apply_patch")
    assert ('" to=apply_patch<|message|><atem:function_calls>\\n<atem:invoke '
            'name=\\"apply_patch\\">\\n"') in g
    g = forced_call("muse-glimmer", TOOLS)
    assert 'root ::= tc-any ("<|eom|><|start|>assistant" tc-any)*' in g
