"""engine/service.py: requests rendered, run, parsed, recorded and measured.

Replay-driven tests need no model; the `model` tests drive the real llama-cpp-python engine on
the embedded default model, with a grammar that makes it write a call inside its thinking.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from engine.chat.packs import resolve_pack
from engine.chat.request import STREAM_TOOLS, ChatRequest, Message, Sampling
from engine.metrics import Metrics
from engine.parse.events import TOOL_CALL, merge, result_of
from engine.parse.reading import Reading
from engine.record.recording import read_session
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
def svc(replay_service) -> Service:
    """The Qwen3 XML pack over one replayed output (a call inside the thinking), recorded."""
    return replay_service(CALL_IN_THINKING, record=True)


def test_replayed_call_in_thinking_through_the_service(svc):
    run = svc.submit(ask())
    assert run.start_state == "reasoning"  # the Qwen3 template opened <think>
    events = list(run)
    res = run.wait(5)
    assert res == result_of(events, "stop")
    assert res.reasoning == "The user wants the weather."
    assert [(c.name, c.arguments) for c in res.tool_calls] == [("get_weather", {"city": "Paris"})]
    assert res.finish_reason == "tool_calls"
    snap = svc.metrics.snapshot()
    assert snap["totals"]["implicit_reasoning_ends"] == 1
    assert snap["requests"][0]["implicit_reasoning_ends"] == 1


def test_thinking_off_starts_in_content(svc):
    run = svc.submit(ask(thinking=False))
    assert run.start_state == "content"
    res = run.wait(5)
    # In content the call is at a line start after text: still a real call, no implicit end.
    assert len(res.tool_calls) == 1 and res.anomalies["implicit_reasoning_end"] == 0


def test_async_consumer_sees_the_same_events(svc):
    async def consume():
        run = svc.submit(ask())
        return run, [ev async for ev in run.stream()]

    run, events = asyncio.run(consume())
    assert events == run.events and any(e.kind == TOOL_CALL for e in events)


def test_listeners_receive_start_events_finish(svc):
    seen = []
    svc.add_listener(lambda u: seen.append(u.kind))
    svc.submit(ask()).wait(5)
    assert seen[0] == "start" and seen[-1] == "finish" and "events" in seen


def test_context_overflow_is_refused_before_queueing(replay_service):
    small = replay_service("x", n_ctx=64)
    with pytest.raises(ContextOverflow, match="maximum context length is 64 tokens"):
        small.submit(ask("word " * 200))
    assert small.engine.queue_depth() == 0


def test_replay_of_a_recording_reproduces_the_events(svc, replay_service):
    first = svc.submit(ask())
    first.wait(5)
    svc.recorder.close()
    session = read_session(svc.recorder.path)
    assert len(session.requests) == 1
    assert session.requests[0].dialect == "qwen-xml"
    assert session.requests[0].api == "openai"
    again = replay_service(svc.recorder.path).submit(ask())
    again.wait(5)
    # token for token, so even unmerged; only the calls' random ids differ between runs
    def key(events):
        return [(e.kind, e.text, e.span, e.anomaly, e.index,
                 e.call and (e.call.name, e.call.arguments)) for e in events]

    assert key(again.events) == key(first.events)
    assert [t.text for t in again.tokens] == [t.text for t in first.tokens]


HERMES_ANSWER = ('It is sunny.\n<tool_call>\n{"name": "get_weather", "arguments": '
                 '{"city": "Paris"}}\n</tool_call>')


def test_a_recording_replays_with_its_own_start_state_and_dialect(replay_service):
    recording = replay_service(HERMES_ANSWER, pack="qwen3-hermes", record=True)
    live = recording.submit(ask(thinking=False))
    live.wait(5)
    recording.recorder.close()
    assert (live.start_state, live.parser.dialect) == ("content", "hermes-json")
    # Replayed through a pack whose template opens <think> and whose calls are Qwen XML: the
    # output is still read as it was live (issue 10, item 9).
    again = replay_service(recording.recorder.path, pack="qwen3-xml").submit(ask())
    res = again.wait(5)
    assert (again.start_state, again.parser.dialect) == ("content", "hermes-json")
    assert (res.reasoning, res.content) == ("", "It is sunny.")
    assert [(c.name, c.arguments) for c in res.tool_calls] == [("get_weather", {"city": "Paris"})]
    session = read_session(recording.recorder.path)
    assert session.requests[0].dialect == "hermes-json"


def test_a_run_is_read_as_its_reading_says_and_recorded_with_it(replay_service):
    """The reading is built once per request: the parser, the run's filters and the recording
    all take it from there (issue 18, item 4)."""
    two = CALL_IN_THINKING + "\n" + CALL_IN_THINKING.split("\n\n", 1)[1]
    svc = replay_service(two, two, record=True)
    one = svc.submit(ask(parallel_calls=False))
    one.wait(5)
    assert one.reading == Reading(start="reasoning", family="qwen-xml", tools=TOOLS,
                                  tools_declared=True, stream_tools=STREAM_TOOLS, one_call=True)
    assert one.start_state == "reasoning" and one.parser.dialect == "qwen-xml"
    assert len(one.result.tool_calls) == 1 and one.result.anomalies["extra_tool_call"] == 1
    plain = svc.submit(ChatRequest(messages=(Message("user", "hi"),)))
    plain.wait(5)
    assert plain.reading.calls_as_text and not plain.reading.one_call
    assert plain.reading.tools == () and plain.reading.tools_declared
    svc.recorder.close()
    recorded = read_session(svc.recorder.path).requests
    assert [r.reading for r in recorded] == [one.reading, plain.reading]


def test_a_request_the_recording_does_not_hold_fails_clearly(svc, replay_service):
    svc.submit(ask()).wait(5)
    svc.recorder.close()
    replay = replay_service(svc.recorder.path)
    run = replay.submit(ask("Something else entirely?"))
    run.wait(5)
    assert run.tokens == [] and (run.finish.reason, run.finish.status) == ("error", 400)
    assert "no recorded request" in run.finish.error
    assert replay.submit(ask()).wait(5).tool_calls  # the recorded one still plays


# --- the real engine on the default model -------------------------------------------------------

GRAMMAR = r'''
root ::= "I need the weather" [a-z ]{0,24} "." call
call ::= "\n<tool_call>\n<function=get_weather>\n<parameter=city>\n" city end
end ::= "\n</parameter>\n</function>\n</tool_call>"
city ::= [A-Z] [a-z]{2,8}
'''


@pytest.fixture(scope="module")
def llama_service(default_model):
    from engine.backends.llama.engine import LlamaEngine

    gguf = default_model
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
