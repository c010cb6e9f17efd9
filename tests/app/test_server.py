"""app/api/server.py and errors.py: every error in each dialect's shape (400 naming the field,
context overflow, 401, 404, 413, 429 with Retry-After, an error after the stream began), /health
and /props, and a client that disconnects mid-stream (its job cancelled, the next one fine)."""

from __future__ import annotations

import json
import socket
import threading
import time

import anthropic
import httpx
import openai
import pytest

from engine.backends.base import Finish, Timings, Token
from engine.chat.request import ChatRequest, Message
from engine.record.recording import Recorder
from tests.app.conftest import captured, sdk_kwargs
from tests.support import wait_until

ASK = [{"role": "user", "content": "hi"}]
CHAT = {"model": "m", "messages": ASK}
LONG = "Thinking.\n</think>\n\n" + " ".join(f"w{i}" for i in range(400))


# --- 400 ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("body", "param", "words"), [
    ({"messages": "hi"}, "messages", "messages"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content", "content"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role", "role"),
    ({}, "messages", "Missing required field 'messages'"),
    ({"messages": ASK, "max_tokens": 0}, "max_tokens", "at least 1"),
    ({"messages": ASK, "n": 2}, "n", "n=1"),
    ({"messages": [*ASK, {"role": "assistant", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{oops"}}]}]},
     "messages[1].tool_calls[0].function.arguments", "not valid JSON"),
])
def test_openai_400_names_the_field(serve, body, param, words):
    live = serve("x")
    r = live.http().post("/v1/chat/completions", json=body)
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["param"] == param
    assert words in err["message"] and set(err) == {"message", "type", "param", "code"}


def test_bad_json_in_both_dialects(serve):
    live = serve("x")
    http = live.http()
    r = http.post("/v1/chat/completions", content=b"{not json",
                  headers={"content-type": "application/json"})
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]
    r = http.post("/v1/messages", content=b"[1, 2]",
                  headers={"content-type": "application/json"})
    assert r.status_code == 400
    assert r.json() == {"type": "error", "error": {
        "type": "invalid_request_error", "message": "The request body must be a JSON object"}}
    r = http.post("/v1/responses", content=b"")
    assert r.status_code == 400 and "empty" in r.json()["error"]["message"]


def test_anthropic_400_through_the_sdk(serve):
    live = serve("x")
    with pytest.raises(anthropic.BadRequestError) as err:
        live.anthropic().messages.create(model="m", max_tokens=10, messages=[
            {"role": "user", "content": [{"type": "tool_result"}]}])
    assert err.value.body["error"]["type"] == "invalid_request_error"
    assert "messages[0].content[0].tool_use_id" in err.value.body["error"]["message"]


def test_lenient_in_unknown_fields_and_any_model(serve):
    live = serve("Fine.\n</think>\n\nok")
    body = {**CHAT, "model": "gpt-4o-mini", "frobnicate": True, "tools": [], "user": "u1",
            "logit_bias": {}, "messages": [{"role": "developer", "content": "Be nice."},
                                           {"role": "user", "content": "hi", "extra": 1}]}
    r = live.http().post("/v1/chat/completions", json=body)
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "ok"
    assert live.last.request.messages[0].role == "system"


# --- context and output limits (issue 9, items 5 and 7) --------------------------------------

LONG = "Plan.\n</think>\n\n" + "word " * 400


def test_claude_code_max_tokens_is_clamped_to_what_remains(serve):
    # Claude Code's real first request asks for max_tokens 64000 on a long prompt. When the
    # prompt fits, the reply gets what remains of the context and ends at `max_tokens`,
    # instead of the whole request being refused.
    cap = captured("claude_code")
    body = {**cap["body"], "stream": False}
    probe = serve("x")
    n_prompt = probe.http().post("/v1/messages/count_tokens", json=body).json()["input_tokens"]
    live = serve(LONG, n_ctx=n_prompt + 12)
    r = live.http().post("/v1/messages?beta=true", json=body,
                         headers={"anthropic-beta": cap["headers"]["anthropic-beta"]})
    assert r.status_code == 200, r.text
    assert r.json()["stop_reason"] == "max_tokens"
    assert r.json()["usage"]["output_tokens"] == 12 == live.last.job.max_tokens
    # One token less and the prompt itself does not fit: refused, naming the prompt's size,
    # not the 64000 that would have been clamped.
    r = serve(LONG, n_ctx=n_prompt).http().post("/v1/messages", json=body)
    assert r.status_code == 400
    assert r.json()["error"]["message"] == (
        f"This model's maximum context length is {n_prompt} tokens. However, your messages "
        f"resulted in {n_prompt} tokens. Please reduce the length of the messages.")


def test_codex_request_on_a_context_just_big_enough(serve):
    cap = captured("codex")
    probe = serve("x")
    create = probe.openai().responses.create
    create(**sdk_kwargs(create, cap["body"], stream=False))
    n_prompt = probe.last.prompt_tokens
    live = serve(LONG, n_ctx=n_prompt + 7)
    create = live.openai().responses.create
    resp = create(**sdk_kwargs(create, cap["body"], stream=False))
    assert resp.status == "incomplete" and resp.incomplete_details.reason == "max_output_tokens"
    assert resp.usage.output_tokens == 7
    with pytest.raises(openai.BadRequestError) as err:  # a prompt that does not fit: refused
        create = serve(LONG, n_ctx=n_prompt).openai().responses.create
        create(**sdk_kwargs(create, cap["body"], stream=False))
    assert err.value.code == "context_length_exceeded"


def test_max_tokens_flag_is_the_default_and_the_cap(serve):
    live = serve(LONG, LONG, LONG, max_tokens=5)
    client = live.openai()
    unset = client.chat.completions.create(model="m", messages=ASK)
    more = client.chat.completions.create(model="m", messages=ASK, max_tokens=100)
    less = client.chat.completions.create(model="m", messages=ASK, max_tokens=3)
    assert [r.usage.completion_tokens for r in (unset, more, less)] == [5, 5, 3]
    assert {unset.choices[0].finish_reason, more.choices[0].finish_reason} == {"length"}
    props = live.http().get("/props").json()
    assert props["default_generation_settings"]["params"]["n_predict"] == 5
    assert serve("x").http().get("/props").json()[
        "default_generation_settings"]["params"]["n_predict"] == -1


def test_context_overflow_in_both_dialects(serve):
    live = serve("x", n_ctx=16)
    with pytest.raises(openai.BadRequestError) as err:
        live.openai().chat.completions.create(model="m", messages=ASK, max_tokens=10)
    assert err.value.code == "context_length_exceeded"
    # The prompt alone does not fit; max_tokens would have been clamped, so it is not named.
    n = live.service.count_tokens(ChatRequest(messages=(Message("user", "hi"),)))
    assert err.value.body["message"] == (
        f"This model's maximum context length is 16 tokens. However, your messages resulted "
        f"in {n} tokens. Please reduce the length of the messages.")
    with pytest.raises(anthropic.BadRequestError) as err2:
        live.anthropic().messages.create(model="m", max_tokens=10, messages=ASK)
    assert "maximum context length is 16 tokens" in err2.value.body["error"]["message"]
    assert live.runs == []  # nothing was queued


# --- 401, 404, 413 --------------------------------------------------------------------------


def test_api_key_bearer_or_x_api_key(serve):
    live = serve("Ok.\n</think>\n\nfine", api_key="sekret")
    with pytest.raises(openai.AuthenticationError) as err:
        live.openai(api_key="wrong").chat.completions.create(model="m", messages=ASK)
    assert err.value.code == "invalid_api_key"
    assert live.openai(api_key="sekret").chat.completions.create(
        model="m", messages=ASK).choices[0].message.content == "fine"
    with pytest.raises(anthropic.AuthenticationError) as err2:
        live.anthropic(api_key="nope").messages.create(model="m", max_tokens=5, messages=ASK)
    assert err2.value.body == {"type": "error", "error": {
        "type": "authentication_error", "message": err2.value.body["error"]["message"]}}
    msg = live.anthropic(api_key="sekret").messages.create(model="m", max_tokens=5,
                                                           messages=ASK)
    assert msg.content[-1].text == "fine"
    http = live.http()
    assert http.get("/v1/models").status_code == 401
    assert http.get("/metrics").status_code == 401
    assert http.get("/health").status_code == 200  # monitors need no key


def test_unknown_route_is_404_in_the_openai_shape(serve):
    live = serve("x")
    r = live.http().get("/v1/nothing-here")
    assert r.status_code == 404
    assert r.json() == {"error": {"message": "Invalid URL (GET /v1/nothing-here)",
                                  "type": "not_found_error", "param": None, "code": None}}
    r = live.http().get("/v1/chat/completions")
    assert r.status_code == 405 and "error" in r.json()


def test_huge_body_is_413(serve):
    live = serve("x", max_body_bytes=4096)
    big = {**CHAT, "messages": [{"role": "user", "content": "x" * 5000}]}
    r = live.http().post("/v1/chat/completions", json=big)
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
    r = live.http().post("/v1/messages", json=big)
    assert r.status_code == 413 and r.json()["error"]["type"] == "request_too_large"

    def chunks():  # no Content-Length: the limit is applied while reading
        yield b'{"messages": [{"role": "user", "content": "'
        for _ in range(10):
            yield b"y" * 1000
        yield b'"}]}'

    r = live.http().post("/v1/chat/completions", content=chunks(),
                         headers={"content-type": "application/json"})
    assert r.status_code == 413
    assert live.runs == []


# --- 429 ------------------------------------------------------------------------------------


def stream_status(client: httpx.Client, got: list[int]) -> threading.Thread:
    """Open a chat stream from a thread (a queued request's status line waits for its first
    token: app/api/sse.py), put its status in `got` and hang up."""

    def run() -> None:
        with client.stream("POST", "/v1/chat/completions", json={**CHAT, "stream": True}) as r:
            got.append(r.status_code)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def raw_chat_stream(live) -> socket.socket:
    """A streamed chat request written on a bare socket, so the test can hang up while the
    request waits without a status line."""
    body = json.dumps({**CHAT, "stream": True}).encode()
    conn = socket.create_connection((live.thread.host, live.thread.port))
    conn.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                 b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                 % (len(body), body))
    return conn


