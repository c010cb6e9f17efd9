"""Each model family end to end: an output written in the family's own markup, replayed through
the family's built-in pack (what `prism serve --pack FAMILY --replay FILE` runs), read by the
official `openai` and `anthropic` SDKs, streamed and whole. Reasoning, content and tool calls
must come out as the family's parser reads them (the oracle), which must be the reasoning,
answer and call that the output holds, and the prompt must start the parser where the family's
template leaves the model (engine/chat/detect.py). One subprocess test runs the real CLI.

A family whose parser is not registered yet (engine/parse/families) is skipped, saying so."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import anthropic
import openai
import pytest

from engine.chat.detect import detect, start_state
from engine.chat.packs import resolve_pack
from engine.chat.request import Message
from engine.parse import families
from tests.app.conftest import TOOLS, oracle
from tests.app.test_anthropic import TOOLS as ANTHROPIC_TOOLS
from tests.app.test_anthropic import blocks, summary
from tests.app.test_openai import collect, comparable, whole

ASK = [{"role": "user", "content": "What is the weather in Paris for two days?"}]
CALL = ("get_weather", {"city": "Paris", "days": 2})
THINK_ON = {"chat_template_kwargs": {"enable_thinking": True}}
TWO = (CALL, ("get_weather", {"city": "Lyon"}))


@dataclass(frozen=True)
class Case:
    """What the model writes after the family pack's prompt, and what it means."""

    output: str
    reasoning: str  # the reasoning, whitespace aside ("" for none)
    content: str  # the answer, whitespace aside
    calls: tuple = (CALL,)
    start: str = "content"  # where the pack's prompt leaves the parser
    extra: dict | None = None  # request fields (thinking on for families off by default)
    anomaly: str = ""  # the one anomaly the output must count, if any


