"""engine/service.py: requests rendered, run, parsed, recorded and measured.

Replay-driven tests need no model; the `model` tests drive the real llama-cpp-python engine on
the embedded default model, with a grammar that makes it write a call inside its thinking.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from engine.events import TOOL_CALL, merge, result_of
from engine.metrics import Metrics
from engine.packs import load_pack, resolve_pack
from engine.recording import Recorder, read_session
from engine.replay import ReplayEngine
from engine.request import ChatRequest, Message, Sampling
from engine.service import ContextOverflow, Service

TOOLS = (
    {"type": "function", "function": {"name": "get_weather", "description": "Weather by city",
     "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                    "required": ["city"]}}},
)
CALL_IN_THINKING = (
    "The user wants the weather.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\n"
    "Paris\n</parameter>\n</function>\n</tool_call>"
)


def ask(text="What is the weather in Paris?", **kw) -> ChatRequest:
    return ChatRequest(messages=(Message("user", text),), tools=TOOLS, **kw)


@pytest.fixture
def replay_service(tmp_path):
    out = tmp_path / "out.txt"
    out.write_text(CALL_IN_THINKING, encoding="utf-8")
    engine = ReplayEngine([out])
    metrics = Metrics(engine)
    rec = Recorder(tmp_path / "session.jsonl", model=engine.name, pack="qwen3-xml")
    svc = Service(engine, resolve_pack("qwen3-xml", require_model=False), metrics=metrics,
                  recorder=rec)
    yield svc
    engine.close()
    rec.close()


def test_replayed_call_in_thinking_through_the_service(replay_service):
    run = replay_service.submit(ask())
    assert run.start_state == "reasoning"  # the Qwen3 template opened <think>
    events = list(run)
    res = run.wait(5)
    assert res == result_of(events, "stop")
    assert res.reasoning == "The user wants the weather."
    assert [(c.name, c.arguments) for c in res.tool_calls] == [("get_weather", {"city": "Paris"})]
    assert res.finish_reason == "tool_calls"
    snap = replay_service.metrics.snapshot()
    assert snap["totals"]["implicit_reasoning_ends"] == 1
    assert snap["requests"][0]["implicit_reasoning_ends"] == 1


def test_thinking_off_starts_in_content(replay_service):
    run = replay_service.submit(ask(thinking=False))
    assert run.start_state == "content"
    res = run.wait(5)
    # In content the call is at a line start after text: still a real call, no implicit end.
    assert len(res.tool_calls) == 1 and res.anomalies["implicit_reasoning_end"] == 0


def test_async_consumer_sees_the_same_events(replay_service):
    async def consume():
        run = replay_service.submit(ask())
        return run, [ev async for ev in run.stream()]

    run, events = asyncio.run(consume())
    assert events == run.events and any(e.kind == TOOL_CALL for e in events)


def test_listeners_receive_start_events_finish(replay_service):
    seen = []
    replay_service.add_listener(lambda u: seen.append(u.kind))
    replay_service.submit(ask()).wait(5)
    assert seen[0] == "start" and seen[-1] == "finish" and "events" in seen


def test_context_overflow_is_refused_before_queueing(tmp_path):
    out = tmp_path / "o.txt"
    out.write_text("x")
    engine = ReplayEngine([out], n_ctx=64)
    svc = Service(engine, resolve_pack("qwen3-xml", require_model=False))
    with pytest.raises(ContextOverflow, match="maximum context length is 64 tokens"):
        svc.submit(ask("word " * 200))
    assert engine.queue_depth() == 0
    engine.close()


def test_replay_of_a_recording_reproduces_the_events(replay_service, tmp_path):
    first = replay_service.submit(ask())
    first.wait(5)
    replay_service.recorder.close()
    session = read_session(replay_service.recorder.path)
    assert len(session.requests) == 1
    assert session.requests[0].parser_dialect == "qwen-xml"
    assert session.requests[0].dialect == "openai"
    engine = ReplayEngine([replay_service.recorder.path])
    svc = Service(engine, resolve_pack("qwen3-xml", require_model=False))
    again = svc.submit(ask())
    again.wait(5)
    # token for token, so even unmerged; only the calls' random ids differ between runs
    def key(events):
        return [(e.kind, e.text, e.span, e.anomaly, e.index,
                 e.call and (e.call.name, e.call.arguments)) for e in events]

    assert key(again.events) == key(first.events)
    assert [t.text for t in again.tokens] == [t.text for t in first.tokens]
    engine.close()


# --- the real engine on the default model -------------------------------------------------------

GRAMMAR = r'''
root ::= "I need the weather" [a-z ]{0,24} "." call
call ::= "\n<tool_call>\n<function=get_weather>\n<parameter=city>\n" city end
end ::= "\n</parameter>\n</function>\n</tool_call>"
city ::= [A-Z] [a-z]{2,8}
'''


@pytest.fixture(scope="module")
def llama_service():
    from engine.llama import LlamaEngine

    gguf = load_pack("smollm2").gguf
    engine = LlamaEngine(gguf, n_ctx=2048)
    # The Qwen3 XML pack's template on SmolLM2 (both ChatML): the prompt opens <think>.
    svc = Service(engine, resolve_pack("qwen3-xml", model=str(gguf)), metrics=Metrics(engine))
    yield svc
    engine.close()


@pytest.mark.model
def test_real_tokens_write_a_call_inside_thinking(llama_service, caplog):
    req = ask(grammar=GRAMMAR, max_tokens=120, sampling=Sampling(temperature=0.0, seed=1))
    with caplog.at_level("INFO", logger="prism"):
        run = llama_service.submit(req)
        res = run.wait(120)
    assert run.finish.reason == "stop", run.finish
    raw = "".join(t.text for t in run.tokens)
    # the tag really was split across several tokens
    assert not any("<tool_call>" in t.text for t in run.tokens)
    assert raw.startswith("I need the weather")
    assert res.reasoning == raw[: raw.index("\n<tool_call>")]
    assert len(res.tool_calls) == 1 and res.tool_calls[0].name == "get_weather"
    assert res.tool_calls[0].arguments["city"][0].isupper()
    assert res.anomalies["implicit_reasoning_end"] == 1
    assert llama_service.metrics.snapshot()["totals"]["implicit_reasoning_ends"] >= 1
    assert "[prism] implicit end of thinking" in caplog.text
    assert merge(run.events) == merge(run.events)  # events are comparable values
    json.dumps([e.to_dict() for e in run.events])


@pytest.mark.model
def test_real_short_generation_content(llama_service):
    run = llama_service.submit(ask("Say hello.", thinking=False, max_tokens=8,
                                   sampling=Sampling(temperature=0.0)))
    res = run.wait(60)
    assert run.start_state == "content"
    assert run.finish.reason in ("stop", "length")
    assert res.content.strip() and res.reasoning == ""
    assert run.timings.output_tokens == len(run.tokens) > 0