def test_queue_limit_is_429_with_retry_after(serve):
    live = serve(LONG, speed=0.2, max_queue=1)
    a, b = live.http(), live.http()
    got: list[int] = []
    with a.stream("POST", "/v1/chat/completions", json={**CHAT, "stream": True}) as ra:
        wait_until(lambda: live.runs and live.runs[0].tokens)  # A is generating
        assert ra.status_code == 200
        waiter = stream_status(b, got)
        wait_until(lambda: live.service.engine.queue_depth() == 1)  # B waits behind A
        with pytest.raises(openai.RateLimitError) as err:
            live.openai().chat.completions.create(model="m", messages=ASK)
        assert int(err.value.response.headers["retry-after"]) >= 1
        assert err.value.code == "rate_limit_exceeded"
        r = live.http().post("/v1/messages", json={**CHAT, "max_tokens": 5})
        assert r.status_code == 429 and r.json()["error"]["type"] == "rate_limit_error"
    waiter.join(20)  # A's client left: B ran, and got its 200 with its first token
    assert got == [200]
    wait_until(lambda: all(run.done for run in live.runs))
    assert len(live.runs) == 2


def test_a_waiting_request_whose_client_left_frees_its_place_at_once(serve):
    # It used to count toward the 429 limit until the worker reached it (issue 9, item 8).
    live = serve(LONG, LONG, speed=0.2, max_queue=1)
    a = live.http()
    got: list[int] = []
    with a.stream("POST", "/v1/chat/completions", json={**CHAT, "stream": True}):
        wait_until(lambda: live.runs and live.runs[0].tokens)  # A is generating
        b = raw_chat_stream(live)
        try:
            wait_until(lambda: live.service.engine.queue_depth() == 1)  # B waits behind A
        finally:
            b.close()
        # B's client hung up while B waited: its place is free while A still generates.
        wait_until(lambda: live.service.engine.queue_depth() == 0)
        assert not live.runs[0].done
        waiter = stream_status(live.http(), got)
        wait_until(lambda: live.service.engine.queue_depth() == 1)  # queued behind A, not 429
    waiter.join(20)
    assert got == [200]