CASES: dict[str, Case] = {
    "harmony": Case(
        "<|channel|>analysis<|message|>Need the weather for Paris.<|end|>"
        "<|start|>assistant<|channel|>commentary<|message|>Checking.<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
        '<|message|>{"city": "Paris", "days": 2}<|call|>',
        "Need the weather for Paris.", "Checking."),
    # What the engine really hands over: <|call|> and <|return|> are end-of-generation tokens
    # in gpt-oss's vocabulary, so the output stops before them (engine/backends/llama/batch.py).
    "harmony-ended-by-eog": Case(
        "<|channel|>analysis<|message|>Need the weather for Paris.<|end|>"
        "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
        '<|message|>{"city": "Paris", "days": 2}',
        "Need the weather for Paris.", ""),
    "harmony-answer": Case(
        "<|channel|>analysis<|message|>Simple greeting.<|end|>"
        "<|start|>assistant<|channel|>final<|message|>Hello there.<|return|>",
        "Simple greeting.", "Hello there.", calls=()),
    "deepseek": Case(
        "Need the weather for Paris.\n</think>\n\nChecking.<｜tool▁calls▁begin｜>"
        '<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris", "days": 2}'
        "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        "Need the weather for Paris.", "Checking.", start="reasoning"),
    "deepseek-v3-calls": Case(
        "Need the weather for Paris.\n</think>\n\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>"
        "function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\", \"days\": 2}\n```"
        "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        "Need the weather for Paris.", "", start="reasoning"),
    "deepseek-call-in-reasoning": Case(
        "Need the weather for Paris.\n<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather"
        '<｜tool▁sep｜>{"city": "Paris", "days": 2}<｜tool▁call▁end｜><｜tool▁calls▁end｜>',
        "Need the weather for Paris.", "", start="reasoning", anomaly="implicit_reasoning_end"),
    "dsml": Case(
        "Need the weather for Paris.</think>Checking.\n\n<｜DSML｜function_calls>\n"
        '<｜DSML｜invoke name="get_weather">\n'
        '<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n'
        '<｜DSML｜parameter name="days" string="false">2</｜DSML｜parameter>\n'
        "</｜DSML｜invoke>\n</｜DSML｜function_calls>",
        "Need the weather for Paris.", "Checking.", start="reasoning"),
    "glm": Case(
        "<think>Need the weather for Paris.</think>\nChecking.\n<tool_call>get_weather\n"
        "<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
        "<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n</tool_call>",
        "Need the weather for Paris.", "Checking."),
    "glm-answer": Case("<think>Simple greeting.</think>\nHello there.", "Simple greeting.",
                       "Hello there.", calls=()),
    "kimi-k2": Case(
        "<think>Need the weather for Paris.</think>Checking.<|tool_calls_section_begin|>"
        "<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
        '{"city": "Paris", "days": 2}<|tool_call_end|><|tool_calls_section_end|>',
        "Need the weather for Paris.", "Checking."),
    "kimi-k2-two-calls": Case(
        "<think>Two cities.</think><|tool_calls_section_begin|><|tool_call_begin|>"
        "functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Paris\", \"days\": 2}"
        "<|tool_call_end|><|tool_call_begin|>functions.get_weather:1<|tool_call_argument_begin|>"
        '{"city": "Lyon"}<|tool_call_end|><|tool_calls_section_end|>',
        "Two cities.", "", calls=TWO),
    "minimax-xml": Case(
        "Need the weather for Paris.\n</think>\n\nChecking.\n<minimax:tool_call>\n"
        '<invoke name="get_weather">\n<parameter name="city">Paris</parameter>\n'
        '<parameter name="days">2</parameter>\n</invoke>\n</minimax:tool_call>',
        "Need the weather for Paris.", "Checking.", start="reasoning"),
    "minimax-xml-two-calls": Case(
        "Two cities.\n</think>\n\n<minimax:tool_call>\n<invoke name=\"get_weather\">\n"
        '<parameter name="city">Paris</parameter>\n<parameter name="days">2</parameter>\n'
        '</invoke>\n<invoke name="get_weather">\n<parameter name="city">Lyon</parameter>\n'
        "</invoke>\n</minimax:tool_call>",
        "Two cities.", "", calls=(CALL, ("get_weather", {"city": "Lyon"})), start="reasoning"),
    "minimax-m3": Case(
        "Need the weather for Paris.</mm:think>Checking.]<]minimax[>[<tool_call>\n"
        ']<]minimax[>[<invoke name="get_weather">]<]minimax[>[<city>Paris]<]minimax[>[</city>'
        "]<]minimax[>[<days>2]<]minimax[>[</days>]<]minimax[>[</invoke>\n]<]minimax[>[</tool_call>",
        "Need the weather for Paris.", "Checking.", start="reasoning"),
    # real M3 replies close a value without the namespace token now and then: read, counted
    "minimax-m3-bare-closers": Case(
        "Need the weather for Paris.</mm:think>]<]minimax[>[<tool_call>\n"
        ']<]minimax[>[<invoke name="get_weather">]<]minimax[>[<city>Paris</city>'
        "]<]minimax[>[<days>2</days>]<]minimax[>[</invoke>\n]<]minimax[>[</tool_call>",
        "Need the weather for Paris.", "", start="reasoning", anomaly="repaired_call"),
    "kimi-k3": Case(
        "Need the weather for Paris.<|close|>think<|sep|><|open|>response<|sep|>Checking."
        '<|close|>response<|sep|><|open|>tools<|sep|><|open|>call tool="get_weather" index="1"'
        '<|sep|><|open|>argument key="city" type="string"<|sep|>Paris<|close|>argument<|sep|>'
        '<|open|>argument key="days" type="number"<|sep|>2<|close|>argument<|sep|>'
        "<|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>",
        "Need the weather for Paris.", "Checking.", start="reasoning"),
    "kimi-k3-two-calls": Case(
        "Two cities.<|close|>think<|sep|><|open|>response<|sep|><|close|>response<|sep|>"
        '<|open|>tools<|sep|><|open|>call tool="get_weather" index="1"<|sep|>'
        '<|open|>json type="object"<|sep|>{"city": "Paris", "days": 2}<|close|>json<|sep|>'
        '<|close|>call<|sep|><|open|>call tool="get_weather" index="2"<|sep|>'
        '<|open|>argument key="city" type="string"<|sep|>Lyon<|close|>argument<|sep|>'
        "<|close|>call<|sep|><|close|>tools<|sep|><|close|>message<|sep|>",
        "Two cities.", "", calls=TWO, start="reasoning"),
    "muse-glimmer": Case(
        " to=self<|message|>Need the weather for Paris.<|eom|><|start|>assistant to=user"
        "<|message|>Checking.<|eom|><|start|>assistant to=get_weather<|message|>"
        '<atem:function_calls>\n<atem:invoke name="get_weather">\n'
        '<atem:parameter name="city">Paris</atem:parameter>\n'
        '<atem:parameter name="days">2</atem:parameter>\n</atem:invoke>\n</atem:function_calls>',
        "Need the weather for Paris.", "Checking."),
    "muse-glimmer-answer": Case(
        " to=self<|message|>Simple greeting.<|eom|><|start|>assistant to=user<|message|>"
        "Hello there.", "Simple greeting.", "Hello there.", calls=()),
    "mistral": Case(
        '[THINK]Need the weather for Paris.[/THINK]Checking.[TOOL_CALLS]get_weather[ARGS]'
        '{"city": "Paris", "days": 2}',
        "Need the weather for Paris.", "Checking.", extra=THINK_ON),
    "mistral-two-calls": Case(
        '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "days": 2}'
        '[TOOL_CALLS]get_weather[ARGS]{"city": "Lyon"}', "", "", calls=TWO),
    "mistral-older-calls": Case(
        'Checking.[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris", '
        '"days": 2}}]', "", "Checking."),
    "gemma4": Case(
        "<|channel>thought\nNeed the weather for Paris.<channel|>"
        '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:2}<tool_call|>',
        "Need the weather for Paris.", "", extra=THINK_ON),
    "gemma4-answer": Case("<|channel>thought\nSimple greeting.<channel|>Hello there.",
                          "Simple greeting.", "Hello there.", calls=(), extra=THINK_ON),
    "gemma4-two-calls": Case(
        '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:2}<tool_call|>'
        '<|tool_call>call:get_weather{city:<|"|>Lyon<|"|>}<tool_call|>', "", "", calls=TWO),
    # several calls as Prism's llama3_json.jinja writes them in the history
    "llama3-json-two-calls": Case(
        '{"name": "get_weather", "parameters": {"city": "Paris", "days": 2}}; '
        '{"name": "get_weather", "parameters": {"city": "Lyon"}}', "", "", calls=TWO),
    "llama3-json": Case('{"name": "get_weather", "parameters": {"city": "Paris", "days": 2}}',
                        "", ""),
    "llama3-json-python-tag": Case(
        '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris", "days": 2}}',
        "", ""),
    # MiniMax-M1's prompt never opens the reasoning: the model writes <think> itself
    "minimax-m1": Case(
        "<think>\nNeed the weather for Paris.\n</think>\n\nChecking.\n<tool_calls>\n"
        '{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n</tool_calls>',
        "Need the weather for Paris.", "Checking."),
    "minimax-m1-two-calls": Case(
        "<think>\nTwo cities.\n</think>\n\n<tool_calls>\n"
        '{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}\n'
        '{"name": "get_weather", "arguments": {"city": "Lyon"}}\n</tool_calls>',
        "Two cities.", "", calls=TWO),
    "firefunction": Case(
        'Checking. functools[{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}]',
        "", "Checking."),
    "firefunction-two-calls": Case(
        ' functools[{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}, '
        '{"name": "get_weather", "arguments": {"city": "Lyon"}}]', "", "", calls=TWO),
    "functionary-v3.1": Case(
        'Checking.<function=get_weather>{"city": "Paris", "days": 2}</function>', "", "Checking."),
    "functionary-v3.1-two-calls": Case(
        '<function=get_weather>{"city": "Paris", "days": 2}</function>'
        '<function=get_weather>{"city": "Lyon"}</function>', "", "", calls=TWO),
    # Functionary v3.2's prompt ends with `>>>`: the model writes the recipient first
    "functionary-v3.2": Case(
        'all\nChecking.>>>get_weather\n{"city": "Paris", "days": 2}', "", "Checking."),
    "functionary-v3.2-two-calls": Case(
        'get_weather\n{"city": "Paris", "days": 2}>>>get_weather\n{"city": "Lyon"}', "", "",
        calls=TWO),
    "functionary-v3.2-answer": Case("all\nHello there.", "", "Hello there.", calls=()),
    "seed-oss": Case(
        "<seed:think>Need the weather for Paris.</seed:think>\nChecking.\n\n<seed:tool_call>\n"
        "<function=get_weather>\n<parameter=city>Paris</parameter>\n"
        "<parameter=days>2</parameter>\n</function>\n</seed:tool_call>",
        "Need the weather for Paris.", "Checking."),
    "seed-oss-two-calls": Case(
        "<seed:think>Two cities.</seed:think>\n<seed:tool_call>\n<function=get_weather>\n"
        "<parameter=city>Paris</parameter>\n<parameter=days>2</parameter>\n</function>\n"
        "</seed:tool_call>\n<seed:tool_call>\n<function=get_weather>\n"
        "<parameter=city>Lyon</parameter>\n</function>\n</seed:tool_call>",
        "Two cities.", "", calls=TWO),
    "minicpm5": Case(
        "Need the weather for Paris.\n</think>\n\nChecking.\n"
        '<function name="get_weather"><param name="city">Paris</param>'
        '<param name="days">2</param></function>',
        "Need the weather for Paris.", "Checking.", start="reasoning"),
    "minicpm5-two-calls": Case(
        'Two cities.\n</think>\n\n<function name="get_weather"><param name="city">Paris</param>'
        '<param name="days">2</param></function>\n<function name="get_weather">'
        '<param name="city"><![CDATA[Lyon]]></param></function>',
        "Two cities.", "", calls=TWO, start="reasoning"),
    # Hunyuan 3 thinks only when asked (its template's reasoning_effort, from enable_thinking)
    "hunyuan3": Case(
        "Checking.<tool_calls:opensource>\n<tool_call:opensource>get_weather<tool_sep:opensource>"
        "\n<arg_key:opensource>city</arg_key:opensource>\n"
        "<arg_value:opensource>Paris</arg_value:opensource>\n"
        "<arg_key:opensource>days</arg_key:opensource>\n"
        "<arg_value:opensource>2</arg_value:opensource>\n</tool_call:opensource>\n"
        "</tool_calls:opensource>", "", "Checking."),
    "hunyuan3-thinking-two-calls": Case(
        "Two cities.</think:opensource><tool_calls:opensource>\n<tool_call:opensource>"
        "get_weather<tool_sep:opensource>\n<arg_key:opensource>city</arg_key:opensource>\n"
        "<arg_value:opensource>Paris</arg_value:opensource>\n"
        "<arg_key:opensource>days</arg_key:opensource>\n"
        "<arg_value:opensource>2</arg_value:opensource>\n</tool_call:opensource>\n"
        "<tool_call:opensource>get_weather<tool_sep:opensource>\n"
        "<arg_key:opensource>city</arg_key:opensource>\n"
        "<arg_value:opensource>Lyon</arg_value:opensource>\n</tool_call:opensource>\n"
        "</tool_calls:opensource>",
        "Two cities.", "", calls=TWO, start="reasoning", extra=THINK_ON),
    "lfm2": Case(
        "<think>Need the weather for Paris.</think>Checking.<|tool_call_start|>"
        '[get_weather(city="Paris", days=2)]<|tool_call_end|>',
        "Need the weather for Paris.", "Checking."),
    # several calls as LFM2.5's template writes them in the history (single-quoted strings)
    "lfm2-two-calls": Case(
        "<|tool_call_start|>[get_weather(city='Paris', days=2), get_weather(city='Lyon')]"
        "<|tool_call_end|>", "", "", calls=TWO),
    "lfm2-json-calls": Case(
        '<|tool_call_start|>[{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}]'
        "<|tool_call_end|>", "", ""),
    "granite": Case(
        '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}]',
        "", ""),
    "granite-two-calls": Case(
        '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}, '
        '{"name": "get_weather", "arguments": {"city": "Lyon"}}]', "", "", calls=TWO),
    "granite-answer": Case("<think>Simple greeting.</think><response>Hello there.</response>",
                           "Simple greeting.", "Hello there.", calls=()),
    "nemotron-v2": Case(
        "Need the weather for Paris.\n</think>\nChecking.\n<TOOLCALL>[{\"name\": \"get_weather\", "
        '"arguments": {"city": "Paris", "days": 2}}]</TOOLCALL>',
        "Need the weather for Paris.", "Checking.", start="reasoning"),
    "nemotron-v2-two-calls": Case(
        'Two cities.\n</think>\n<TOOLCALL>[{"name": "get_weather", "arguments": {"city": "Paris", '
        '"days": 2}}, {"name": "get_weather", "arguments": {"city": "Lyon"}}]</TOOLCALL>',
        "Two cities.", "", calls=TWO, start="reasoning"),
}


SOLAR_CALL = ("<|tool_call:begin|>a1b2c3d4e5<|tool_call:name|>get_weather<|tool_call:args|>"
              '{"city": "Paris", "days": 2}<|tool_call:end|>')
CASES.update({
    "solar-open": Case(
        "<|think|>Need the weather for Paris.<|end|><|begin|>assistant<|content|>Checking.<|end|>"
        "<|begin|>assistant<|tool_calls|>" + SOLAR_CALL,
        "Need the weather for Paris.", "Checking."),
    "solar-open-answer": Case(
        "<|think|>Simple greeting.<|end|><|begin|>assistant<|content|>Hello there.",
        "Simple greeting.", "Hello there.", calls=()),
    "solar-open-two-calls": Case(
        "<|think|>Two cities.<|end|><|begin|>assistant<|tool_calls|>" + SOLAR_CALL
        + "<|tool_call:begin|>f6g7h8i9j0<|tool_call:name|>get_weather<|tool_call:args|>"
        '{"city": "Lyon"}<|tool_call:end|>', "Two cities.", "", calls=TWO),
    "apertus": Case(
        "<|inner_prefix|>Need the weather for Paris.<|inner_suffix|>Checking.<|tools_prefix|>"
        '[{"get_weather": {"city": "Paris", "days": 2}}]<|tools_suffix|>',
        "Need the weather for Paris.", "Checking.", extra=THINK_ON),
    "apertus-two-calls": Case(
        '<|tools_prefix|>[{"get_weather": {"city": "Paris", "days": 2}}, '
        '{"get_weather": {"city": "Lyon"}}]<|tools_suffix|>', "", "", calls=TWO),
    "gigachat3": Case(
        "Checking.<|message_sep|>\n\nfunction call<|role_sep|>\n"
        '{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}', "", "Checking."),
    "gigachat3-answer": Case("Hello there.<|message_sep|>", "", "Hello there.", calls=()),
    "gigachat3.1": Case(
        'Checking.<|function_call|>{"name": "get_weather", "arguments": {"city": "Paris", '
        '"days": 2}}', "", "Checking."),
})


# Command R7B's pack renders Cohere2MoE.jinja, whose prompt opens <|START_THINKING|>; Command R+
# has no pack (its only real template renders no request without tools), so no case here.
R7B_CALL = ('{"tool_call_id": "0", "tool_name": "get_weather", '
            '"parameters": {"city": "Paris", "days": 2}}')
APRIEL_CALL = '{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}'
CASES.update({
    "command-r7b": Case(
        "Need the weather for Paris.<|END_THINKING|><|START_ACTION|>[\n    " + R7B_CALL
        + "\n]<|END_ACTION|>", "Need the weather for Paris.", "", start="reasoning"),
    "command-r7b-answer": Case(
        "Simple greeting.<|END_THINKING|><|START_TEXT|>Hello there.<|END_TEXT|>",
        "Simple greeting.", "Hello there.", calls=(), start="reasoning"),
    "command-r7b-two-calls": Case(
        "Two cities.<|END_THINKING|><|START_ACTION|>[\n    " + R7B_CALL + ",\n    "
        '{"tool_call_id": "1", "tool_name": "get_weather", "parameters": {"city": "Lyon"}}\n'
        "]<|END_ACTION|>", "Two cities.", "", calls=TWO, start="reasoning"),
    "apriel": Case(
        "Here are my reasoning steps:\nNeed the weather for Paris.\n[BEGIN FINAL RESPONSE]\n"
        f"Checking.\n<tool_calls>[{APRIEL_CALL}]</tool_calls>",
        "Need the weather for Paris.", "Checking."),
    "apriel-answer": Case(
        "Here are my reasoning steps:\nSimple greeting.\n[BEGIN FINAL RESPONSE]\nHello there.\n"
        "[END FINAL RESPONSE]", "Simple greeting.", "Hello there.", calls=()),
    "apriel-two-calls": Case(
        "Here are my reasoning steps:\nTwo cities.\n[BEGIN FINAL RESPONSE]\n"
        f'<tool_calls>[{APRIEL_CALL}, {{"name": "get_weather", "arguments": {{"city": "Lyon"}}}}]'
        "</tool_calls>", "Two cities.", "", calls=TWO),
})


def family_of(name: str) -> str:
    return next(d for d in sorted(families.REGISTRY, key=len, reverse=True) if name.startswith(d))


def needs_parser(name: str) -> str:
    family = family_of(name)
    assert family in families.NAMES, f"no parser registered for the {family} family"
    return family


def norm(text: str) -> str:
    return text.strip()


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_family_pack_starts_where_its_output_continues(name):
    """Needs no parser: the pack's template renders the request, and families.start_state
    reads where the model takes over, as the service will."""
    family, case = family_of(name), CASES[name]
    pack = resolve_pack(family, require_model=False)
    assert pack.family == family and detect(pack.template).family == family
    thinking = (case.extra or {}).get("chat_template_kwargs", {}).get("enable_thinking")
    prompt = pack.chat_template().render(
        [Message("user", ASK[0]["content"])], tools=TOOLS,
        enable_thinking=pack.thinking if thinking is None else thinking)
    assert start_state(prompt, family) == case.start, prompt[-60:]
    assert "get_weather" in prompt  # the tools reach the model


@pytest.mark.parametrize("name", sorted(CASES))
def test_openai_sdk_reads_each_family(serve, name):
    family, case = needs_parser(name), CASES[name]
    live = serve(case.output, case.output, pack=family)
    client = live.openai()
    kw = {"model": "m", "messages": ASK, "tools": TOOLS, "extra_body": case.extra or {}}
    streamed = collect(client.chat.completions.create(stream=True, **kw))
    resp = whole(client.chat.completions.create(**kw))
    run = live.last
    assert run.start_state == case.start, run.prompt[-80:]
    want = oracle(case.output, start=case.start, family=family, tools=TOOLS)
    oracle_calls = [(c.name, c.arguments) for c in want.tool_calls]
    assert comparable(streamed) == comparable(resp) == (
        want.reasoning, want.content, oracle_calls, want.finish_reason)
    reasoning, content, calls, finish = comparable(resp)
    assert (norm(reasoning), norm(content), calls) == (case.reasoning, case.content,
                                                        list(case.calls))
    assert finish == ("tool_calls" if case.calls else "stop")
    counted = {k: n for k, n in run.result.anomalies.items() if n}
    assert counted == ({case.anomaly: 1} if case.anomaly else {})
    # markup never leaks into what the client sees
    for text in (reasoning, content):
        assert "<|" not in text and "<｜" not in text and "[TOOL_CALLS]" not in text


@pytest.mark.parametrize("name", sorted(CASES))
def test_anthropic_sdk_reads_each_family(serve, name):
    family, case = needs_parser(name), CASES[name]
    live = serve(case.output, case.output, pack=family)
    client = live.anthropic()
    kw = {"model": "claude-any", "max_tokens": 4096, "messages": ASK, "tools": ANTHROPIC_TOOLS}
    if case.extra:
        kw["thinking"] = {"type": "enabled", "budget_tokens": 1024}
    with client.messages.stream(**kw) as stream:
        for _ in stream:
            pass
        streamed = stream.get_final_message()
    message = client.messages.create(**kw)
    assert summary(blocks(streamed)) == summary(blocks(message))
    thinking, text, calls = summary(blocks(message))
    assert (norm(thinking), norm(text)) == (case.reasoning, case.content)
    assert calls == list(case.calls)
    assert message.stop_reason == ("tool_use" if case.calls else "end_turn")


# --- the real command line -----------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_prism_serve_replays_a_harmony_output_for_the_sdks(tmp_path):
    family = needs_parser("harmony")
    case = CASES["harmony"]
    out = tmp_path / "gpt-oss.txt"
    out.write_text(case.output, encoding="utf-8")
    port = _free_port()
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "serve", "--pack", family, "--replay", str(out),
         str(out), "--port", str(port), "--no-record"],
        cwd=root, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None, proc.communicate()[0]
                assert time.monotonic() < deadline, "prism serve did not start"
                time.sleep(0.2)
        with openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0) as client:
            resp = client.chat.completions.create(model="m", messages=ASK, tools=TOOLS)
        msg = resp.choices[0].message
        assert [(c.function.name, json.loads(c.function.arguments))
                for c in msg.tool_calls or ()] == [CALL]
        assert norm((msg.model_extra or {}).get("reasoning_content") or "") == case.reasoning
        assert resp.choices[0].finish_reason == "tool_calls"
        with anthropic.Anthropic(base_url=url, api_key="x", max_retries=0) as client:
            message = client.messages.create(model="m", max_tokens=1024, messages=ASK,
                                             tools=ANTHROPIC_TOOLS)
        assert summary(blocks(message))[2] == [CALL]
    finally:
        proc.terminate()
        proc.communicate(timeout=10)  # reaps it and closes its pipe


# --- the window says which family it reads ------------------------------------------------------


def test_the_window_title_names_the_packs_family(qapp, qtbot, replay_service):
    """The family chosen (by the pack here; by the GGUF's template with --model) is in the
    window's title, as the log says it at start-up."""
    import asyncio

    import qasync

    from app.gui import Inspector

    loop = qasync.QEventLoop(qapp)
    asyncio.set_event_loop(loop)
    try:
        inspector = Inspector(replay_service(CASES["gemma4"].output, pack="gemma4"), port=0)
        qtbot.addWidget(inspector.window)
        assert "(gemma4, family gemma4)" in inspector.window.windowTitle()
        loop.run_until_complete(inspector.close())
        loop.run_until_complete(asyncio.sleep(0.05))
    finally:
        loop.close()
        asyncio.set_event_loop(None)
        qapp.processEvents()
