"""engine/parse/families/hunyuan3.py (Tencent Hunyuan 3, Hy3): every parser rule
(tests/engine/parse/family_rules.py) and the family's own cases, each parsed at every chunking,
stream_tools off and on. The cases come from the real template (tencent-Hy3.jinja, the base of the
pack's hunyuan3.jinja) and from vLLM's tests/tool_parsers/test_hy_v3_tool_parser.py (whose
tokenizer writes the tags without the `:opensource` suffix the template's tokens carry: the same
cases with the suffix)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.chat.detect import detect, start_state
from engine.chat.packs import TEMPLATES, resolve_pack
from engine.chat.request import Message
from engine.parse.families import hunyuan3
from tests.engine.parse.family_harness import read_all_ways
from tests.engine.parse.family_rules import RULES, Family
from tests.engine.parse.parser_harness import anomalies, parse_all_ways

SHARED = Path(__file__).resolve().parents[5] / "shared" / "templates"
REAL = "tencent-Hy3.jinja"
S = ":opensource"


def tags(text: str) -> str:
    """vLLM's bare tags, written with the checkpoint's suffix."""
    for t in ("tool_calls", "tool_call", "tool_sep", "arg_key", "arg_value", "think"):
        text = text.replace(f"<{t}>", f"<{t}{S}>").replace(f"</{t}>", f"</{t}{S}>")
    return text


def _value(v) -> str:
    return v if isinstance(v, str) else json.dumps(v)


def call(name: str, args: dict) -> str:
    """One call in its own section, as the template writes it."""
    pairs = "".join(f"<arg_key>{k}</arg_key>\n<arg_value>{_value(v)}</arg_value>\n"
                    for k, v in args.items())
    return tags(f"<tool_calls>\n<tool_call>{name}<tool_sep>\n{pairs}</tool_call>\n</tool_calls>")


def typed(key: str, raw: str) -> str:
    return call("get_weather", {key: raw})


FAMILY = Family("hunyuan3", call,
                tags("<tool_calls>\n<tool_call>get_weather<tool_sep>\n<oops>\n</tool_call>\n"
                     "</tool_calls>"),
                think=(f"<think{S}>", f"</think{S}>"), typed=typed)

TOOLS = [{"type": "function", "function": {"name": "get_current_date", "parameters": {}}},
         {"type": "function", "function": {"name": "get_weather", "parameters": {
             "type": "object",
             "properties": {"city": {"type": "string"}, "date": {"type": "string"}}}}}]


def parse(text: str, **kw):
    kw.setdefault("start", "content")
    kw.setdefault("tools", TOOLS)
    return parse_all_ways(tags(text), family="hunyuan3", **kw)


def calls(res) -> list:
    return [(c.name, c.arguments) for c in res.tool_calls]


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.__name__)
def test_rule(rule):
    rule(FAMILY)


# --- what the template writes ------------------------------------------------------------------


@pytest.mark.parametrize("thinking", [False, True])
def test_the_pack_renders_a_turn_the_parser_reads_back(thinking):
    """No thinking (the template's own default, `no_think`): the prompt holds a closed block;
    thinking on (Prism's enable_thinking, read by the pack's template as reasoning_effort
    high): it leaves `<think:opensource>` open. Either way the history shows the reasoning,
    the answer and one section of calls, which the parser reads back."""
    pack = resolve_pack("hunyuan3", require_model=False)
    tmpl = pack.chat_template()
    ask = [Message("user", "Weather?")]
    turn = Message("assistant", "Checking.", reasoning_content="Need both.", tool_calls=(
        {"id": "c0", "type": "function",
         "function": {"name": "get_weather", "arguments": {"city": "Beijing", "date": "today"}}},
        {"id": "c1", "type": "function",
         "function": {"name": "get_current_date", "arguments": {}}}))
    prompt = tmpl.render(ask, tools=TOOLS, enable_thinking=thinking)
    opened = f"<｜hy_Assistant{S}｜><think{S}>"
    assert prompt.endswith(opened if thinking else opened + f"</think{S}>")
    assert start_state(prompt, "hunyuan3") == ("reasoning" if thinking else "content")
    whole = tmpl.render([*ask, turn], tools=TOOLS, enable_thinking=thinking,
                        add_generation_prompt=False)
    assert whole.startswith(prompt[: -len(f"</think{S}>")])
    written = whole[len(prompt[: -len(f"</think{S}>")]) if not thinking else len(prompt):]
    written = written.removesuffix(hunyuan3.EOS)
    res = parse(written, start="reasoning")
    assert (res.reasoning, res.content) == ("Need both.", "Checking.")
    assert calls(res) == [("get_weather", {"city": "Beijing", "date": "today"}),
                          ("get_current_date", {})]
    assert not anomalies(res)


def test_reasoning_effort_still_wins_over_enable_thinking():
    pack = resolve_pack("hunyuan3", require_model=False)
    prompt = pack.chat_template().render([Message("user", "Hi")], enable_thinking=False,
                                         extra={"reasoning_effort": "low"})
    assert prompt.endswith(f"<think{S}>")


def test_detected_from_its_template():
    assert detect((TEMPLATES / "hunyuan3.jinja").read_text("utf-8")).family == "hunyuan3"
    assert detect(f"<tool_call{S}>x<tool_sep{S}>").family == "hunyuan3"


@pytest.mark.skipif(not SHARED.is_dir(), reason="needs ../shared/templates (the real templates)")
def test_only_hy3s_own_template_is_detected_as_hunyuan3():
    found = {p.name for p in SHARED.glob("*.jinja")
             if detect(p.read_text("utf-8")).family == "hunyuan3"}
    assert found == {REAL}


@pytest.mark.skipif(not SHARED.is_dir(), reason="needs ../shared/templates (the real templates)")
def test_the_pack_renders_as_the_real_template_without_prisms_cases():
    """Prism's two changes (enable_thinking, a later system message) change nothing else."""
    from engine.chat.template import ChatTemplate

    real = ChatTemplate((SHARED / REAL).read_text("utf-8"), family="hunyuan3")
    ours = resolve_pack("hunyuan3", require_model=False).chat_template()
    chat = [Message("system", "Be terse."), Message("user", "Weather?"),
            Message("assistant", "Sunny.", reasoning_content="Easy."),
            Message("user", "And tomorrow?")]
    for kw in ({}, {"tools": TOOLS}, {"extra": {"reasoning_effort": "high"}},
               {"tools": TOOLS, "add_generation_prompt": False}):
        assert ours.render(chat, **kw) == real.render(chat, **kw), kw


# --- vLLM's cases (tests/tool_parsers/test_hy_v3_tool_parser.py), with the suffix ----------------


def test_vllm_zero_arg_inline_and_newline():
    for text in ("<tool_calls><tool_call>get_current_date<tool_sep></tool_call></tool_calls>",
                 "<tool_calls>\n<tool_call>get_current_date<tool_sep>\n</tool_call>\n"
                 "</tool_calls>"):
        res = parse(text)
        assert calls(res) == [("get_current_date", {})] and res.content == ""


def test_vllm_args_same_line_and_with_newlines():
    for sep in ("", "\n"):
        res = parse(f"<tool_calls>{sep}<tool_call>get_weather<tool_sep>{sep}<arg_key>city"
                    f"</arg_key>{sep}<arg_value>Beijing</arg_value>{sep}<arg_key>date</arg_key>"
                    f"{sep}<arg_value>2026-03-30</arg_value>{sep}</tool_call>{sep}</tool_calls>")
        assert calls(res) == [("get_weather", {"city": "Beijing", "date": "2026-03-30"})]
        assert not anomalies(res)


def test_vllm_content_before_and_multiple():
    res = parse("Checking.<tool_calls>\n<tool_call>get_current_date<tool_sep>\n</tool_call>\n"
                "</tool_calls>")
    assert res.content == "Checking." and calls(res) == [("get_current_date", {})]
    res = parse("<tool_calls>\n<tool_call>get_weather<tool_sep>\n<arg_key>city</arg_key>\n"
                "<arg_value>Beijing</arg_value>\n</tool_call>\n<tool_call>get_weather<tool_sep>\n"
                "<arg_key>city</arg_key>\n<arg_value>Hangzhou</arg_value>\n</tool_call>\n"
                "</tool_calls>")
    assert [a["city"] for _, a in calls(res)] == ["Beijing", "Hangzhou"]
    assert [c.index for c in res.tool_calls] == [0, 1]


def test_vllm_no_tool_call():
    res = parse("This is a plain response.")
    assert res.content == "This is a plain response." and res.tool_calls == ()


# --- the family's own rules --------------------------------------------------------------------


def test_a_missing_separator_is_read_and_counted():
    res = parse("<tool_calls>\n<tool_call>get_weather\n<arg_key>city</arg_key>\n"
                "<arg_value>Paris</arg_value>\n</tool_call>\n</tool_calls>")
    assert calls(res) == [("get_weather", {"city": "Paris"})]
    assert anomalies(res) == {"repaired_call": 1}
    res = parse("<tool_calls><tool_call>get_current_date</tool_call></tool_calls>")
    assert calls(res) == [("get_current_date", {})]


def test_bare_tags_without_the_suffix_are_text():
    text = ("<tool_calls><tool_call>get_current_date<tool_sep></tool_call></tool_calls>")
    res = parse_all_ways(text, family="hunyuan3", start="content", tools=TOOLS)
    assert res.tool_calls == () and res.content == text


def test_a_call_without_its_section_and_a_section_without_its_end():
    res = parse("<tool_call>get_current_date<tool_sep>\n</tool_call>")
    assert calls(res) == [("get_current_date", {})] and not anomalies(res)
    res = parse("<tool_calls>\n<tool_call>get_current_date<tool_sep>\n</tool_call>\nDone.")
    assert calls(res) == [("get_current_date", {})] and res.content == "Done."


def test_reasoning_then_a_call_in_it():
    res = parse("<think>Let me check.\n<tool_calls>\n<tool_call>get_current_date<tool_sep>\n"
                "</tool_call>\n</tool_calls>")
    assert res.reasoning == "Let me check." and calls(res) == [("get_current_date", {})]
    assert anomalies(res) == {"implicit_reasoning_end": 1}


def test_typed_values_and_padding():
    res = parse("<tool_calls>\n<tool_call>f<tool_sep>\n<arg_key>n</arg_key>\n<arg_value>\n"
                "[1, 2]\n</arg_value>\n<arg_key>s</arg_key>\n<arg_value> two  spaces "
                "</arg_value>\n</tool_call>\n</tool_calls>", tools=())
    assert calls(res) == [("f", {"n": [1, 2], "s": " two  spaces "})]


def test_reader_directly():
    body = tags("\n<tool_call>f<tool_sep>\n<arg_key>k</arg_key>\n<arg_value>1</arg_value>\n"
                "</tool_call>\n</tool_calls>")
    p = read_all_ways(hunyuan3, body + "tail")
    assert (p.name, p.arguments, p.end) == ("f", {"k": 1}, len(body))


def test_start_state_stops_and_tokens():
    assert start_state(f"<｜hy_Assistant{S}｜><think{S}></think{S}>", "hunyuan3") == "content"
    assert start_state(f"<｜hy_Assistant{S}｜><think{S}>", "hunyuan3") == "reasoning"
    assert hunyuan3.FAMILY.stops == (f"<｜hy_eos{S}｜>",)
    assert hunyuan3.FAMILY.thinking is False
    assert {f"<tool_sep{S}>", f"<arg_key{S}>", f"</tool_calls{S}>"} <= set(
        hunyuan3.FAMILY.preserved_tokens)
