"""POST /v1/completions (app/api/completions.py) with the official `openai` SDK: the raw text,
streamed and not; max_tokens, stop, logprobs; what is refused (echo, n, suffix, token prompts);
context overflow; and, on the real default model, logprobs from the engine's alternatives."""

from __future__ import annotations

import openai
import pytest

from app.api.server import ServerThread
from app.api.state import AppState
from engine.chat.packs import resolve_pack
from engine.metrics import Metrics
from engine.record.replay import split_text
from engine.service import Service

RAW = "<think>\nraw reasoning\n</think>\n\n<tool_call>\n<function=f>\n</function>\n</tool_call>"


def test_the_raw_text_no_template_no_parser(serve):
    live = serve(RAW)
    client = live.openai()
    resp = client.completions.create(model="m", prompt="<|im_start|>user\nhi", max_tokens=500)
    choice = resp.choices[0]
    assert choice.text == RAW  # tags and all: nothing parsed away
    assert choice.finish_reason == "stop" and choice.logprobs is None
    assert resp.object == "text_completion" and resp.model == "m"
    assert resp.usage.completion_tokens == len(split_text(RAW))
    assert resp.usage.prompt_tokens == len(split_text("<|im_start|>user\nhi"))
    assert live.runs == []  # no chat run: the window and recordings show chat runs only


def test_streamed_text_concatenates_to_the_whole(serve):
    live = serve(RAW)
    client = live.openai()
    chunks = list(client.completions.create(model="m", prompt="x", max_tokens=500, stream=True,
                                            stream_options={"include_usage": True}))
    texts = [c.choices[0].text for c in chunks if c.choices]
    assert "".join(texts) == RAW
    assert texts[:-1] == split_text(RAW)  # one chunk a token, then the final one
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == len(texts) - 1


def test_max_tokens_default_stop_and_null(serve):
    live = serve("one two three four five six seven eight nine ten " * 5)
    client = live.openai()
    short = client.completions.create(model="m", prompt="x")  # OpenAI's default: 16
    assert short.choices[0].finish_reason == "length"
    assert short.usage.completion_tokens == 16
    stopped = client.completions.create(model="m", prompt="x", stop=[" four"])
    assert stopped.choices[0].text == "one two three"
    assert stopped.choices[0].finish_reason == "stop"
    http = live.http()
    whole = http.post("/v1/completions", json={"prompt": "x", "max_tokens": None}).json()
    assert whole["choices"][0]["finish_reason"] == "stop"
    assert whole["usage"]["completion_tokens"] == len(split_text(
        "one two three four five six seven eight nine ten " * 5))


@pytest.mark.parametrize(("extra", "param"), [
    ({"echo": True}, "echo"), ({"n": 2}, "n"), ({"best_of": 3}, "best_of"),
    ({"suffix": "end"}, "suffix"), ({"logprobs": 21}, "logprobs"), ({"max_tokens": 0},
                                                                    "max_tokens")])
def test_refused_with_a_400_naming_the_field(serve, extra, param):
    client = serve("x").openai()
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model="m", prompt="hi", **extra)
    assert err.value.body["param"] == param
    if param == "echo":
        assert "'echo' is not supported" in err.value.message


def test_token_prompts_and_several_prompts_are_refused(serve):
    http = serve("x").http()
    for prompt in ([1, 2, 3], ["a", "b"]):
        resp = http.post("/v1/completions", json={"prompt": prompt})
        assert resp.status_code == 400 and resp.json()["error"]["param"] == "prompt"
    assert http.post("/v1/completions", json={"prompt": ["one"], "max_tokens": 2}
                     ).status_code == 200


def test_context_overflow_is_a_400(serve):
    client = serve("x", n_ctx=32).openai()
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model="m", prompt="word " * 40, max_tokens=4)
    assert err.value.code == "context_length_exceeded"


def test_metrics_count_completions(serve):
    live = serve(RAW)
    live.openai().completions.create(model="m", prompt="x", max_tokens=500)
    totals = live.service.metrics.snapshot()["totals"]
    assert totals["finished"] == 1 and totals["output_tokens"] == len(split_text(RAW))


@pytest.mark.model
def test_logprobs_on_the_real_model(default_model):
    from engine.backends.llama.engine import LlamaEngine

    engine = LlamaEngine(default_model, n_ctx=512, n_threads=1)
    service = Service(engine, resolve_pack("smollm2"), metrics=Metrics(engine))
    try:
        with ServerThread(AppState(service=service)) as server, \
                openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0) as client:
            resp = client.completions.create(
                model="m", prompt="<|im_start|>user\nSay hi.<|im_end|>\n<|im_start|>assistant\n",
                max_tokens=5, temperature=0, logprobs=3)
            streamed = list(client.completions.create(
                model="m", prompt="<|im_start|>user\nSay hi.<|im_end|>\n<|im_start|>assistant\n",
                max_tokens=5, temperature=0, logprobs=3, stream=True))
    finally:
        engine.close()
    lp = resp.choices[0].logprobs
    assert "".join(lp.tokens) == resp.choices[0].text and len(lp.tokens) == 5
    for tok, own, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs, strict=True):
        assert len(top) == 3 and tok in top  # greedy: the chosen token is the likeliest
        assert own == max(top.values()) and own <= 0
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(5)]
    text = "".join(c.choices[0].text for c in streamed if c.choices)
    assert text == resp.choices[0].text
