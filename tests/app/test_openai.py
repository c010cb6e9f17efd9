"""app/api/openai.py over HTTP with the official `openai` SDK: every parser rule streamed and
not (identical, and equal to the parser's own result), content arriving while it is decoded,
usage and timings, thinking switches, models, and the request shapes Open WebUI sends."""

from __future__ import annotations

import json
import time

import pytest

from tests.app.conftest import TOOLS, oracle, recorded_failures, xml_call

WEATHER_CALL = xml_call("get_weather", city="Paris")
HERMES_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'

CASES = {
    **{f"recorded_failure_{i}": text for i, text in enumerate(recorded_failures())},
    "control_backticks": "The format is `<tool_call>` with `<function=x>`.\n</think>\n\nNo call.",
    "control_mid_sentence": "It looks like <tool_call>\n<function=get_weather>\n</function>\n"
    "</tool_call> in docs.\n</think>\n\nDone.",
    "control_indented": "Steps:\n  <tool_call>\n  <function=get_weather>\n  </function>\n"
    "  </tool_call>\n</think>\n\nOk.",
    "control_quote": "Quoted:\n> <tool_call>\n> <function=get_weather>\n</think>\n\nOk.",
    "control_fence": "Like this:\n```\n" + WEATHER_CALL + "\n```\nok.\n</think>\n\nAnswer.",
    "control_no_opener": "Next:\n<tool_call>\nI should read the file.\n</think>\n\nAnswer.",
    "stray_think_end": "Plan.\n</think>\n\nThe answer</think> continues here.",
    "call_in_thinking": "I need the weather.\n\n" + WEATHER_CALL,
    "several_calls": "Two lookups.\n</think>\n\nChecking.\n" + WEATHER_CALL + "\n"
    + xml_call("search", query="rain gear") + "\nBoth requested.",
    "plain_answer": "Short thought.\n</think>\n\nJust text, **markdown** and `code`.",
}


def collect(stream) -> dict:
    """Fold a chat.completion.chunk stream the way clients do; check the fragment rules."""
    out = {"reasoning": "", "content": "", "calls": {}, "finish": None, "usage": None,
           "timings": None, "chunks": 0}
    for chunk in stream:
        out["chunks"] += 1
        extra = chunk.model_extra or {}
        out["timings"] = extra.get("timings") or out["timings"]
        if chunk.usage is not None:
            out["usage"] = chunk.usage
        for choice in chunk.choices:
            d = choice.delta
            out["reasoning"] += (d.model_extra or {}).get("reasoning_content") or ""
            out["content"] += d.content or ""
            for tc in d.tool_calls or ():
                call = out["calls"].get(tc.index)
                if call is None:  # the first fragment carries id, type and name
                    assert tc.id and tc.type == "function" and tc.function.name
                    call = out["calls"][tc.index] = {"id": tc.id, "name": tc.function.name,
                                                      "arguments": ""}
                else:
                    assert tc.id is None and tc.function.name is None
                assert isinstance(tc.function.arguments, str)
                call["arguments"] += tc.function.arguments
            if choice.finish_reason:
                out["finish"] = choice.finish_reason
    return out


