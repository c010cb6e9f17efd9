"""Guarded calls through the server (issue 22): the `guard_calls` request field on Chat
Completions (app/api/openai.py), Messages (app/api/anthropic.py) and Responses
(app/api/responses.py), sent with the official SDKs' `extra_body`, against a live server on
the real default model; what the guard changed counted in `/metrics` (app/api/metrics.py:
`prism_guided_tokens_total`, and per request in the JSON view) and in `prism stats` from the
recording (engine/record/recording.py keeps each token's `guided` mark).

The conversation is tests/engine/backends/llama/test_guard.py's: two earlier get_weather turns,
then "Weather in Rome for 4 days?" at temperature 0.8, seed 1, where this model writes
`"units": "miles"` unguarded (measured) and a unit the schema allows guarded.
"""

from __future__ import annotations

import json
from pathlib import Path

import anthropic
import jsonschema
import openai
import pytest

from app.cli import main as cli_main
from engine.chat.packs import resolve_pack
from engine.metrics import Metrics
from engine.record.reader import read_session
from engine.record.recording import Recorder
from engine.service import Service
from tests.app.conftest import Live, start_live
from tests.engine.backends.llama.test_guard import WEATHER, WEATHER_TOOLS

pytestmark = pytest.mark.model

QUESTION = "Weather in Rome for 4 days?"
TOOLS = list(WEATHER_TOOLS)
ASK = dict(model="smollm2", tools=TOOLS, temperature=0.8, seed=1, max_tokens=60)


def openai_history() -> list[dict]:
    out = []
    for i, (city, days, units) in enumerate((("Paris", 2, "celsius"),
                                             ("Boston", 3, "fahrenheit")), start=1):
        args = json.dumps({"city": city, "days": days, "units": units})
        out += [{"role": "user", "content": f"Weather in {city} for {days} days?"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": f"c{i}", "type": "function",
                     "function": {"name": "get_weather", "arguments": args}}]},
                {"role": "tool", "tool_call_id": f"c{i}", "content": "Sunny."},
                {"role": "assistant", "content": f"It will be sunny in {city}."}]
    return [*out, {"role": "user", "content": QUESTION}]


@pytest.fixture(scope="module")
def live(default_model: Path, tmp_path_factory):
    from engine.backends.llama.engine import LlamaEngine

    # As test_guard.py's engine, so the measured seed-1 outputs hold here too.
    engine = LlamaEngine(default_model, n_ctx=2048, parallel=2, n_threads=1)
    assert engine.ready.wait(60) and engine.load_error is None
    recorder = Recorder(tmp_path_factory.mktemp("guard") / "session.jsonl", model="smollm2")
    service = Service(engine, resolve_pack("smollm2"), metrics=Metrics(engine),
                      recorder=recorder)
    live = start_live(service)
    yield live
    live.close()
    engine.close()
    live.thread.stop()
    recorder.close()


@pytest.fixture(scope="module")
def oa(live: Live) -> openai.OpenAI:
    return live._keep(openai.OpenAI(base_url=live.url + "/v1", api_key="x", max_retries=0,
                                    timeout=120))


def guided_total(live: Live) -> int:
    return live.http().get("/metrics?format=json").json()["totals"]["guided_tokens"]


def request_figures(live: Live, run_id: str) -> dict:
    snap = live.http().get("/metrics?format=json").json()
    return next(r for r in snap["requests"] if r["id"] == run_id)


def test_chat_completions_guards_by_default_and_not_when_asked(live, oa):
    before = guided_total(live)
    free = oa.chat.completions.create(messages=openai_history(), **ASK,
                                      extra_body={"guard_calls": False})
    free_run = live.last
    assert free_run.job.guard is None
    (call,) = free.choices[0].message.tool_calls
    with pytest.raises(jsonschema.ValidationError):  # "units": "miles", as measured
        jsonschema.validate(json.loads(call.function.arguments), WEATHER)
    free_figures = request_figures(live, free_run.id)
    assert free_figures["anomalies"]["invalid_arguments"] == 1
    assert free_figures["guided_tokens"] == 0 and guided_total(live) == before

    guarded = oa.chat.completions.create(messages=openai_history(), **ASK)  # no field: on
    run = live.last
    assert run.job.guard is not None
    (call,) = guarded.choices[0].message.tool_calls
    assert guarded.choices[0].finish_reason == "tool_calls"
    jsonschema.validate(json.loads(call.function.arguments), WEATHER)
    figures = request_figures(live, run.id)
    n = sum(1 for t in run.tokens if t.guided is not None)
    assert n > 0 and figures["guided_tokens"] == n
    assert figures["anomalies"]["invalid_arguments"] == 0
    assert guided_total(live) == before + n
    # Prometheus says the same as the JSON view.
    text = live.http().get("/metrics").text
    (line,) = [ln for ln in text.splitlines() if ln.startswith("prism_guided_tokens_total{")]
    assert float(line.rsplit(" ", 1)[1]) == guided_total(live)


