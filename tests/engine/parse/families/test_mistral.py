"""engine/parse/families/mistral.py (Mistral Small 3.x, Magistral, Devstral): every parser rule
(tests/engine/parse/family_rules.py) and the family's own cases, each parsed at every chunking,
stream_tools off and on."""

from __future__ import annotations

import json

import pytest

from engine.chat.request import Message
from engine.chat.template import ChatTemplate
from engine.parse.events import result_of
from engine.parse.families import mistral
from engine.parse.parser import OutputParser
from tests.engine.parse.family_harness import read_all_ways
from tests.engine.parse.family_rules import RULES, Family
from tests.engine.parse.parser_harness import anomalies, parse_all_ways
from tests.support import LIBRARY


def call(name: str, args: dict) -> str:
    return f"[TOOL_CALLS]{name}[ARGS]{json.dumps(args)}"


FAMILY = Family("mistral", call, '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris",}',
                think=("[THINK]", "[/THINK]"))


def parse(text: str, **kw):
    kw.setdefault("start", "content")
    return parse_all_ways(text, family="mistral", **kw)


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.__name__)
def test_rule(rule):
    rule(FAMILY)


def test_call_id_before_the_arguments():
    res = parse('[TOOL_CALLS]f[CALL_ID]a1B2c3D4e[ARGS]{"k": [1]}')
    assert [(c.name, c.arguments) for c in res.tool_calls] == [("f", {"k": [1]})]


def test_older_list_form_is_read_call_by_call():
    text = ('[TOOL_CALLS] [{"name": "a", "arguments": {"x": 1}},\n {"name": "b", '
            '"parameters": {"y": "z"}}]\nDone.')
    res = parse(text)
    assert [(c.name, c.arguments) for c in res.tool_calls] == [("a", {"x": 1}), ("b", {"y": "z"})]
    assert res.content == "Done." and [c.index for c in res.tool_calls] == [0, 1]


def test_a_broken_list_element_is_text_after_the_good_ones():
    text = '[TOOL_CALLS][{"name": "a", "arguments": {}}, {"name": 3}]'
    res = parse(text)
    assert [c.name for c in res.tool_calls] == ["a"]
    assert res.anomalies["malformed_call"] == 1 and res.content.endswith('{"name": 3}]')


def test_brackets_in_prose_are_text():
    text = "See [the docs](https://x.y) and [THINKING] and [TOOL_CALLS] here."
    res = parse(text)
    assert res.content == text and res.tool_calls == ()


def test_magistral_thinks_first():
    res = parse("[THINK]Let me add.[/THINK]\n\n4")
    assert (res.reasoning, res.content) == ("Let me add.", "4")


def test_reader_directly():
    p = read_all_ways(mistral, 'f[ARGS] {"a": 1} tail')
    assert (p.name, p.arguments, p.end) == ("f", {"a": 1}, len('f[ARGS] {"a": 1}'))
    p = read_all_ways(mistral, "f[NOPE]{}")
    assert p.error == "expected [ARGS]" and p.resume == 1


# --- call ids (issue 19, item 3) ------------------------------------------------------------

SHARED = LIBRARY


def test_the_models_own_call_id_is_kept():
    res = parse_all_ways('[TOOL_CALLS]get_weather[CALL_ID]a1B2c3D4e[ARGS]{"city": "Paris"}',
                         family="mistral", start="content")
    assert [(c.id, c.arguments) for c in res.tool_calls] == [("a1B2c3D4e", {"city": "Paris"})]


@pytest.mark.parametrize("index", [0, 7, 10, 123])
def test_ids_prism_makes_are_nine_alphanumerics_and_distinct(index):
    ids = {mistral.FAMILY.call_id(p, i) for p in ("a1b2c3d4", "", "0000") for i in (index, 1)}
    assert all(len(i) == 9 and i.isalnum() for i in ids)
    assert mistral.FAMILY.call_id("a1b2c3d4", index) != mistral.FAMILY.call_id("a1b2c3d4", 1) \
        or index == 1


@pytest.mark.skipif(not SHARED.is_dir(), reason="needs ../shared/templates (the real templates)")
@pytest.mark.parametrize("template", ["mistralai-Mistral-Nemo-Instruct-2407.jinja",
                                      "Mistral-Small-3.2-24B-Instruct-2506.jinja"])
def test_a_call_prism_read_renders_back_in_mistrals_own_template(template):
    """Nemo and Small 3.2 raise "Tool call IDs should be alphanumeric strings with length 9!"
    for any other id: an agent's second request was a 400."""
    res = parse_all_ways('[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}', family="mistral",
                         start="content")
    call = res.tool_calls[0]
    tpl = ChatTemplate((SHARED / template).read_text("utf-8"), bos_token="<s>",
                       eos_token="</s>", family="mistral")
    messages = [Message("user", "Weather in Paris?"),
                Message("assistant", "", tool_calls=({"id": call.id, "type": "function",
                                                      "function": {"name": call.name,
                                                                   "arguments": call.arguments}},)),
                Message("tool", '{"temp": 21}', tool_call_id=call.id)]
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}}}}]
    prompt = tpl.render(messages, tools=tools)
    assert call.id in prompt and "get_weather" in prompt


def test_whitespace_between_list_objects_split_across_chunks_keeps_every_call():
    """The older `[TOOL_CALLS][{...}   , {...}]` list: the object reader looks ahead over the
    whitespace after `}`; when that whitespace came in earlier chunks, the rest of the list
    was cut from the wrong place and the second call became text (chunks 49, 2, 2, rest)."""
    text = ('[TOOL_CALLS][{"name": "f", "arguments": {"a": 1}}   , '
            '{"name": "g", "arguments": {}}]')
    res = parse_all_ways(text, family="mistral", start="content")
    assert [c.name for c in res.tool_calls] == ["f", "g"] and res.content == ""
    p = OutputParser(start="content", family="mistral")
    events, at = [], 0
    for n in (49, 2, 2, len(text)):
        events += p.feed(text[at:at + n])
        at += n
    split = result_of(events + p.finish())
    assert [c.name for c in split.tool_calls] == ["f", "g"] and not anomalies(split)
