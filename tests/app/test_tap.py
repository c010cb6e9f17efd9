"""`--tap` (app/api/tap.py): Prism forwarding chat, messages and responses requests unchanged.

- In front of the scripted upstream: request bytes and response bytes (and the headers that
  describe the message) pass through identical; errors pass through unchanged; a refused
  upstream is the caller's 502 in its dialect; a client that leaves closes the upstream stream.
- In front of another `prism serve --replay`: the three APIs, streamed and not, give the caller
  exactly what the upstream gives, while the window's run (and the recording) hold the
  upstream's reasoning, content and calls, re-read by Prism's parser.
- An upstream whose parser leaks `<tool_call>` markup into its content (a Prism whose pack
  reads Hermes JSON, serving a Qwen XML call), or a think tag, is flagged `upstream_leak`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import anthropic
import httpx
import pytest

from app.api.tap import TapEngine
from app.api.tap_readers import Synth
from engine.backends.upstream.engine import UpstreamEngine
from engine.chat.packs import resolve_pack
from engine.parse import families
from engine.parse.events import UPSTREAM_LEAK, ToolCall
from engine.record.reader import read_session
from tests.app.conftest import TOOLS, Live, hang_up_mid_stream, xml_call
from tests.app.test_openai import ASK, collect
from tests.engine.backends.upstream.scripted_upstream import (
    Reply,
    ScriptedUpstream,
    Seen,
    free_port,
)

OUTPUT = "I should check.\n</think>\n\nLet me look it up.\n" + xml_call("get_weather",
                                                                         city="Paris")


@pytest.fixture
def tap(serve_upstream) -> Callable[..., Live]:
    """tap(url, pack="qwen3-xml", **ServerConfig fields): `prism serve --upstream URL --tap`."""

    def start(url: str, *, pack: str = "qwen3-xml", **config) -> Live:
        engine = TapEngine(UpstreamEngine(url))
        assert engine.ready.wait(10)
        return serve_upstream(engine, resolve_pack(pack, require_model=False), **config)

    return start


def wait_done(live: Live) -> None:
    assert live.runs, "no run was started"
    assert live.last.wait(10) is not None, "the run never finished"


# --- bytes in, bytes out ------------------------------------------------------------------------

REQUEST = (b'{"model":"up-model",  "messages":[{"role":"user","content":"Hi \\u00e9t\\u00e9"}],'
           b'"stream":true, "vendor_knob": {"x": [1, 2.50]}}')
STREAM = [
    b'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":'
    b'{"role":"assistant","reasoning_content":"Hmm, "}}]}\n\n',
    b'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":'
    b'{"reasoning_content":"simple."}}]}\n\n',
    b'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":'
    b'{"content":"Hello \xc3\xa9t\xc3\xa9"},"finish_reason":null}],   "vendor_extra":1}\n\n',
    b'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},'
    b'"finish_reason":"stop"}]}\n\n',
    b"data: [DONE]\n\n",
]


def test_request_and_response_bytes_pass_through_unchanged(tap):
    async def script(req: Seen, reply: Reply) -> None:
        await reply.start_stream("x-upstream-trace: abc123\r\n")
        for piece in STREAM:
            await reply.send(piece)
        await reply.end_stream()

    with ScriptedUpstream(script) as up:
        live = tap(up.url)
        http = live.http()
        with http.stream("POST", "/v1/chat/completions?trace=1", content=REQUEST,
                         headers={"content-type": "application/json",
                                  "x-client-tag": "t-1", "authorization": "Bearer theirs"}
                         ) as resp:
            body = resp.read()
        (seen,) = up.requests
    assert seen.raw == REQUEST  # the request, byte for byte
    assert seen.path == "/v1/chat/completions?trace=1"
    assert seen.headers["x-client-tag"] == "t-1"
    assert seen.headers["authorization"] == "Bearer theirs"  # no key of Prism's: passed on
    assert body == b"".join(STREAM)  # the answer, byte for byte
    assert resp.headers["x-upstream-trace"] == "abc123"
    assert resp.headers["content-type"] == "text/event-stream"
    wait_done(live)
    res = live.last.result
    assert (res.reasoning, res.content, res.finish_reason) == ("Hmm, simple.", "Hello été",
                                                               "stop")
    assert res.anomalies.get(UPSTREAM_LEAK, 0) == 0


def test_an_upstream_that_ignores_stream_is_read_as_it_answered(tap):
    answer = {"id": "c2", "object": "chat.completion", "choices": [{
        "index": 0, "finish_reason": "length",
        "message": {"role": "assistant", "reasoning_content": "Short.", "content": "Whole."}}]}

    async def script(req: Seen, reply: Reply) -> None:
        await reply.json(200, answer)

    with ScriptedUpstream(script) as up:
        live = tap(up.url)
        resp = live.http().post("/v1/chat/completions", json={"messages": ASK, "stream": True})
    assert resp.json() == answer  # one JSON body, relayed as it came
    wait_done(live)
    res = live.last.result
    assert (res.reasoning, res.content, res.finish_reason) == ("Short.", "Whole.", "length")


def test_upstream_errors_pass_through_and_a_refused_upstream_is_a_502(tap):
    async def script(req: Seen, reply: Reply) -> None:
        await reply.json(422, {"object": "error", "message": "bad field 'x'", "code": 422})

    with ScriptedUpstream(script) as up:
        live = tap(up.url)
        resp = live.http().post("/v1/chat/completions", json={"messages": ASK})
    assert resp.status_code == 422
    assert resp.json() == {"object": "error", "message": "bad field 'x'", "code": 422}
    wait_done(live)
    assert live.last.finish.reason == "error" and "bad field" in live.last.finish.error

    gone = tap(f"http://127.0.0.1:{free_port()}/v1")
    with pytest.raises(anthropic.InternalServerError) as err:
        gone.anthropic().messages.create(model="m", max_tokens=10, messages=ASK)
    assert err.value.status_code == 502
    assert err.value.body["type"] == "error"  # the caller's dialect
    assert "could not be reached" in err.value.body["error"]["message"]


def test_an_upstream_cut_mid_way_cuts_the_callers_stream_too(tap):
    async def script(req: Seen, reply: Reply) -> None:
        await reply.start_stream()
        await reply.send(STREAM[0])
        await reply.send(STREAM[2])
        reply.cut()

    with ScriptedUpstream(script) as up:
        live = tap(up.url)
        got = b""
        with pytest.raises(httpx.RemoteProtocolError), \
                live.http().stream("POST", "/v1/chat/completions", content=REQUEST,
                                   headers={"content-type": "application/json"}) as resp:
            for data in resp.iter_raw():
                got += data
    assert got == STREAM[0] + STREAM[2]  # all that came, then the same broken end
    wait_done(live)
    fin = live.last.finish
    assert fin.reason == "error" and "cut the stream" in fin.error
    assert live.last.result.content == "Hello été"  # kept, as the recording keeps it


def test_a_client_that_leaves_closes_the_upstream_stream(tap):
    async def script(req: Seen, reply: Reply) -> None:
        await reply.start_stream()
        for _ in range(500):
            await reply.event({"choices": [{"index": 0, "delta": {"content": "word "}}]})
            await asyncio.sleep(0.02)

    with ScriptedUpstream(script) as up:
        live = tap(up.url)
        hang_up_mid_stream(live, up, ASK)
    wait_done(live)
    assert live.last.finish.reason == "cancelled"


# --- in front of another Prism -------------------------------------------------------------------


def test_openai_chat_through_the_tap_is_the_upstreams_and_the_run_holds_it(serve, tap):
    back = serve(OUTPUT)
    direct = collect(back.openai().chat.completions.create(
        model="m", messages=ASK, tools=TOOLS, stream=True))
    live = tap(back.url)
    through = collect(live.openai().chat.completions.create(
        model="m", messages=ASK, tools=TOOLS, stream=True))
    for key in ("reasoning", "content", "finish"):
        assert through[key] == direct[key]
    assert [c["name"] for c in through["calls"].values()] == ["get_weather"]
    wait_done(live)
    res = live.last.result
    assert (res.reasoning, res.content) == (direct["reasoning"], direct["content"])
    assert res.reasoning == "I should check."
    assert [(c.name, c.arguments) for c in res.tool_calls] == [("get_weather",
                                                                 {"city": "Paris"})]
    assert res.finish_reason == "tool_calls"
    assert res.anomalies.get(UPSTREAM_LEAK, 0) == 0
    # What was asked is the request the back got.
    assert back.last.request.messages == live.last.request.messages


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_and_responses_through_the_tap(serve, tap, stream):
    back = serve(OUTPUT)
    live = tap(back.url)
    if stream:
        with live.anthropic().messages.stream(model="m", max_tokens=200, messages=ASK,
                                              tools=[_anthropic_tool()]) as s:
            msg = s.get_final_message()
    else:
        msg = live.anthropic().messages.create(model="m", max_tokens=200, messages=ASK,
                                               tools=[_anthropic_tool()])
    assert [b.type for b in msg.content] == ["thinking", "text", "tool_use"]
    wait_done(live)
    res = live.last.result
    assert res.reasoning == "I should check."
    assert [c.name for c in res.tool_calls] == ["get_weather"]

    resp = live.openai().responses.create(model="m", input="Weather?", stream=False,
                                          tools=[{"type": "function", "name": "get_weather",
                                                  "parameters": TOOLS[0]["function"]
                                                  ["parameters"]}])
    assert [o.type for o in resp.output] == ["reasoning", "message", "function_call"]
    wait_done(live)
    assert [c.name for c in live.last.result.tool_calls] == ["get_weather"]


def _anthropic_tool() -> dict:
    fn = TOOLS[0]["function"]
    return {"name": fn["name"], "description": fn["description"],
            "input_schema": fn["parameters"]}


# --- leaks ---------------------------------------------------------------------------------------


def test_an_upstream_that_leaks_call_markup_into_content_is_flagged(serve, tap):
    # The back reads Hermes JSON calls: the Qwen XML call it is given stays content text.
    back = serve(OUTPUT, pack="qwen3-hermes")
    live = tap(back.url, pack="qwen3-xml")
    reply = live.openai().chat.completions.create(model="m", messages=ASK, tools=TOOLS)
    assert "<tool_call>\n<function=get_weather>" in reply.choices[0].message.content
    assert reply.choices[0].message.tool_calls is None  # the caller got the upstream's answer
    wait_done(live)
    run = live.last
    leaks = [ev for ev in run.events if ev.anomaly == UPSTREAM_LEAK]
    assert len(leaks) == 1 and "returned as text" in leaks[0].text
    assert run.result.anomalies[UPSTREAM_LEAK] == 1
    assert [c.name for c in run.result.tool_calls] == ["get_weather"]  # Prism's reading
    snap = live.service.metrics.snapshot()
    assert snap["totals"]["anomalies"][UPSTREAM_LEAK] == 1
    live.service.recorder.close()
    (req,) = read_session(live.service.recorder.path).requests
    assert req.result["anomalies"][UPSTREAM_LEAK] == 1


def test_a_think_tag_left_in_content_is_flagged(tap):
    async def script(req: Seen, reply: Reply) -> None:
        await reply.start_stream()
        await reply.event({"choices": [{"index": 0, "delta": {"content": "Plan</think>"}}]})
        await reply.event({"choices": [{"index": 0, "delta": {"content": " Answer."}}]})
        await reply.event({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        await reply.event("[DONE]")
        await reply.end_stream()

    with ScriptedUpstream(script) as up:
        live = tap(up.url)
        out = collect(live.openai().chat.completions.create(model="m", messages=ASK,
                                                            stream=True))
    assert out["content"] == "Plan</think> Answer."  # unchanged for the caller
    wait_done(live)
    assert live.last.result.anomalies[UPSTREAM_LEAK] == 1


def test_a_call_left_in_the_upstreams_reasoning_is_flagged(tap):
    thinking = "I need the weather.\n\n" + xml_call("get_weather", city="Paris")

    async def script(req: Seen, reply: Reply) -> None:
        await reply.json(200, {"choices": [{"index": 0, "finish_reason": "stop", "message": {
            "role": "assistant", "reasoning_content": thinking, "content": ""}}]})

    with ScriptedUpstream(script) as up:
        live = tap(up.url)
        live.openai().chat.completions.create(model="m", messages=ASK, tools=TOOLS)
    wait_done(live)
    res = live.last.result
    assert res.anomalies[UPSTREAM_LEAK] == 1
    assert res.anomalies["implicit_reasoning_end"] == 1  # how Prism itself reads it
    assert [c.name for c in res.tool_calls] == ["get_weather"]
    assert res.reasoning == "I need the weather."


def test_synth_writes_the_calls_in_the_pack_syntax_and_knows_whose_text_is_whose():
    s = Synth("qwen-xml", "reasoning")
    s.reasoning("think")
    s.content("text")
    s.call("f", '{"a": "x", "n": 2}')
    assert s.text == "think\n</think>\n\ntext"  # the calls wait for the reply's end
    s.end()
    call = families.get("qwen-xml").writer.write_call(ToolCall("call_0", "f", {"a": "x", "n": 2},
                                                               0))
    assert s.text == "think\n</think>\n\ntext\n" + call
    assert "<parameter=n>\n2\n</parameter>" in s.text
    assert s.theirs((0, 5)) and s.theirs((18, 20))
    assert not s.theirs((5, 16)) and not s.theirs((len(s.text) - 5, len(s.text)))
    h = Synth("hermes-json", "content")
    h.reasoning("r")
    h.content("c")
    assert h.text == "<think>\nr\n</think>\n\nc"
    h.call("f", {"a": 1})
    h.end()
    assert json.loads(h.text.split("\n")[-2]) == {"name": "f", "arguments": {"a": 1}}
    auto = Synth("auto", "content")  # `auto` writes as Hermes JSON
    auto.content("c")
    auto.call("f", {"a": 1})
    auto.end()
    assert auto.text == h.text.removeprefix("<think>\nr\n</think>\n\n")


def test_synth_writes_a_familys_calls_in_one_section_and_text_after_them():
    calls = [ToolCall("call_0", "f", {"a": 1}, 0), ToolCall("call_1", "g", {}, 1)]
    kimi = families.get("kimi-k2").writer
    s = Synth("kimi-k2", "content")
    s.reasoning("Plan.")
    s.call("f", '{"a": 1}')
    s.call("g", "")
    s.end()
    assert s.text == kimi.write("Plan.", "", calls)  # both calls in one section
    assert s.text.count("<|tool_calls_section_begin|>") == 1
    assert s.theirs((len(kimi.reasoning_open), len(kimi.reasoning_open) + 5))
    assert not s.theirs((len(kimi.reasoning_open) + 5, len(s.text)))
    harmony = families.get("harmony").writer
    t = Synth("harmony", "content")
    t.reasoning("Plan.")
    t.content("Calling.")
    t.call("f", {"a": 1})
    t.content("Then.")  # text after a call: the call is written first, then a new answer
    t.end()
    assert t.text == (harmony.write("Plan.", "Calling.", calls[:1]) + harmony.calls_sep
                      + harmony.answer_open + "Then.")
    assert t.theirs((len(t.text) - 5, len(t.text)))
