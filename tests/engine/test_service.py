"""engine/service.py: requests rendered, run, parsed, recorded and measured.

Replay-driven tests need no model; the `model` tests drive the real llama-cpp-python engine on
the embedded default model, with a grammar that makes it write a call inside its thinking.
"""

from __future__ import annotations

import asyncio
import json
import threading

import pytest

from engine.chat.packs import resolve_pack
from engine.chat.request import STREAM_TOOLS, ChatRequest, Message, Sampling
from engine.chat.template import TemplateError
from engine.metrics import Metrics
from engine.parse.events import TOOL_CALL, merge, result_of
from engine.parse.reading import Reading
from engine.record.ledger import read_replies
from engine.record.reader import read_session
from engine.record.replay import ReplayMiss
from engine.record.verdict import TEMPLATE_REFUSED
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


def test_the_pipeline_and_listeners_run_beside_the_engine_thread(svc):
    # The engine thread only hands each token on; the parser, the recorder, the metrics and
    # the listeners run on the hand-off's thread, in order; the run is whole at its finish.
    threads: dict[str, set[str]] = {}
    svc.add_listener(lambda u: threads.setdefault(u.kind, set()).add(
        threading.current_thread().name))
    run = svc.submit(ask())
    events = list(run)
    assert threads["events"] == {"prism-pipeline"}
    assert events == run.events and run.result == result_of(events, "stop")
    assert "".join(t.text for t in run.tokens) == CALL_IN_THINKING
    assert svc.metrics.snapshot()["requests"][0]["output_tokens"] == len(run.tokens)


def test_a_consumer_attached_mid_run_gets_every_event_once(svc):
    got: list = []
    started: list[threading.Thread] = []

    def attach_late(upd):
        if upd.kind == "events" and len(upd.run.tokens) == 3 and not started:
            t = threading.Thread(target=lambda: got.extend(upd.run))
            started.append(t)
            t.start()

    svc.add_listener(attach_late)
    run = svc.submit(ask())
    run.wait(30)
    started[0].join(30)
    assert got == run.events and len(run.tokens) > 3


def test_a_failing_listener_ends_its_run_with_an_error(svc):
    def boom(upd):
        if upd.kind == "events":
            raise RuntimeError("listener bug")

    svc.add_listener(boom)
    run = svc.submit(ask())
    run.wait(30)
    assert run.finish.reason == "error"
    assert run.finish.error == "RuntimeError: listener bug"
    assert len(run.tokens) >= 1


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
    assert session.requests[0].family == "qwen-xml"
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


def test_a_recording_replays_with_its_own_start_state_and_family(replay_service):
    recording = replay_service(HERMES_ANSWER, pack="qwen3-hermes", record=True)
    live = recording.submit(ask(thinking=False))
    live.wait(5)
    recording.recorder.close()
    assert (live.start_state, live.parser.family) == ("content", "hermes-json")
    # Replayed through a pack whose template opens <think> and whose calls are Qwen XML: the
    # output is still read as it was live (issue 10, item 9).
    again = replay_service(recording.recorder.path, pack="qwen3-xml").submit(ask())
    res = again.wait(5)
    assert (again.start_state, again.parser.family) == ("content", "hermes-json")
    assert (res.reasoning, res.content) == ("", "It is sunny.")
    assert [(c.name, c.arguments) for c in res.tool_calls] == [("get_weather", {"city": "Paris"})]
    session = read_session(recording.recorder.path)
    assert session.requests[0].family == "hermes-json"


def test_a_run_is_read_as_its_reading_says_and_recorded_with_it(replay_service):
    """The reading is built once per request: the parser, the run's filters and the recording
    all take it from there (issue 18, item 4)."""
    two = CALL_IN_THINKING + "\n" + CALL_IN_THINKING.split("\n\n", 1)[1]
    svc = replay_service(two, two, record=True)
    one = svc.submit(ask(parallel_calls=False))
    one.wait(5)
    assert one.reading == Reading(start="reasoning", family="qwen-xml", tools=TOOLS,
                                  tools_declared=True, stream_tools=STREAM_TOOLS, one_call=True)
    assert one.start_state == "reasoning" and one.parser.family == "qwen-xml"
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
    # refused before a job is queued (issue 24, item 1)
    with pytest.raises(ReplayMiss, match="no recorded request"):
        replay.submit(ask("Something else entirely?"))
    assert replay.submit(ask()).wait(5).tool_calls  # the recorded one still plays


# --- arguments checked against the tool's schema (issue 22) -------------------------------------

WEATHER_UNITS = ({"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                   "units": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
    "required": ["city", "days", "units"]}}},)


def weather_call(**params) -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params.items())
    return ("Done.\n</think>\n\n<tool_call>\n<function=get_weather>\n"
            f"{body}</function>\n</tool_call>")