# --- errors after the stream began, disconnects -----------------------------------------------


def recording_of(path, finish: Finish | None):
    """A recorded request that streamed a little, then ended with `finish` (None: the file ends
    there, as when a crash cut the request off)."""
    rec = Recorder(path, model="broken", pack="qwen3-xml")
    rec.request("r1", ChatRequest(messages=(Message("user", "hi"),)), "prompt",
                start_state="reasoning")
    for i, text in enumerate(["Half", " a", " thought", "\n</think>\n\n", "Partial", " answer"]):
        rec.token("r1", i, Token(i, text, time.perf_counter()))
    if finish is not None:
        rec.finish("r1", finish)
    rec.close()
    return path


@pytest.fixture
def broken_recording(tmp_path):
    """A recording whose request failed after streaming: replayed, it streams then fails."""
    return recording_of(tmp_path / "broken.jsonl", Finish("error", Timings(), "model crashed"))


def test_a_request_a_crash_cut_off_replays_what_was_recorded(serve, tmp_path):
    live = serve(recording_of(tmp_path / "cut.jsonl", None))
    reply = live.openai().chat.completions.create(model="m", messages=ASK)
    assert reply.choices[0].message.content == "Partial answer"
    assert reply.choices[0].finish_reason == "length"  # not a 500 (issue 10, item 9)


