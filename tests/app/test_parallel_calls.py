"""Parallel calls off in the three APIs (app/api/openai.py, anthropic.py, responses.py,
tool_choice.py; engine/parse/filters.py `FirstCallOnly`): OpenAI's `parallel_tool_calls: false` and
Anthropic's `tool_choice.disable_parallel_tool_use: true` give the client the first complete
call only, streamed and whole alike; each dropped call is an `extra_tool_call` anomaly, counted
in /metrics and kept in the recording with the output as the model wrote it. Official SDKs
against the live replay server.
"""

from __future__ import annotations

import json
import logging

import anthropic
import openai
import pytest

from engine.parse.events import EXTRA_TOOL_CALL
from engine.record.reader import read_session
from tests.app.conftest import TOOLS, xml_call
from tests.app.test_metrics import samples

ASK = [{"role": "user", "content": "Weather in Paris, and the news?"}]
FIRST = xml_call("get_weather", city="Paris")
SECOND = xml_call("search", query="news")
TWO = "Two calls.\n</think>\n\n" + FIRST + "\n" + SECOND
ANTHROPIC_TOOLS = [{"name": t["function"]["name"], "description": t["function"]["description"],
                    "input_schema": t["function"]["parameters"]} for t in TOOLS]
RESPONSES_TOOLS = [{"type": "function", **t["function"]} for t in TOOLS]


def extra_counted(live) -> int:
    """extra_tool_call in /metrics, JSON and Prometheus (which must agree)."""
    http = live.http()
    n = http.get("/metrics", params={"format": "json"}).json()["totals"]["anomalies"].get(
        EXTRA_TOOL_CALL, 0)
    prom = {dict(k[1])["kind"]: v for k, v in samples(http.get("/metrics").text).items()
            if k[0] == "prism_anomalies_total"}
    assert prom.get(EXTRA_TOOL_CALL, 0) == n
    return n


def chat_stream_calls(stream) -> tuple[list[tuple[int, str | None, str]], str | None]:
    """(index, name, arguments) of each streamed call, and the finish reason."""
    calls: dict[int, list] = {}
    finish = None
    for chunk in stream:
        for choice in chunk.choices:
            for tc in choice.delta.tool_calls or ():
                entry = calls.setdefault(tc.index, [tc.index, None, ""])
                if tc.function and tc.function.name:
                    entry[1] = tc.function.name
                if tc.function and tc.function.arguments:
                    entry[2] += tc.function.arguments
            finish = choice.finish_reason or finish
    return [tuple(v) for _, v in sorted(calls.items())], finish


# --- Chat Completions --------------------------------------------------------------------------


def test_chat_parallel_on_delivers_both_calls(serve):
    live = serve(TWO)
    client = live.openai()
    for parallel in (None, True):
        extra = {} if parallel is None else {"parallel_tool_calls": parallel}
        msg = client.chat.completions.create(model="m", messages=ASK, tools=TOOLS, **extra)
        names = [c.function.name for c in msg.choices[0].message.tool_calls]
        assert names == ["get_weather", "search"]
        streamed, _ = chat_stream_calls(client.chat.completions.create(
            model="m", messages=ASK, tools=TOOLS, stream=True, **extra))
        assert [c[1] for c in streamed] == ["get_weather", "search"]
    assert extra_counted(live) == 0


def test_chat_parallel_off_delivers_the_first_call_only(serve, caplog):
    caplog.set_level(logging.INFO, logger="prism")
    live = serve(TWO)
    client = live.openai()
    resp = client.chat.completions.create(model="m", messages=ASK, tools=TOOLS,
                                          parallel_tool_calls=False)
    choice = resp.choices[0]
    assert [(c.function.name, json.loads(c.function.arguments))
            for c in choice.message.tool_calls] == [("get_weather", {"city": "Paris"})]
    assert choice.finish_reason == "tool_calls"
    assert "search" not in (choice.message.content or "")
    streamed, finish = chat_stream_calls(client.chat.completions.create(
        model="m", messages=ASK, tools=TOOLS, stream=True, parallel_tool_calls=False))
    # streamed and whole agree: one call, nothing of the second sent at all
    assert streamed == [(0, "get_weather", choice.message.tool_calls[0].function.arguments)]
    assert finish == "tool_calls"
    assert extra_counted(live) == 2
    said = [r.getMessage() for r in caplog.records if "extra tool call" in r.getMessage()]
    assert len(said) == 2 and all("<function=search>" in m for m in said)
    # the recording keeps what the model wrote, and the result the client got
    recorded = read_session(live.service.recorder.path).requests
    assert len(recorded) == 2
    for rec in recorded:
        assert SECOND in rec.text
        assert [c["name"] for c in rec.result["tool_calls"]] == ["get_weather"]
        assert rec.result["anomalies"][EXTRA_TOOL_CALL] == 1
        assert rec.request["parallel_calls"] is False