def whole(resp) -> dict:
    msg = resp.choices[0].message
    calls = {i: {"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
             for i, c in enumerate(msg.tool_calls or ())}
    return {"reasoning": (msg.model_extra or {}).get("reasoning_content") or "",
            "content": msg.content or "", "calls": calls,
            "finish": resp.choices[0].finish_reason}


def comparable(d: dict) -> tuple:
    calls = [(c["name"], json.loads(c["arguments"])) for _, c in sorted(d["calls"].items())]
    return d["reasoning"], d["content"], calls, d["finish"]


def expected(text: str, **kw) -> tuple:
    res = oracle(text, tools=TOOLS, **kw)
    calls = [(c.name, c.arguments) for c in res.tool_calls]
    return res.reasoning, res.content, calls, res.finish_reason


ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_rule_streamed_and_whole_agree_with_the_parser(serve, name):
    text = CASES[name]
    live = serve(text)
    client = live.openai()
    streamed = collect(client.chat.completions.create(model="any-name", messages=ASK,
                                                      tools=TOOLS, stream=True))
    resp = client.chat.completions.create(model="any-name", messages=ASK, tools=TOOLS)
    assert comparable(streamed) == comparable(whole(resp)) == expected(text)
    assert resp.model == "any-name"
    assert (streamed["finish"] == "tool_calls") == bool(streamed["calls"])
    assert "</think>" not in streamed["content"] + streamed["reasoning"] or name.startswith(
        "control_")  # a stray close tag never reaches the client
    if name.startswith("recorded_failure"):
        assert len(streamed["calls"]) == 1 and streamed["finish"] == "tool_calls"
        assert streamed["reasoning"] == text[: text.index("<tool_call>")].rstrip("\n")
    if name.startswith("control_"):
        assert streamed["calls"] == {} and streamed["finish"] == "stop"


def test_stray_think_end_is_dropped_and_counted(serve):
    live = serve(CASES["stray_think_end"])
    resp = live.openai().chat.completions.create(model="m", messages=ASK)
    assert resp.choices[0].message.content == "The answer continues here."
    assert live.last.result.anomalies["stray_think_end"] == 1


def test_hermes_json_calls(serve):
    text = "Let me look.\n</think>\n\n" + HERMES_CALL
    live = serve(text, pack="qwen3-hermes")
    client = live.openai()
    streamed = collect(client.chat.completions.create(model="m", messages=ASK, tools=TOOLS,
                                                      stream=True))
    resp = client.chat.completions.create(model="m", messages=ASK, tools=TOOLS)
    want = expected(text, family="hermes-json")
    assert comparable(streamed) == comparable(whole(resp)) == want
    assert want[2] == [("get_weather", {"city": "Paris"})]
    # Both call shapes in one answer would be one call each, in order, with distinct ids.
    assert len({c["id"] for c in streamed["calls"].values()}) == 1


def test_content_streams_while_it_is_decoded(serve):
    words = " ".join(f"word{i}" for i in range(120))
    live = serve("Brief.\n</think>\n\n" + words + "</think> and more after a stray tag.",
                 speed=4.0)  # ~200 pieces a second: the answer takes about a second
    stream = live.openai().chat.completions.create(model="m", messages=ASK, tools=TOOLS,
                                                   stream=True)
    content_times, final_time, text = [], None, ""
    for chunk in stream:
        now = time.perf_counter()
        for choice in chunk.choices:
            if choice.delta.content:
                content_times.append(now)
                text += choice.delta.content
            if choice.finish_reason:
                final_time = now
    assert text == words + " and more after a stray tag."
    assert len(content_times) > 50
    # The first words arrived long before the end: nothing held the answer back.
    assert final_time - content_times[0] > 0.4
    assert content_times[len(content_times) // 2] < final_time - 0.15


def test_usage_cached_tokens_and_timings(serve):
    live = serve("Thinking.\n</think>\n\nHello there.")
    stream = live.openai().chat.completions.create(
        model="m", messages=ASK, stream=True, stream_options={"include_usage": True})
    got = collect(stream)
    run = live.last
    usage = got["usage"]
    assert usage.prompt_tokens == run.prompt_tokens > 0
    assert usage.completion_tokens == len(run.tokens) == run.timings.output_tokens
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert usage.prompt_tokens_details.cached_tokens == 0
    assert usage.completion_tokens_details.reasoning_tokens > 0
    t = got["timings"]
    assert t["predicted_n"] == usage.completion_tokens and t["prompt_n"] == usage.prompt_tokens
    assert {"prompt_ms", "predicted_ms", "predicted_per_second", "cache_n"} <= set(t)
    # Without include_usage there is no usage chunk.
    plain = collect(live.openai().chat.completions.create(model="m", messages=ASK, stream=True))
    assert plain["usage"] is None and plain["content"] == "Hello there."


@pytest.mark.parametrize("field", ["reasoning", "both"])
def test_reasoning_field_is_configurable(serve, field):
    live = serve("Deep thought.\n</think>\n\n42", reasoning_field=field)
    client = live.openai()
    msg = client.chat.completions.create(model="m", messages=ASK).choices[0].message
    extra = msg.model_extra or {}
    assert extra.get("reasoning") == "Deep thought."
    assert ("reasoning_content" in extra) == (field == "both")
    seen = {}
    for chunk in client.chat.completions.create(model="m", messages=ASK, stream=True):
        for choice in chunk.choices:
            for key, value in (choice.delta.model_extra or {}).items():
                seen[key] = seen.get(key, "") + (value or "")
    assert seen.get("reasoning") == "Deep thought."
    assert ("reasoning_content" in seen) == (field == "both")


@pytest.mark.parametrize("extra", [
    {"chat_template_kwargs": {"enable_thinking": False}},
    {"reasoning_effort": "none"},
])
def test_thinking_off_starts_in_content(serve, extra):
    live = serve("Hello <b>there</b>.")
    resp = live.openai().chat.completions.create(model="m", messages=ASK, extra_body=extra)
    msg = resp.choices[0].message
    assert msg.content == "Hello <b>there</b>." and not (msg.model_extra or {}).get(
        "reasoning_content")
    assert live.last.prompt.endswith("<think>\n\n</think>\n\n")
    assert live.last.start_state == "content"


def test_thinking_default_and_on_start_in_reasoning(serve):
    live = serve("Hmm.")
    client = live.openai()
    client.chat.completions.create(model="m", messages=ASK)
    client.chat.completions.create(model="m", messages=ASK,
                                   extra_body={"chat_template_kwargs": {"enable_thinking": True}})
    assert [r.start_state for r in live.runs] == ["reasoning", "reasoning"]
    assert live.runs[0].result.reasoning == "Hmm."


def test_length_and_stop(serve):
    live = serve("Thought.\n</think>\n\none two three four five six seven")
    client = live.openai()
    resp = client.chat.completions.create(model="m", messages=ASK, max_tokens=5)
    assert resp.choices[0].finish_reason == "length" and resp.usage.completion_tokens == 5
    resp = client.chat.completions.create(model="m", messages=ASK, stop=[" four"])
    assert resp.choices[0].finish_reason == "stop"
    assert resp.choices[0].message.content == "one two three"


def test_models(serve):
    live = serve("x", model_name="prism-test")
    client = live.openai()
    models = client.models.list().data
    assert [m.id for m in models] == ["prism-test"]
    assert models[0].model_extra["context_length"] == live.service.engine.n_ctx
    assert client.models.retrieve("prism-test").id == "prism-test"
    import openai

    with pytest.raises(openai.NotFoundError) as err:
        client.models.retrieve("gpt-9")
    assert err.value.code == "model_not_found"


# --- what Open WebUI sends -----------------------------------------------------------------


def test_open_webui_native_tool_calling_round_trip(serve):
    """Native tool calling: tools, streamed with include_usage; then the follow-up turn with
    the assistant's reasoning and tool call (arguments as a JSON string) and the tool result."""
    live = serve("I should check.\n\n" + WEATHER_CALL, "Got it.\n</think>\n\nSunny, 24 °C.")
    client = live.openai()
    first = collect(client.chat.completions.create(
        model="qwen3:latest", messages=[{"role": "system", "content": "Be brief."}, *ASK],
        tools=TOOLS, stream=True, stream_options={"include_usage": True}))
    assert first["finish"] == "tool_calls" and first["usage"] is not None
    call = first["calls"][0]
    history = [
        {"role": "system", "content": "Be brief."}, *ASK,
        {"role": "assistant", "content": "", "reasoning_content": first["reasoning"],
         "tool_calls": [{"id": call["id"], "type": "function",
                         "function": {"name": call["name"], "arguments": call["arguments"]}}]},
        {"role": "tool", "tool_call_id": call["id"], "content": "sunny, 24 C"},
    ]
    second = collect(client.chat.completions.create(
        model="qwen3:latest", messages=history, tools=TOOLS, stream=True,
        stream_options={"include_usage": True}, extra_body={"keep_alive": "5m", "num_ctx": 8}))
    assert second["content"] == "Sunny, 24 °C." and second["finish"] == "stop"
    prompt = live.last.prompt
    assert "<function=get_weather>\n<parameter=city>\nParis\n</parameter>" in prompt
    assert "<tool_response>\nsunny, 24 C\n</tool_response>" in prompt


def test_open_webui_empty_tools_parts_and_replayed_reasoning(serve):
    live = serve("Fine.\n</think>\n\nYes.")
    client = live.openai()
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "Hi"}]},  # (images: a 400)
        {"role": "assistant", "content": "Hello!", "reasoning": "The user greets me."},
        {"role": "user", "content": "Still there?"},
    ]
    got = collect(client.chat.completions.create(model="whatever", messages=messages, tools=[],
                                                 stream=True,
                                                 stream_options={"include_usage": True}))
    assert got["content"] == "Yes." and got["finish"] == "stop"
    assert live.last.request.tools == ()
    assert live.last.request.messages[1].reasoning_content == "The user greets me."
    assert live.last.request.messages[0].content == "Hi"