def test_responses_takes_the_field_too(live, oa):
    items: list[dict] = []
    for m in openai_history():
        if m["role"] == "tool":
            items.append({"type": "function_call_output", "call_id": m["tool_call_id"],
                          "output": m["content"]})
        elif m.get("tool_calls"):
            fn = m["tool_calls"][0]["function"]
            items.append({"type": "function_call", "call_id": m["tool_calls"][0]["id"],
                          "name": fn["name"], "arguments": fn["arguments"]})
        else:
            items.append({"role": m["role"], "content": m["content"]})
    kw = dict(model="smollm2", input=items, temperature=0.8, max_output_tokens=60,
              tools=[{"type": "function", **t["function"]} for t in TOOLS])
    before = guided_total(live)
    free = oa.responses.create(**kw, extra_body={"seed": 1, "guard_calls": False})
    assert live.last.job.guard is None and guided_total(live) == before
    (free_call,) = [o for o in free.output if o.type == "function_call"]
    guarded = oa.responses.create(**kw, extra_body={"seed": 1, "guard_calls": True})
    run = live.last
    (call,) = [o for o in guarded.output if o.type == "function_call"]
    jsonschema.validate(json.loads(call.arguments), WEATHER)
    assert call.arguments != free_call.arguments  # the unit the guard chose
    assert guided_total(live) == before + sum(1 for t in run.tokens if t.guided is not None)
    assert guided_total(live) > before


def test_messages_takes_the_field_too(live):
    an = live._keep(anthropic.Anthropic(base_url=live.url, api_key="x", max_retries=0,
                                        timeout=120))
    ask = dict(model="smollm2", max_tokens=4, messages=[{"role": "user", "content": QUESTION}],
               tools=[{"name": "get_weather", "description": "Weather forecast for a city",
                       "input_schema": WEATHER}])
    an.messages.create(**ask, extra_body={"guard_calls": False})
    assert live.last.job.guard is None
    an.messages.create(**ask)
    assert live.last.job.guard is not None
    # tool_choice "none" offers no tools, so there is no call to guard.
    an.messages.create(**ask, tool_choice={"type": "none"}, extra_body={"guard_calls": True})
    assert live.last.job.guard is None


@pytest.mark.parametrize("path,body", [
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
    ("/v1/messages", {"max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}),
    ("/v1/responses", {"input": "hi"}),
])
def test_a_guard_calls_that_is_not_a_boolean_is_a_400_naming_it(live, path, body):
    n = len(live.runs)
    reply = live.http().post(path, json={"model": "m", **body, "guard_calls": "no"})
    assert reply.status_code == 400 and "guard_calls" in reply.text
    assert len(live.runs) == n  # refused before anything ran


def test_prism_stats_counts_the_guided_tokens_it_recorded(live, oa, capsys):
    if not any(t.guided for r in live.runs for t in r.tokens):  # run alone: make one
        oa.chat.completions.create(messages=openai_history(), **ASK)
    path = live.service.recorder.path
    recorded = sum(r.guided_tokens for r in read_session(path).requests)
    assert recorded == sum(1 for r in live.runs for t in r.tokens if t.guided is not None) > 0
    assert cli_main(["stats", str(path), "--by", "model"]) == 0
    lines = dict(ln.rsplit(None, 1) for ln in capsys.readouterr().out.splitlines()
                 if ln.startswith("guided tokens"))
    assert lines["guided tokens"] == str(recorded)
    replies = len(read_session(path).requests)
    assert float(lines["guided tokens /1000"]) == pytest.approx(1000 * recorded / replies,
                                                                 abs=0.05)
