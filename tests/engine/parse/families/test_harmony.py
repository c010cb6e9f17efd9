"""engine/parse/families/harmony.py (gpt-oss, LLM-jp 4.1) through the parser: one case per rule,
each parsed whole, per character and in random chunks, stream_tools off and on (parse_all_ways).
The variants come from the real templates (/work/shared/templates: openai-gpt-oss-120b.jinja,
llm-jp-llm-jp-4.1-8b-thinking.jinja) and llama.cpp's tests of them (tests/test-chat.cpp, "GPT-OSS
format tests" and "LLM-jp-4.1")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.chat.detect import detect, start_state
from engine.chat.request import Message
from engine.chat.template import ChatTemplate
from engine.parse.families import harmony
from tests.engine.parse.family_harness import read_all_ways
from tests.engine.parse.parser_harness import anomalies, parse_all_ways

SHARED = Path(__file__).resolve().parents[5] / "shared" / "templates"
needs_templates = pytest.mark.skipif(not SHARED.is_dir(),
                                     reason="needs ../shared/templates (the real templates)")

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}]
ANALYSIS = "<|channel|>analysis<|message|>"
NEXT = "<|end|><|start|>assistant"
CALL = ('<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>'
        '{"city": "Paris", "days": 3}<|call|>')


def parse(text: str, **kw):
    kw.setdefault("start", "content")
    return parse_all_ways(text, family="harmony", tools=TOOLS, **kw)


def test_analysis_then_final():
    res = parse(ANALYSIS + "Simple sum." + NEXT + "<|channel|>final<|message|>It is 4.<|return|>")
    assert (res.reasoning, res.content, res.tool_calls) == ("Simple sum.", "It is 4.", ())
    assert res.finish_reason == "stop" and not anomalies(res)


def test_prompt_opened_the_analysis_channel():
    res = parse("Thinking." + NEXT + "<|channel|>final<|message|>Done.", start="reasoning")
    assert (res.reasoning, res.content) == ("Thinking.", "Done.")


def test_one_call_after_analysis():
    res = parse(ANALYSIS + "Need the weather." + NEXT + CALL)
    assert res.reasoning == "Need the weather." and res.content == ""
    assert [(c.name, c.arguments) for c in res.tool_calls] == [
        ("get_weather", {"city": "Paris", "days": 3})]
    assert res.finish_reason == "tool_calls" and not anomalies(res)


def test_recipient_in_the_role_and_no_call_token_at_the_end():
    text = (ANALYSIS + "x" + NEXT + " to=functions.get_weather<|channel|>commentary json"
            '<|message|>{"city": "Rome"}')
    res = parse(text)
    assert [c.arguments for c in res.tool_calls] == [{"city": "Rome"}]


def test_preamble_then_several_calls():
    text = (ANALYSIS + "Plan." + NEXT + "<|channel|>commentary<|message|>Checking both."
            + NEXT + CALL + "<|start|>assistant" + CALL.replace("Paris", "Oslo"))
    res = parse(text)
    assert res.content == "Checking both."
    assert [c.arguments["city"] for c in res.tool_calls] == ["Paris", "Oslo"]


def test_analysis_again_after_a_preamble():
    text = ("<|channel|>commentary<|message|>On it." + NEXT + ANALYSIS + "More thought."
            + NEXT + "<|channel|>final<|message|>Answer.")
    res = parse(text)
    assert (res.reasoning, res.content) == ("More thought.", "On it.Answer.")


def test_call_inside_the_analysis_at_a_line_start_ends_it():
    res = parse(ANALYSIS + "I will call it.\n" + CALL)
    assert res.reasoning == "I will call it." and len(res.tool_calls) == 1
    assert anomalies(res) == {"implicit_reasoning_end": 1}


@pytest.mark.parametrize("quoted", [
    "The call looks like `" + CALL + "` in docs.",
    "```\n" + CALL + "\n```",
])
def test_quoted_markup_in_the_answer_stays_text(quoted):
    res = parse(ANALYSIS + "x" + NEXT + "<|channel|>final<|message|>" + quoted)
    assert res.tool_calls == () and res.content == quoted


def test_mentioned_mid_sentence_in_the_analysis_stays_reasoning():
    text = ANALYSIS + "I could write " + CALL[:40] + " but not now." + NEXT
    res = parse(text)
    assert res.tool_calls == () and res.reasoning == "I could write " + CALL[:40] + " but not now."


def test_end_in_the_answer_is_a_message_end_not_a_stray_closer():
    res = parse("<|channel|>final<|message|>Hi.<|end|>")
    assert res.content == "Hi." and not anomalies(res)


def test_unfinished_call_is_answer_text():
    text = '<|channel|>commentary to=functions.get_weather json<|message|>{"city": "Pa'
    res = parse(text)
    assert res.tool_calls == () and res.content == text
    assert anomalies(res) == {"unfinished_call": 1}


def test_malformed_arguments_are_answer_text():
    text = '<|channel|>commentary to=functions.get_weather json<|message|>{"city": 1,}<|call|>'
    res = parse(text)
    assert res.tool_calls == () and anomalies(res) == {"malformed_call": 1}
    assert res.content.startswith("<|channel|>commentary to=functions.get_weather")


def test_unknown_tool_is_called_and_flagged():
    res = parse('<|channel|>commentary to=functions.nope json<|message|>{}<|call|>')
    assert [c.name for c in res.tool_calls] == ["nope"]
    assert anomalies(res) == {"unknown_tool": 1}


def test_an_undeclared_builtin_recipient_is_its_text_and_says_so():
    text = '<|channel|>commentary to=browser.search json<|message|>{"q": "x"}'
    res = parse(text)
    assert res.tool_calls == () and res.content == text
    assert anomalies(res) == {"malformed_call": 1}


def test_reader_directly_name_header_and_arguments():
    p = read_all_ways(harmony, 'functions.a.b-c <|constrain|>json<|message|> {"k": [1]}\n<|call|>x')
    assert (p.name, p.arguments, p.done) == ("a.b-c", {"k": [1]}, True)
    assert p.end == len('functions.a.b-c <|constrain|>json<|message|> {"k": [1]}\n<|call|>')
    p = read_all_ways(harmony, "functions.f" + " " * 200 + "<|message|>{}")
    assert p.error == "no <|message|>" and p.resume == len("functions.f")


def test_a_frame_tag_in_the_analysis_opens_the_answer():
    # `prism parse` starts in reasoning by default; the header names the channel anyway.
    res = parse("<|channel|>final<|message|>Just this.", start="reasoning")
    assert (res.reasoning, res.content) == ("", "Just this.")
    res = parse(ANALYSIS + "No end token.<|start|>assistant<|channel|>final<|message|>Ok.")
    assert (res.reasoning, res.content) == ("No end token.", "Ok.")
    assert not anomalies(res)


def test_newlines_before_a_frame_tag_belong_to_it():
    res = parse("<|channel|>final<|message|>Hi.\n\n<|end|>\n<|start|>assistant"
                "<|channel|>final<|message|>There.\n<|return|>")
    assert res.content == "Hi.There."


# --- the recipient in the role header (issue 19, item 2.2) --------------------------------------

SPECIAL = [{"type": "function", "function": {"name": "special_function", "parameters": {
    "type": "object", "properties": {"arg1": {"type": "integer"}}}}}]


def called(res) -> list:
    return [(c.name, c.arguments) for c in res.tool_calls]


@pytest.mark.parametrize("text", [
    # llama.cpp tests/test-chat.cpp, GPT-OSS "Tool call with recipient in role header" and
    # "Tool call with constraint": the prompt ended with `<|start|>assistant`
    ' to=functions.special_function<|channel|>analysis<|message|>{"arg1": 1}',
    ' to=functions.special_function<|channel|>analysis <|constrain|>json<|message|>{"arg1": 1}',
    # ... and with the recipient in the channel header
    '<|channel|>analysis to=functions.special_function<|message|>{"arg1": 1}',
    '<|channel|>commentary to=functions.special_function<|message|>{"arg1": 1}',
])
def test_a_reply_that_opens_with_a_call(text):
    res = parse_all_ways(text, family="harmony", start="content", tools=SPECIAL)
    assert called(res) == [("special_function", {"arg1": 1})]
    assert (res.reasoning, res.content) == ("", "") and not anomalies(res)
    assert res.tool_calls[0].raw == text  # the leading space too: it opened the header


def test_a_line_starting_with_a_recipient_after_a_preamble_is_a_call():
    text = ('<|channel|>commentary<|message|>On it.\n'
            'to=functions.special_function<|channel|>commentary json<|message|>{"arg1": 2}')
    res = parse_all_ways(text, family="harmony", start="content", tools=SPECIAL)
    assert res.content == "On it." and called(res) == [("special_function", {"arg1": 2})]


def test_to_in_prose_stays_text():
    for text in ('<|channel|>final<|message|>Set to=functions.x<|message|>{} in the config.',
                 "<|channel|>final<|message|>to=assistant is how a tool answers.",
                 "<|channel|>final<|message|>to=do: list"):
        res = parse_all_ways(text, family="harmony", start="content", tools=SPECIAL)
        assert res.tool_calls == () and res.content == text[len("<|channel|>final<|message|>"):]
        assert not anomalies(res)


@needs_templates
def test_what_the_gpt_oss_template_writes_for_a_call_is_read_back():
    tpl = ChatTemplate((SHARED / "openai-gpt-oss-120b.jinja").read_text("utf-8"),
                       family="harmony")
    ask = Message("user", "Weather in Paris for three days?")
    tools = [{"type": "function", "function": dict(TOOLS[0]["function"], description="Weather")}]
    prompt = tpl.render([ask], tools=tools)
    assert prompt.endswith("<|start|>assistant") and start_state(prompt, "harmony") == "content"
    for thinking in (None, "Need the weather."):
        turn = Message("assistant", "", reasoning_content=thinking, tool_calls=(
            {"id": "call_0", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}},))
        whole = tpl.render([ask, turn], tools=tools, add_generation_prompt=False)
        assert whole.startswith(prompt)
        text = whole[len(prompt):]
        assert "to=functions.get_weather<|channel|>commentary json<|message|>" in text
        res = parse_all_ways(text, family="harmony", start="content", tools=TOOLS)
        assert called(res) == [("get_weather", {"city": "Paris", "days": 3})]
        assert (res.reasoning, res.content) == (thinking or "", "") and not anomalies(res)


# --- `commentary to=assistant` and structured output ------------------------------------------


@pytest.mark.parametrize("text", [
    # llama.cpp tests/test-chat.cpp, GPT-OSS edge cases: "<|channel|>commentary to=assistant"
    # before reasoning, and before the final message
    "<|channel|>commentary to=assistant<|channel|>analysis<|message|>I'm\nthinking<|end|>"
    "<|start|>assistant<|channel|>final<|message|>Hello, world!\nWhat's up?",
    "<|channel|>analysis<|message|>I'm\nthinking<|end|><|start|>assistant"
    "<|channel|>commentary to=assistant<|channel|>final<|message|>Hello, world!\nWhat's up?",
])
def test_commentary_to_assistant_is_markup(text):
    res = parse_all_ways(text, family="harmony", start="content")
    assert (res.reasoning, res.content) == ("I'm\nthinking", "Hello, world!\nWhat's up?")
    assert res.tool_calls == () and not anomalies(res)


def test_structured_output_in_a_constrained_final_message():
    # llama.cpp tests/test-chat.cpp, GPT-OSS "Structured output"
    text = ("<|channel|>analysis<|message|>I need to output the invoice details in JSON<|end|>"
            "<|start|>assistant<|channel|>final <|constrain|>json<|message|>"
            '{"amount": 123.45, "date": "2025-12-03"}')
    res = parse_all_ways(text, family="harmony", start="content")
    assert res.reasoning == "I need to output the invoice details in JSON"
    assert res.content == '{"amount": 123.45, "date": "2025-12-03"}' and not anomalies(res)


def test_complex_call_after_analysis_in_the_commentary_header():
    # llama.cpp tests/test-chat.cpp, GPT-OSS "Complex tool calling"
    args = {"oldString": "if (part < railCount - 1) {", "newString": "if (part < 4) {",
            "replaceAll": False}
    text = ("<|channel|>analysis<|message|>Thinking about edit...<|end|><|start|>assistant"
            "<|channel|>commentary to=functions.edit <|constrain|>json<|message|>"
            + json.dumps(args))
    res = parse_all_ways(text, family="harmony", start="content")
    assert res.reasoning == "Thinking about edit..." and called(res) == [("edit", args)]


# --- built-in tools: a call when declared, else their text, marked --------------------------

PYTHON = [{"type": "function", "function": {"name": "python", "parameters": {
    "type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}}}]
EXEC = [{"type": "function", "function": {"name": "container.exec", "parameters": {
    "type": "object", "properties": {"cmd": {"type": "string"}}}}}]
SEARCH = [{"type": "function", "function": {"name": "browser.search", "parameters": {
    "type": "object", "properties": {"query": {"type": "string"}, "topn": {"type": "integer"}}}}}]
THOUGHT = "<|channel|>analysis<|message|>I will execute python to say hello<|end|>"
# llama.cpp tests/test-chat.cpp, GPT-OSS "Builtin function - recipient in role" / "in channel"
IN_ROLE = "<|start|>assistant to=container.exec<|channel|>commentary<|message|>"
IN_CHANNEL = "<|start|>assistant<|channel|>commentary to=python <|constrain|>code<|message|>"


@pytest.mark.parametrize(("head", "body"), [
    (IN_ROLE, "python3 -c 'print(\"hello\")'"), (IN_CHANNEL, 'print("hello")')])
def test_an_undeclared_builtin_is_shown_as_its_text(head, body):
    for tools in ([], SPECIAL):
        res = parse_all_ways(THOUGHT + head + body, family="harmony", start="content",
                             tools=tools)
        assert res.reasoning == "I will execute python to say hello" and res.tool_calls == ()
        header = head.removeprefix("<|start|>assistant") if head is IN_CHANNEL else head
        assert res.content == header + body  # the recipient shows, verbatim
        assert anomalies(res) == {"malformed_call": 1}


def test_a_declared_builtin_is_a_call_of_it():
    res = parse_all_ways(THOUGHT + IN_CHANNEL + 'print("hello")<|call|>', family="harmony",
                         start="content", tools=PYTHON)
    assert called(res) == [("python", {"code": 'print("hello")'})] and not anomalies(res)
    res = parse_all_ways(THOUGHT + IN_ROLE + "ls -la /tmp", family="harmony", start="content",
                         tools=EXEC)
    assert called(res) == [("container.exec", {"cmd": "ls -la /tmp"})] and not anomalies(res)
    res = parse_all_ways(' to=browser.search<|channel|>analysis json<|message|>{"query": "x", '
                         '"topn": 3}<|call|>', family="harmony", start="content", tools=SEARCH)
    assert called(res) == [("browser.search", {"query": "x", "topn": 3})]


def test_a_builtins_text_for_a_tool_of_several_parameters_is_its_text():
    text = " to=browser.search<|channel|>analysis<|message|>weather in Paris"
    res = parse_all_ways(text, family="harmony", start="content", tools=SEARCH)
    assert res.tool_calls == () and anomalies(res) == {"malformed_call": 1}


# --- LLM-jp 4.1: a space after each special token ---------------------------------------------


@pytest.mark.parametrize(("text", "reasoning", "content"), [
    # llama.cpp tests/test-chat.cpp, "LLM-jp-4.1": final channel; the one space rule
    ("<|channel|> final<|message|> Hello, world!\nWhat's up?", "", "Hello, world!\nWhat's up?"),
    ("<|channel|> final<|message|>  padded", "", " padded"),
    ("<|channel|> analysis<|message|> I'm\nthinking<|end|><|start|> assistant<|channel|> final"
     "<|message|> Hello, world!\nWhat's up?", "I'm\nthinking", "Hello, world!\nWhat's up?"),
    ("<|channel|> analysis<|message|> I'm\nthinking", "I'm\nthinking", ""),
    ("<|channel|> analysis<|message|> I need to output the invoice details in JSON<|end|>"
     "<|start|> assistant<|channel|> final <|constrain|>  json<|message|> "
     '{"amount": 123.45, "date": "2025-12-03"}',
     "I need to output the invoice details in JSON", '{"amount": 123.45, "date": "2025-12-03"}'),
])
def test_llm_jp_headers(text, reasoning, content):
    for start in ("content", "reasoning"):
        res = parse_all_ways(text, family="harmony", start=start)
        assert (res.reasoning, res.content) == (reasoning, content) and not anomalies(res)


@pytest.mark.parametrize(("text", "args"), [
    # llama.cpp tests/test-chat.cpp, "LLM-jp-4.1": recipient in the role header, in the channel
    # header, and parallel calls separated by <|end|>
    ("<|channel|> analysis<|message|> I'm\nthinking<|end|><|start|> assistant "
     "to=functions.special_function<|channel|> commentary <|constrain|>  json<|message|> "
     '{"arg1": 1}', [1]),
    ('<|channel|> commentary to=functions.special_function<|message|> {"arg1": 1}', [1]),
    ("<|channel|> analysis<|message|> I'm\nthinking<|end|><|start|> assistant "
     "to=functions.special_function<|channel|> commentary <|constrain|>  json<|message|> "
     '{"arg1": 1}<|end|><|start|> assistant to=functions.special_function<|channel|> commentary '
     '<|constrain|>  json<|message|> {"arg1": 2}', [1, 2]),
])
def test_llm_jp_calls(text, args):
    res = parse_all_ways(text, family="harmony", start="content", tools=SPECIAL)
    assert [c.arguments["arg1"] for c in res.tool_calls] == args
    assert res.reasoning == ("I'm\nthinking" if "analysis" in text else "")
    assert res.content == "" and not anomalies(res)


@needs_templates
def test_the_llm_jp_template_is_harmony_and_leaves_the_model_in_no_channel():
    source = (SHARED / "llm-jp-llm-jp-4.1-8b-thinking.jinja").read_text("utf-8")
    assert detect(source).family == "harmony"
    prompt = ChatTemplate(source, family="harmony").render([Message("user", "Hi")])
    assert prompt.endswith("<|start|>assistant") and start_state(prompt, "harmony") == "content"


def test_header_reader_directly():
    read = harmony.read_header
    assert read("<|channel|>final<|message|>x", 0, False) == (2, len("<|channel|>final<|message|>"),
                                                           "content")
    assert read("<|channel|> analysis<|message|> x", 0, False)[1:] == (
        len("<|channel|> analysis<|message|> "), "reasoning")
    assert read("<|channel|> final<|message|>", 0, False)[0] == 1  # the space may come
    assert read("<|channel|> final<|message|>", 0, True)[0] == 2
    assert read("<|channel|>fin", 0, False)[0] == 1 and read("<|channel|>fin", 0, True)[0] == 0
    assert read("<|channel|>finally<|message|>", 0, False)[0] == 0
    assert read("<|channel|>final to=functions.f<|message|>", 0, False)[0] == 0  # a call's
    assert read("<|channel|>final\n<|message|>", 0, False)[0] == 0
    assert read("<|start|> assistant", 0, False) == (2, len("<|start|> assistant"), "content")