def test_a_call_that_fails_after_it_began_streaming_is_text_with_finish_stop(serve):
    """The parser names a call before its body is read; when the body then turns out
    malformed, the call comes back as text. A stream has already sent the call's first
    fragment, so clients must go by finish_reason, which stays "stop" (no call completed)."""
    text = "Plan.\n</think>\n\n<tool_call>\n<function=get_weather>\nsome prose\n</tool_call> ok"
    live = serve(text)
    client = live.openai()
    resp = client.chat.completions.create(model="m", messages=ASK, tools=TOOLS)
    streamed = collect(client.chat.completions.create(model="m", messages=ASK, tools=TOOLS,
                                                      stream=True))
    raw_call = text[text.index("<tool_call>"):]
    assert resp.choices[0].message.content == streamed["content"] == raw_call
    assert resp.choices[0].message.tool_calls is None
    assert resp.choices[0].finish_reason == streamed["finish"] == "stop"
    assert live.last.result.anomalies["malformed_call"] == 1


# --- continuing a reply (issue 9, item 3) -------------------------------------------------

PARTIAL = "Once upon a time, a queen was chosen by the king to be"
STORY = [{"role": "user", "content": "Tell me a story."},
         {"role": "assistant", "content": PARTIAL}]


def test_open_webui_continue_response_continues_the_turn(serve):
    # Open WebUI's "Continue Response" sends the partial reply as a trailing assistant
    # message, without any field saying so: the reply continues it, the turn stays open.
    live = serve(" the ruler of the north.", pack="smollm2")
    reply = live.openai().chat.completions.create(model="m", messages=STORY)
    assert reply.choices[0].message.content == " the ruler of the north."
    assert live.last.prompt.endswith("<|im_start|>assistant\n" + PARTIAL)
    assert live.last.start_state == "content"