def test_a_request_the_recording_does_not_hold_is_a_400_saying_so(serve, broken_recording):
    live = serve(broken_recording)
    other = [{"role": "user", "content": "Something never recorded"}]
    with pytest.raises(openai.BadRequestError) as err:
        live.openai().chat.completions.create(model="m", messages=other)
    assert "no recorded request" in err.value.message  # not another request's output
    r = live.http().post("/v1/messages", json={"model": "m", "max_tokens": 5, "messages": other})
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"


def test_error_after_streaming_began_is_a_final_error_event(serve, broken_recording):
    live = serve(broken_recording)
    got = ""
    with pytest.raises(openai.APIError) as err:
        for chunk in live.openai().chat.completions.create(model="m", messages=ASK,
                                                           stream=True):
            got += chunk.choices[0].delta.content or ""
    assert got == "Partial answer"
    assert "generation failed" in err.value.message
    with pytest.raises(anthropic.APIStatusError) as err2, live.anthropic().messages.stream(
            model="m", max_tokens=50, messages=ASK) as stream:
        for _ in stream:
            pass
    assert "generation failed" in str(err2.value)
    r = live.http().post("/v1/chat/completions", json=CHAT)  # not streamed: a plain 500
    assert r.status_code == 500 and r.json()["error"]["type"] == "server_error"
    events = list(live.openai().responses.create(model="m", input="hi", stream=True))
    assert events[-1].type == "response.failed"


def test_disconnect_mid_stream_cancels_the_job_then_a_normal_request(serve):
    live = serve(LONG, "Ok.\n</think>\n\nback to normal", speed=0.5)
    http = live.http()
    with http.stream("POST", "/v1/chat/completions", json={**CHAT, "stream": True}) as r:
        for line in r.iter_lines():
            if '"content":"' in line and '"content":""' not in line:
                break  # the answer has started: hang up
    run = live.runs[0]
    wait_until(lambda: run.done, timeout=2.0)
    assert run.finish.reason == "cancelled"
    assert len(run.tokens) < 30  # stopped within a token or two of the hang-up, not at 400
    resp = live.openai().chat.completions.create(model="m", messages=ASK)
    assert resp.choices[0].message.content == "back to normal"
    assert resp.choices[0].finish_reason == "stop"


def test_disconnect_while_waiting_for_a_whole_reply_cancels_it(serve):
    live = serve(LONG, "fine", speed=0.5)
    with pytest.raises(httpx.ReadTimeout):
        live.http(timeout=0.4).post("/v1/chat/completions", json=CHAT)
    run = live.runs[0]
    wait_until(lambda: run.done, timeout=3.0)
    assert run.finish.reason == "cancelled"


def test_anthropic_disconnect_mid_stream(serve):
    live = serve(LONG, speed=0.5)
    stream = live.anthropic().messages.create(model="m", max_tokens=1000, messages=ASK,
                                              stream=True)
    for event in stream:
        if event.type == "content_block_delta" and event.delta.type == "text_delta":
            break
    stream.close()
    wait_until(lambda: live.runs[0].done, timeout=2.0)
    assert live.runs[0].finish.reason == "cancelled"


# --- /health and /props ---------------------------------------------------------------------


def test_health_is_503_while_loading(serve):
    live = serve("x")
    http = live.http()
    live.state.loading = True
    r = http.get("/health")
    assert r.status_code == 503 and r.headers["retry-after"] == "1"
    assert r.json()["error"]["type"] == "unavailable_error"
    live.state.loading = False
    assert http.get("/health").json() == {"status": "ok"}
    engine = live.service.engine
    engine.ready.clear()  # what LlamaEngine looks like while its thread loads the weights
    try:
        assert http.get("/health").status_code == 503
    finally:
        engine.ready.set()


def test_props_are_llama_cpp_compatible(serve):
    live = serve("x")
    props = live.http().get("/props").json()
    assert props["default_generation_settings"]["n_ctx"] == live.service.engine.n_ctx
    assert props["total_slots"] == 1
    assert props["chat_template"] == live.service.pack.template
    assert "model_path" in props


def test_concurrent_requests_are_served_in_order(serve):
    live = serve("a\n</think>\n\none", "b\n</think>\n\ntwo", "c\n</think>\n\nthree", speed=2.0)
    results: dict[int, str] = {}

    def ask(i):
        client = live.openai()
        results[i] = client.chat.completions.create(model="m", messages=ASK).choices[0] \
            .message.content

    threads = []
    for i in range(3):
        threads.append(threading.Thread(target=ask, args=(i,)))
        threads[-1].start()
        wait_until(lambda n=i + 1: len(live.runs) == n)  # submitted in this order
    for t in threads:
        t.join(10)
    assert results == {0: "one", 1: "two", 2: "three"}