def test_a_call_without_its_required_enum_is_delivered_and_counted(replay_service):
    svc = replay_service(weather_call(city="Paris", days=3), record=True)
    run = svc.submit(ChatRequest(messages=(Message("user", "Weather?"),), tools=WEATHER_UNITS))
    events = list(run)  # what a client consumes
    res = run.wait(5)
    # The client gets the call as the model wrote it...
    assert [(c.name, c.arguments) for c in res.tool_calls] == [
        ("get_weather", {"city": "Paris", "days": 3})]
    assert res.finish_reason == "tool_calls"
    # ...and the run, the metrics and the recording count what is wrong with it, and where.
    marks = [e for e in events if e.anomaly == "invalid_arguments"]
    assert [m.text for m in marks] == ["/units: 'units' is a required property"]
    assert res.anomalies["invalid_arguments"] == 1 and res.anomalies["unknown_tool"] == 0
    snap = svc.metrics.snapshot()
    assert snap["totals"]["anomalies"]["invalid_arguments"] == 1
    assert snap["requests"][0]["anomalies"]["invalid_arguments"] == 1
    svc.recorder.close()
    (recorded,) = read_session(svc.recorder.path).requests
    assert recorded.result["anomalies"]["invalid_arguments"] == 1


def test_a_valid_call_is_not_counted_and_an_undeclared_one_is_only_unknown(replay_service):
    valid = weather_call(city="Paris", days=3, units="celsius")
    undeclared = valid.replace("get_weather", "get_time")
    svc = replay_service(valid, undeclared)
    ask_ = ChatRequest(messages=(Message("user", "Weather?"),), tools=WEATHER_UNITS)
    ok = svc.submit(ask_).wait(5)
    assert ok.tool_calls and ok.anomalies["invalid_arguments"] == 0
    other = svc.submit(ask_).wait(5)
    assert [c.name for c in other.tool_calls] == ["get_time"]
    assert other.anomalies["unknown_tool"] == 1 and other.anomalies["invalid_arguments"] == 0
    assert svc.metrics.snapshot()["totals"]["anomalies"]["invalid_arguments"] == 0


def test_an_extra_call_that_breaks_its_schema_is_counted_too(replay_service):
    # One call per reply: the second call is not sent (extra_tool_call), but the model still
    # broke the schema there, so it counts, as its unknown_tool would.
    two = weather_call(city="Paris", days=3, units="celsius") + "\n" + weather_call(
        city="Oslo", days="soon", units="celsius").split("\n\n", 1)[1]
    svc = replay_service(two)
    res = svc.submit(ChatRequest(messages=(Message("user", "Weather?"),), tools=WEATHER_UNITS,
                                 parallel_calls=False)).wait(5)
    assert [c.arguments["city"] for c in res.tool_calls] == ["Paris"]
    assert res.anomalies["extra_tool_call"] == 1 and res.anomalies["invalid_arguments"] == 1


# --- cache forensics (issue 20) ------------------------------------------------------------------

RULES = "Follow the house rules. " * 300  # a long system prompt: over 1024 pieces


def stamped(stamp: str) -> ChatRequest:
    return ChatRequest(messages=(Message("system", f"{RULES}Time: {stamp}. Be terse."),
                                 Message("user", "List the files.")))


@pytest.fixture
def caching(tmp_path):
    """make(reused) -> (service, its engine): each job's cache held the previous prompt up to
    where the two differ, and `reused(held)` of those tokens were reused."""
    from engine.backends.base import PrefixMatch
    from engine.record.replay import split_text
    from tests.caching_engine import CachingReplay

    engines = []

    def make(reused):
        last: list[str] = []

        def cache(prompt: str):
            if not last:
                last.append(prompt)
                return 0, 0, PrefixMatch()
            old, last[0] = last[0], prompt
            char = next(i for i, (a, b) in enumerate(zip(old, prompt, strict=False)) if a != b)
            held = len(split_text(prompt[:char]))
            return reused(held), 0, PrefixMatch(held, "slot", char, old[char:char + 60],
                                                prompt[char:char + 60])

        (tmp_path / "out.txt").write_text("Done.", encoding="utf-8")
        engine = CachingReplay([tmp_path / "out.txt"], cache)
        engines.append(engine)
        return Service(engine, resolve_pack("smollm2", require_model=False),
                       metrics=Metrics(engine)), engine

    yield make
    for engine in engines:
        engine.close()


def test_a_long_prompt_recomputed_past_a_longer_cached_prefix_is_logged(caching, caplog):
    svc, _ = caching(lambda held: 0)  # the slot that held it was busy: nothing reused
    first = svc.submit(stamped("10:31"))
    first.wait(5)
    with caplog.at_level("INFO", logger="prism"):
        run = svc.submit(stamped("10:32"))
        run.wait(5)
    t, prefix = run.timings, run.finish.prefix
    assert t.prompt_tokens >= 1024 and t.cached_tokens == 0 and prefix.held > 1000
    (line,) = [r.getMessage() for r in caplog.records if "cache miss" in r.getMessage()]
    system = stamped("10:32").messages[0].content
    assert line.startswith(f"[prism] {run.id}: cache miss: {t.prompt_tokens} of "
                           f"{t.prompt_tokens} prompt tokens recomputed although slot held "
                           f"{prefix.held}")
    assert f"message 0 (system), char {system.index('10:32') + 4}" in line
    assert 'cache had "1. Be terse.<|im_end|>\\n<|im_start|>user' in line
    assert 'prompt has "2. Be terse.' in line