@pytest.mark.parametrize(("extra", "continued"), [
    ({"continue_final_message": True, "add_generation_prompt": False}, True),  # vLLM
    ({"add_generation_prompt": False}, True),  # llama.cpp
    ({"continue_final_message": False}, False),
])
def test_continue_fields(serve, extra, continued):
    live = serve(" the end.", pack="smollm2")
    live.openai().chat.completions.create(model="m", messages=STORY, extra_body=extra)
    prompt = live.last.prompt
    assert prompt.endswith(PARTIAL) is continued
    if not continued:  # the turn was closed and a new one opened
        assert prompt.endswith(PARTIAL + "<|im_end|>\n<|im_start|>assistant\n")


def test_a_prefill_inside_thinking_continues_in_reasoning(serve):
    live = serve(" the weather first.\n</think>\n\nSunny.")
    messages = [*ASK, {"role": "assistant", "content": "<think>\nI should check"}]
    reply = live.openai().chat.completions.create(model="m", messages=messages)
    msg = reply.choices[0].message
    assert live.last.start_state == "reasoning"
    assert msg.model_extra["reasoning_content"] == " the weather first."
    assert msg.content == "Sunny."


def test_a_trailing_assistant_call_is_not_continued(serve):
    live = serve("Done.\n</think>\n\nok")
    call = {"id": "c1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    messages = [*ASK, {"role": "assistant", "content": "", "tool_calls": [call]}]
    live.openai().chat.completions.create(model="m", messages=messages, tools=TOOLS)
    assert not live.last.request.continue_final


# --- tools the template cannot show (issue 9, item 4) ---------------------------------------


def test_the_default_pack_shows_the_model_its_tools(serve):
    live = serve("ok", pack="smollm2")
    live.openai().chat.completions.create(model="m", messages=ASK, tools=TOOLS)
    assert '"name": "get_weather"' in live.last.prompt and live.last.notes == ()


def test_a_template_that_ignores_tools_is_said_once_per_request(serve, caplog):
    from engine.chat.template import ChatTemplate
    from engine.gguf import read_gguf_metadata

    live = serve("ok", "ok", "ok", pack="smollm2")
    # The default model's own GGUF template: plain ChatML, which never renders `tools`.
    own = read_gguf_metadata(live.service.pack.gguf)["tokenizer.chat_template"]
    live.service.template = ChatTemplate(own, bos_token="<|im_start|>", eos_token="<|im_end|>")
    client = live.openai()
    with caplog.at_level("WARNING", logger="prism"):
        client.chat.completions.create(model="m", messages=ASK, tools=TOOLS)
        client.chat.completions.create(model="m", messages=ASK, tools=TOOLS)
        client.chat.completions.create(model="m", messages=ASK)  # no tools: nothing to say
    said = [r.getMessage() for r in caplog.records if "does not show tools" in r.getMessage()]
    assert [live.runs[0].id in said[0], live.runs[1].id in said[1], len(said)] == [True, True, 2]
    assert "cannot call any of the 2" in said[0]
    assert [r.notes for r in live.runs] == [("tools_ignored",), ("tools_ignored",), ()]


# --- logprobs, on the real model --------------------------------------------------------------


@pytest.fixture(scope="module")
def model_server(default_model):
    """The default pack (SmolLM2 on LlamaEngine) behind a live server on 127.0.0.1."""
    from app.api.server import ServerThread
    from app.api.state import AppState
    from engine.backends.llama.engine import LlamaEngine
    from engine.chat.packs import resolve_pack
    from engine.service import Service

    pack = resolve_pack("smollm2")
    engine = LlamaEngine(pack.gguf, n_ctx=1024)
    server = ServerThread(AppState(service=Service(engine, pack))).start()
    yield server
    engine.close()
    server.stop()


@pytest.fixture
def model_client(model_server):
    import openai

    client = openai.OpenAI(base_url=model_server.url + "/v1", api_key="x", max_retries=0,
                           timeout=60)
    yield client
    client.close()


HELLO = [{"role": "user", "content": "Say hello."}]


def _check_entries(entries, text: str, k: int) -> None:
    assert "".join(e.token for e in entries) == text
    for e in entries:
        assert bytes(e.bytes) == e.token.encode("utf-8")
        assert len(e.top_logprobs) == k
        # Greedy: the token is the most likely one, its logprob the first alternative's.
        assert e.logprob is not None and e.logprob <= 0.0
        if k:
            assert e.top_logprobs[0].token == e.token and e.top_logprobs[0].logprob == e.logprob
            assert [a.logprob for a in e.top_logprobs] == sorted(
                (a.logprob for a in e.top_logprobs), reverse=True)


@pytest.mark.model
@pytest.mark.parametrize("k", [0, 3])
def test_chat_logprobs_whole_and_streamed(model_client, k):
    kw = dict(model="m", messages=HELLO, max_tokens=12, temperature=0, logprobs=True,
              top_logprobs=k)
    whole_reply = model_client.chat.completions.create(**kw)
    choice = whole_reply.choices[0]
    assert choice.message.content
    _check_entries(choice.logprobs.content, choice.message.content, k)
    text, entries = "", []
    for chunk in model_client.chat.completions.create(stream=True, **kw):
        for c in chunk.choices:
            text += c.delta.content or ""
            if c.logprobs is not None:
                entries += c.logprobs.content or []
    assert text == choice.message.content  # the same greedy reply
    _check_entries(entries, text, k)
    assert [e.logprob for e in entries] == pytest.approx(
        [e.logprob for e in choice.logprobs.content], abs=1e-3)


@pytest.mark.model
def test_chat_without_logprobs_has_none(model_client):
    reply = model_client.chat.completions.create(model="m", messages=HELLO, max_tokens=4)
    assert reply.choices[0].logprobs is None


@pytest.mark.model
@pytest.mark.parametrize("extra", [{"logprobs": True, "top_logprobs": 21},
                                   {"logprobs": True, "top_logprobs": -1},
                                   {"top_logprobs": 2}])
def test_chat_top_logprobs_out_of_bounds_is_a_400(model_client, extra):
    import openai

    with pytest.raises(openai.BadRequestError) as err:
        model_client.chat.completions.create(model="m", messages=HELLO, max_tokens=4,
                                             extra_body=extra)
    assert err.value.body["param"] == "top_logprobs"


# --- a forced reply cut inside its second call, on the real model ----------------------------

PARIS_LONDON = [{"role": "user", "content": "What is the weather in Paris and in London?"}]


@pytest.mark.model
def test_a_forced_reply_cut_inside_its_second_call_returns_the_first_call_only(model_client):
    kw = dict(model="m", messages=PARIS_LONDON, tools=TOOLS, tool_choice="required",
              temperature=0)
    full = model_client.chat.completions.create(max_tokens=300, **kw)
    calls = full.choices[0].message.tool_calls
    assert full.choices[0].finish_reason == "tool_calls" and len(calls) >= 2
    first = (calls[0].function.name, json.loads(calls[0].function.arguments))
    # The calls are alike (one function, another city), so as many tokens each: halfway
    # through the second one the cut lands inside it.
    cut = full.usage.completion_tokens * 3 // (2 * len(calls))
    whole_reply = model_client.chat.completions.create(max_tokens=cut, **kw)
    choice = whole_reply.choices[0]
    assert choice.message.content is None  # not the second call's markup
    assert [(c.function.name, json.loads(c.function.arguments))
            for c in choice.message.tool_calls] == [first]
    assert choice.finish_reason == "length"
    got = collect(model_client.chat.completions.create(max_tokens=cut, stream=True, **kw))
    assert got["content"] == "" and got["finish"] == "length"
    # The first call whole; the second, already begun on the wire, never completes.
    assert (got["calls"][0]["name"], json.loads(got["calls"][0]["arguments"])) == first
    if 1 in got["calls"]:
        with pytest.raises(json.JSONDecodeError):
            json.loads(got["calls"][1]["arguments"])