@pytest.mark.parametrize("value", ["no", 0, {"on": False}])
def test_chat_parallel_tool_calls_of_the_wrong_type_is_400(serve, value):
    live = serve(TWO)
    with pytest.raises(openai.BadRequestError) as e:
        live.openai().chat.completions.create(model="m", messages=ASK, tools=TOOLS,
                                              parallel_tool_calls=value)
    assert e.value.body["param"] == "parallel_tool_calls"
    assert live.runs == []


def test_forced_call_with_parallel_off_samples_a_one_call_grammar(serve):
    live = serve(TWO)
    client = live.openai()
    client.chat.completions.create(model="m", messages=ASK, tools=TOOLS, tool_choice="required")
    several = live.last.job.grammar
    client.chat.completions.create(model="m", messages=ASK, tools=TOOLS, tool_choice="required",
                                   parallel_tool_calls=False)
    one = live.last.job.grammar
    root = {g: next(line for line in g.split("\n") if line.startswith("root ::="))
            for g in (several, one)}
    # "required" allows a call then more (`any (sep any)*`); with parallel calls off, just one
    assert root[several].endswith(")*") and not root[one].endswith(")*"), root


# --- Anthropic Messages --------------------------------------------------------------------------


def test_anthropic_disable_parallel_tool_use(serve):
    live = serve(TWO)
    client = live.anthropic()

    def ask(**choice):
        kw = {"tool_choice": {"type": "auto", **choice}} if choice else {}
        return client.messages.create(model="m", max_tokens=200, messages=ASK,
                                      tools=ANTHROPIC_TOOLS, **kw)

    both = ask()
    assert [b.name for b in both.content if b.type == "tool_use"] == ["get_weather", "search"]
    assert [b.name for b in ask(disable_parallel_tool_use=False).content
            if b.type == "tool_use"] == ["get_weather", "search"]
    one = ask(disable_parallel_tool_use=True)
    assert [(b.name, b.input) for b in one.content if b.type == "tool_use"] == [
        ("get_weather", {"city": "Paris"})]
    assert one.stop_reason == "tool_use"
    with client.messages.stream(model="m", max_tokens=200, messages=ASK, tools=ANTHROPIC_TOOLS,
                                tool_choice={"type": "auto",
                                             "disable_parallel_tool_use": True}) as stream:
        starts = [ev.content_block.name for ev in stream
                  if ev.type == "content_block_start" and ev.content_block.type == "tool_use"]
        final = stream.get_final_message()
    assert starts == ["get_weather"]
    assert [b.type for b in final.content] == [b.type for b in one.content]
    assert final.stop_reason == "tool_use"
    assert extra_counted(live) == 2


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_anthropic_disable_parallel_tool_use_of_the_wrong_type_is_400(serve, value):
    live = serve(TWO)
    with pytest.raises(anthropic.BadRequestError) as e:
        live.anthropic().messages.create(
            model="m", max_tokens=20, messages=ASK, tools=ANTHROPIC_TOOLS,
            tool_choice={"type": "any", "disable_parallel_tool_use": value})
    assert "tool_choice.disable_parallel_tool_use" in e.value.body["error"]["message"]
    assert live.runs == []


# --- Responses ----------------------------------------------------------------------------------


def test_responses_parallel_tool_calls_is_honoured_and_echoed(serve):
    live = serve(TWO)
    client = live.openai()
    both = client.responses.create(model="m", input="Weather?", tools=RESPONSES_TOOLS)
    assert both.parallel_tool_calls is True
    assert [o.name for o in both.output if o.type == "function_call"] == ["get_weather", "search"]
    one = client.responses.create(model="m", input="Weather?", tools=RESPONSES_TOOLS,
                                  parallel_tool_calls=False)
    assert one.parallel_tool_calls is False
    calls = [(o.name, json.loads(o.arguments)) for o in one.output if o.type == "function_call"]
    assert calls == [("get_weather", {"city": "Paris"})]
    events = list(client.responses.create(model="m", input="Weather?", tools=RESPONSES_TOOLS,
                                          parallel_tool_calls=False, stream=True))
    added = [ev.item.name for ev in events
             if ev.type == "response.output_item.added" and ev.item.type == "function_call"]
    assert added == ["get_weather"]
    final = events[-1].response
    assert final.parallel_tool_calls is False
    assert [o.name for o in final.output if o.type == "function_call"] == ["get_weather"]
    assert extra_counted(live) == 2


def test_responses_parallel_tool_calls_of_the_wrong_type_is_400(serve):
    live = serve(TWO)
    with pytest.raises(openai.BadRequestError) as e:
        live.openai().responses.create(model="m", input="Weather?", tools=RESPONSES_TOOLS,
                                       parallel_tool_calls="false")
    assert e.value.body["param"] == "parallel_tool_calls"
    assert live.runs == []