def test_no_line_when_the_longest_cached_prefix_was_reused(caching, caplog):
    svc, _ = caching(lambda held: held)  # reused all it held: a miss, but nothing to explain
    svc.submit(stamped("10:31")).wait(5)
    with caplog.at_level("INFO", logger="prism"):
        run = svc.submit(stamped("10:32"))
        run.wait(5)
    assert run.timings.cached_tokens == run.finish.prefix.held > 1000
    assert not [r for r in caplog.records if "cache miss" in r.getMessage()]


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


@pytest.mark.model
def test_a_guarded_run_is_parsed_on_the_engine_thread_and_a_plain_one_beside_it(
        llama_service):
    # The call guard reads the parser between two tokens: that run's pipeline stays on the
    # engine thread. A run without tools hands its tokens on.
    threads: dict[str, set[str]] = {}

    def on(upd):
        if upd.kind == "events":
            threads.setdefault(upd.run.id, set()).add(threading.current_thread().name)

    llama_service.add_listener(on)
    try:
        greedy = Sampling(temperature=0.0)
        guarded = llama_service.submit(ask("Weather in Paris?", max_tokens=8, thinking=False,
                                           sampling=greedy))
        guarded.wait(60)
        plain = llama_service.submit(ChatRequest(messages=(Message("user", "Say hello."),),
                                                 max_tokens=8, thinking=False,
                                                 sampling=greedy))
        plain.wait(60)
    finally:
        llama_service.remove_listener(on)
    assert guarded.inline and guarded.job.guard is not None
    assert threads[guarded.id] == {"prism-llama"}
    assert not plain.inline and threads[plain.id] == {"prism-pipeline"}
    assert plain.finish.reason in ("stop", "length") and plain.result.content.strip()


@pytest.mark.model
def test_real_engine_prefix_match_is_placed_in_the_changed_system_message(llama_service):
    """Issue 20 on the real engine: a second request whose system prompt differs from the
    first's only in its timestamp leaves the slot's cache there; the engine's offset, moved
    onto the rendered prompt, lands in the timestamp of message 0."""
    from engine.record import forensics

    def stamped_ask(stamp: str) -> ChatRequest:
        return ChatRequest(messages=(
            Message("system", f"You are a terse assistant. The time is {stamp} today."),
            Message("user", "Say hi.")), max_tokens=2, sampling=Sampling(temperature=0.0))

    llama_service.submit(stamped_ask("10:31")).wait(60)
    run = llama_service.submit(stamped_ask("10:32"))
    run.wait(60)
    prefix, t = run.finish.prefix, run.timings
    assert prefix is not None and prefix.source == "slot" and prefix.held > 0
    assert t.cached_tokens <= prefix.held < t.prompt_tokens
    at = forensics.prompt_offset(run.prompt, prefix)
    assert run.prompt[at:].startswith(prefix.prompt_text[:3])
    place = forensics.locate(run.prompt, run.request.messages, at)
    system = run.request.messages[0].content
    stamp = system.index("10:32")
    assert (place.message, place.field) == (0, "content")
    assert stamp <= place.char <= stamp + 4  # the differing token is inside the timestamp
    assert "1" in prefix.cached_text[: stamp + 5 - place.char]


def test_a_request_the_template_refuses_is_recorded_as_refused(replay_service):
    # Llama 3's template puts the tools in the first user message: with none, it raises.
    svc = replay_service("never sent", pack="llama3-json", record=True)
    seen = []
    svc.add_listener(seen.append)
    req = ChatRequest(messages=(Message("system", "You call tools."),), tools=TOOLS)
    with pytest.raises(TemplateError, match="Llama 3 puts tools in the first user message") \
            as err:
        svc.submit(req)
    assert svc.engine.queue_depth() == 0
    assert svc.metrics.snapshot()["requests"] == []  # never started: nothing counted
    # The window's listeners hear of it, finished, once.
    assert [u.kind for u in seen] == ["refused"] and seen[0].run.done
    assert seen[0].run.finish.error == str(err.value)
    svc.recorder.close()
    (rec,) = read_session(svc.recorder.path).requests
    assert rec.id == err.value.request_id == seen[0].run.id
    assert (rec.finish, rec.refused, rec.prompt, rec.tokens) == ("error", "template", "", ())
    assert rec.error == str(err.value) and rec.request["messages"][0]["content"] == \
        "You call tools."
    (reply,) = read_replies([svc.recorder.path])
    assert reply.kind == reply.verdict.kind == TEMPLATE_REFUSED
    assert "Llama 3 puts tools" in reply.verdict.detail
