"""engine/record/replay.py: plain text and recorded sources, pacing, cancel, repeat, max_tokens.

The engine runs on a clock of the test's (`Pacer`): time moves only when the engine pauses
between tokens, so pacing is asserted exactly, and a test that must catch the engine inside a
pause holds it there instead of sleeping and hoping.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.backends.base import Finish, Job, Timings, Token
from engine.chat.request import ChatRequest, Message
from engine.record.recording import Recorder
from engine.record.replay import ReplayEngine, ReplayMiss, holds_call, split_text
from tests.support import Clock

TEXT = "<think>\nThe user greets me. 🙂 Reply briefly.\n</think>\n\nHello there, friend!  \n"


class Collector:
    """A job plus what came back for it."""

    def __init__(self, **kw) -> None:
        self.tokens: list[Token] = []
        self.finish: Finish | None = None
        self.done = threading.Event()
        self.job = Job(
            prompt=kw.pop("prompt", "hi"),
            on_token=self.tokens.append,
            on_finish=self._finished,
            **kw,
        )

    def _finished(self, fin: Finish) -> None:
        self.finish = fin
        self.done.set()

    @property
    def text(self) -> str:
        return "".join(t.text for t in self.tokens)

    def wait(self, timeout: float = 10.0) -> Finish:
        assert self.done.wait(timeout), "job did not finish"
        assert self.finish is not None
        return self.finish


def run(engine: ReplayEngine, request: ChatRequest | None = None, **kw) -> Collector:
    """Play one job to its end; with a request, prepared for it first (as the service does)."""
    c = Collector(**kw)
    if request is not None:
        engine.prepare(c.job, request)
    engine.submit(c.job)
    c.wait()
    return c


@pytest.fixture
def text_file(tmp_path: Path) -> Path:
    p = tmp_path / "out.txt"
    p.write_text(TEXT, encoding="utf-8")
    return p


@pytest.fixture
def recording(tmp_path: Path) -> Path:
    """Two requests: 'ab' + 'cd' at 0.1 s, 0.2 s; then 'xyz' in three tokens at 0.1 s steps."""
    p = tmp_path / "s.jsonl"
    with Recorder(p, model="recorded-model") as rec:
        rec.request("r1", {"messages": []}, "p1", t0=0.0)
        rec.token("r1", 0, Token(11, "ab", 0.1))
        rec.token("r1", 1, Token(12, "cd", 0.2))
        rec.finish("r1", Finish("stop", Timings(output_tokens=2)))
        rec.request("r2", {"messages": []}, "p2", t0=5.0)
        for i, ch in enumerate("xyz"):
            rec.token("r2", i, Token(20 + i, ch, 5.0 + 0.1 * (i + 1), ((ch, -0.5),)))
        rec.finish("r2", Finish("length", Timings(output_tokens=3)))
    return p


class Pacer(Clock):
    """The engine's clock and pause. Pauses move the time ahead at once; after `hold()`, a
    pause first waits (on the real clock) until `release()` or its job is cancelled."""

    def __init__(self) -> None:
        super().__init__()
        self.paused = threading.Event()  # set once the engine is inside a pause
        self._go = threading.Event()
        self._go.set()

    def hold(self) -> None:
        self._go.clear()

    def release(self) -> None:
        self._go.set()

    def pause(self, cancelled: threading.Event, seconds: float) -> bool:
        self.paused.set()
        while not self._go.wait(0.005) and not cancelled.is_set():
            pass
        return super().pause(cancelled, seconds)


@pytest.fixture
def pacer() -> Pacer:
    return Pacer()


@pytest.fixture
def make(pacer: Pacer) -> Iterator:
    engines: list[ReplayEngine] = []

    def factory(*sources: Path, speed: float | None = 0.0, **kw) -> ReplayEngine:
        e = ReplayEngine(sources, speed=speed, clock=pacer, pause=pacer.pause, **kw)
        engines.append(e)
        return e

    yield factory
    for e in engines:
        e.close()


def test_split_text_is_lossless_and_small() -> None:
    pieces = split_text(TEXT)
    assert "".join(pieces) == TEXT
    assert all(len(p.strip()) <= 4 for p in pieces)
    assert split_text(TEXT) == pieces  # deterministic
    assert split_text("") == []


def test_plain_text_source(make, text_file: Path) -> None:
    eng = make(text_file)
    assert eng.outputs == [TEXT]
    assert eng.name == "replay"
    c = run(eng)
    assert c.text == TEXT
    assert c.finish.reason == "stop"
    assert c.finish.timings.output_tokens == len(c.tokens) == len(split_text(TEXT))
    assert c.finish.timings.prompt_tokens == 1
    assert eng.state == "idle"


def test_recording_source_one_output_per_request(make, recording: Path) -> None:
    eng = make(recording)
    assert eng.outputs == ["abcd", "xyz"]
    assert eng.name == "recorded-model"
    first = run(eng)
    assert (first.text, first.finish.reason) == ("abcd", "stop")
    assert [t.id for t in first.tokens] == [11, 12]
    second = run(eng)
    assert (second.text, second.finish.reason) == ("xyz", "length")
    assert second.tokens[0].top == (("x", -0.5),)


def test_last_source_repeats(make, text_file: Path, recording: Path) -> None:
    eng = make(recording, text_file)
    texts = [run(eng).text for _ in range(5)]
    assert texts == ["abcd", "xyz", TEXT, TEXT, TEXT]


def test_fifo_when_queued_at_once(make, pacer: Pacer, recording: Path) -> None:
    eng = make(recording, speed=10.0)
    order: list[str] = []
    a, b = Collector(), Collector()
    a.job.on_finish = lambda f: (order.append("a"), a._finished(f))
    b.job.on_finish = lambda f: (order.append("b"), b._finished(f))
    pacer.hold()  # a stays in its first pause, so b is still queued when looked at
    eng.submit(a.job)
    eng.submit(b.job)
    assert pacer.paused.wait(5)
    assert eng.queue_depth() == 1
    pacer.release()
    b.wait()
    a.wait()
    assert order == ["a", "b"]
    assert (a.text, b.text) == ("abcd", "xyz")
    # b waited while a played its 0.2 s of recording at 10x
    assert b.finish.timings.queue_ms == pytest.approx(20)


def test_instant_vs_paced(make, recording: Path) -> None:
    instant = run(make(recording, speed=0.0))
    assert instant.finish.timings.ttft_ms == 0
    assert instant.tokens[0].t == instant.tokens[1].t  # no pause at all
    paced = run(make(recording, speed=1.0))
    gap = paced.tokens[1].t - paced.tokens[0].t
    assert gap == pytest.approx(0.1)  # tokens recorded at 0.1 s and 0.2 s
    assert paced.finish.timings.ttft_ms == pytest.approx(100)
    assert paced.finish.timings.decode_ms == pytest.approx(100)
    fast = run(make(recording, speed=4.0))
    assert fast.finish.timings.ttft_ms == pytest.approx(25)
    assert fast.tokens[1].t - fast.tokens[0].t == pytest.approx(0.025)


def test_plain_text_nominal_pace(make, text_file: Path) -> None:
    eng = make(text_file, speed=10.0)  # 50 tok/s x 10
    c = run(eng)
    n = len(c.tokens)
    assert c.tokens[-1].t - c.tokens[0].t == pytest.approx((n - 1) / 500)


def test_cancel_between_tokens(make, text_file: Path) -> None:
    eng = make(text_file, speed=1.0)
    c = Collector()

    def take(tok: Token) -> None:
        c.tokens.append(tok)
        if len(c.tokens) == 3:
            c.job.cancel()

    c.job.on_token = take
    eng.submit(c.job)
    fin = c.wait()
    assert fin.reason == "cancelled"
    assert len(c.tokens) == 3 == fin.timings.output_tokens
    assert TEXT.startswith(c.text)


def test_cancel_interrupts_the_pause(make, pacer: Pacer, text_file: Path) -> None:
    eng = make(text_file, speed=1.0)
    pacer.hold()
    c = Collector()
    eng.submit(c.job)
    assert pacer.paused.wait(5)  # waiting for its first token
    c.job.cancel()
    fin = c.wait()
    assert fin.reason == "cancelled" and c.tokens == []


def test_max_tokens_gives_length(make, text_file: Path) -> None:
    eng = make(text_file)
    c = run(eng, max_tokens=4)
    assert c.finish.reason == "length"
    assert len(c.tokens) == 4
    assert c.text == "".join(split_text(TEXT)[:4])


def test_stop_strings(make, text_file: Path) -> None:
    eng = make(text_file)
    c = run(eng, stop=("</think>",))
    assert c.finish.reason == "stop"
    assert c.text == TEXT[: TEXT.index("</think>")]


def test_close_cancels_running_and_waiting_jobs(make, pacer: Pacer, text_file: Path) -> None:
    eng = make(text_file, speed=1.0)
    pacer.hold()
    running, waiting = Collector(), Collector()
    eng.submit(running.job)
    eng.submit(waiting.job)
    assert pacer.paused.wait(5)  # the first job is inside its pause, the second queued
    eng.close()
    assert running.wait().reason == "cancelled"
    assert waiting.wait().reason == "cancelled"
    with pytest.raises(RuntimeError):
        eng.submit(Collector().job)


def test_damaged_recording_plays_what_precedes(make, recording: Path, caplog) -> None:
    data = recording.read_text(encoding="utf-8")
    recording.write_text(
        data[: data.rindex('{"type": "finish"')] + '{"type": "fin', encoding="utf-8"
    )
    eng = make(recording)
    assert eng.outputs == ["abcd", "xyz"]
    run(eng)
    c = run(eng)
    # cut off by a crash: what was recorded, capped, rather than an error that never happened
    assert (c.text, c.finish.reason, c.finish.error) == ("xyz", "length", None)
    assert any("truncated" in r.getMessage() for r in caplog.records)


def test_a_failing_callback_ends_that_job_only(make, text_file: Path) -> None:
    eng = make(text_file)
    c = Collector()

    def boom(tok: Token) -> None:
        raise RuntimeError("consumer bug")

    c.job.on_token = boom
    eng.submit(c.job)
    fin = c.wait()
    assert fin.reason == "error" and "consumer bug" in (fin.error or "")
    assert run(eng).finish.reason == "stop"


# --- matching requests to recorded ones (issue 9, item 6) ------------------------------------

CHAT = ChatRequest(messages=(Message("system", "You are helpful."),
                             Message("user", "Weather in Paris?")), tools=({"type": "x"},))
TITLE = ChatRequest(messages=(Message("user", "Write a title for: Weather in Paris?"),))
FOLLOW_UP = ChatRequest(messages=(*CHAT.messages,
                                  Message("assistant", "", tool_calls=({
                                      "id": "call_1", "type": "function", "function": {
                                          "name": "get_weather",
                                          "arguments": {"city": "Paris"}}},)),
                                  Message("tool", "sunny", tool_call_id="call_1")))


@pytest.fixture
def agent_session(tmp_path: Path) -> Path:
    """What an agent's client sent, in this order: the chat, its title, the tool result."""
    p = tmp_path / "agent.jsonl"
    with Recorder(p, model="m") as rec:
        for rid, req, text in (("chat", CHAT, "<tool_call>call</tool_call>"),
                               ("title", TITLE, "Paris weather"),
                               ("after", FOLLOW_UP, "It is sunny.")):
            rec.request(rid, req, "prompt", start_state="content", family="hermes-json",
                        t0=0.0)
            rec.token(rid, 0, Token(1, text, 0.1))
            rec.finish(rid, Finish("stop", Timings(output_tokens=1)))
    return p


def test_each_request_gets_the_output_recorded_for_its_conversation(make, agent_session):
    eng = make(agent_session)
    # The title request reaches the server first now: it must not take the chat's tool call.
    assert run(eng, TITLE).text == "Paris weather"
    # the client sends back another call id than the recording holds: still the same turn
    follow_up = ChatRequest(messages=tuple(
        Message(m.role, m.content, tool_calls=tuple(
            {**c, "id": "call_9"} for c in m.tool_calls), tool_call_id=m.tool_call_id
            and "call_9") for m in FOLLOW_UP.messages), tools=CHAT.tools)
    assert run(eng, follow_up).text == "It is sunny."
    assert run(eng, CHAT).text == "<tool_call>call</tool_call>"
    assert run(eng, CHAT).text == "<tool_call>call</tool_call>"  # a repeat, the same answer


def test_the_last_user_message_matches_when_the_conversation_differs(make, agent_session):
    eng = make(agent_session)
    other_system = ChatRequest(messages=(Message("system", "Be terse."),
                                         Message("user", "Weather in Paris?")))
    # the chat and its follow-up share the last user message: the first unused, in order
    assert run(eng, other_system).text == "<tool_call>call</tool_call>"
    assert run(eng, other_system).text == "It is sunny."


def test_a_request_the_recording_does_not_hold_is_refused_before_it_is_queued(
        make, agent_session):
    eng = make(agent_session)
    c = Collector()
    with pytest.raises(ReplayMiss) as miss:
        eng.prepare(c.job, ChatRequest(messages=(Message("user", "Hello?"),)))
    assert "no recorded request" in str(miss.value) and "'Hello?'" in str(miss.value)
    # the refusal used nothing up: the recorded chat still gets its own output
    assert run(eng, CHAT).text == "<tool_call>call</tool_call>"


def test_recorded_start_state_and_family_come_back(make, agent_session):
    eng = make(agent_session)
    assert eng.prepare(Collector().job, TITLE) == ("content", "hermes-json")


def test_a_recording_naming_the_family_dialect_replays_the_same(make, agent_session,
                                                                 tmp_path: Path):
    """Files written before the concept was called a family name it `dialect`: they replay
    as the same recording written now does."""
    lines = []
    for line in agent_session.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        if rec.get("type") == "request":
            rec["dialect"] = rec.pop("family")
        lines.append(json.dumps(rec))
    old = tmp_path / "old.jsonl"
    old.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert '"dialect": "hermes-json"' in old.read_text(encoding="utf-8")
    now, then = make(agent_session), make(old)
    for eng in (now, then):
        assert eng.prepare(Collector().job, TITLE) == ("content", "hermes-json")
    for req in (TITLE, CHAT, FOLLOW_UP):
        assert run(then, req).text == run(now, req).text


def test_plain_text_keeps_its_order_and_can_go_to_tool_requests_only(make, tmp_path: Path):
    paths = []
    for i, text in enumerate(("first", "second")):
        paths.append(tmp_path / f"{i}.txt")
        paths[-1].write_text(text, encoding="utf-8")
    eng = make(*paths)
    assert [run(eng, TITLE).text, run(eng, CHAT).text] == ["first", "second"]
    only = ReplayEngine(paths, tools_only=True)
    try:
        with pytest.raises(ReplayMiss, match="--replay-tools-only"):
            only.prepare(Collector().job, TITLE)
        assert [run(only, CHAT).text, run(only, CHAT).text] == ["first", "second"]
        assert only.prepare(Collector().job, CHAT) is None  # plain text: the pack decides
    finally:
        only.close()


# --- a plain-text call waits for a request with tools (issue 24, item 3) ------------------------

CALL = ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
        "</function>\n</tool_call>")


@pytest.fixture
def call_then_answer(tmp_path: Path) -> list[Path]:
    """opencode's turn as plain-text outputs: the call, then the answer after the tool ran."""
    paths = [tmp_path / "1.txt", tmp_path / "2.txt"]
    paths[0].write_text(CALL, encoding="utf-8")
    paths[1].write_text("It is sunny in Paris.", encoding="utf-8")
    return paths


def test_holds_call_reads_the_family_it_is_given() -> None:
    assert holds_call(CALL) and holds_call(f"<think>I will look.</think>{CALL}", "qwen-xml")
    assert not holds_call("No call here, only <b>markup</b>.")
    assert not holds_call(CALL, "mistral")  # a Qwen call is text to Mistral's reader


def test_a_plain_text_call_waits_for_the_next_request_with_tools(make, call_then_answer):
    eng = make(*call_then_answer, calls_need_tools=True)
    # opencode's title request (no tools) comes first: refused, and the call is kept for the chat
    with pytest.raises(ReplayMiss, match="holds a tool call") as miss:
        eng.prepare(Collector().job, TITLE)
    assert "--replay-strict-order" in str(miss.value)
    assert run(eng, CHAT).text == CALL
    # the next output holds no call: a request without tools may have it
    assert run(eng, TITLE).text == "It is sunny in Paris."


def test_strict_order_hands_the_call_to_whoever_asks_first(make, call_then_answer):
    eng = make(*call_then_answer)  # the engine's default, --replay-strict-order on the CLI
    assert [run(eng, TITLE).text, run(eng, CHAT).text] == [CALL, "It is sunny in Paris."]


def test_recorded_sessions_still_match_their_requests_with_calls_need_tools(
        make, agent_session):
    eng = make(agent_session, calls_need_tools=True)
    assert run(eng, TITLE).text == "Paris weather"
    assert run(eng, CHAT).text == "<tool_call>call</tool_call>"


# --- token counts (issue 24, item 2) ----------------------------------------------------------


def test_counts_are_estimates_without_a_tokenizer_and_the_tokenizers_with_one(
        make, text_file):
    assert make(text_file).counts_estimated is True
    words = make(text_file, tokenizer=lambda s: [len(w) for w in s.split()])
    assert words.counts_estimated is False
    assert words.tokenize("one two three") == [3, 3, 5]
    # another model's vocabulary standing in: counted with it, still said to be an estimate
    assert make(text_file, tokenizer=str.encode, counts_estimated=True).counts_estimated is True


def test_the_played_job_reports_the_prompt_count_it_was_given(make, text_file):
    c = run(make(text_file, tokenizer=lambda s: list(s.encode())), prompt="abcd",
            prompt_ids=(1, 2, 3))
    assert c.finish.timings.prompt_tokens == 3  # the service's count, not a second one
    c = run(make(text_file, tokenizer=lambda s: list(s.encode())), prompt="abcd")
    assert c.finish.timings.prompt_tokens == 4


def test_recorded_marks_reach_the_clients_replay(make, tmp_path: Path) -> None:
    """A token the call guard chose and the reasoning budget's close keep their marks when a
    recording is played to clients, so the pipeline shows the guided token and the budget's
    event there as it did live."""
    p = tmp_path / "marks.jsonl"
    with Recorder(p, model="m") as rec:
        rec.request("r1", {"messages": []}, "p", t0=0.0)
        for i, (text, guided, forced) in enumerate((("Hmm", None, False), ("</think>", None, True),
                                                     ("Ye", "No", False))):
            rec.token("r1", i, Token(i, text, 0.1 * (i + 1), (), guided, forced))
        rec.finish("r1", Finish("stop", Timings(output_tokens=3)))
    played = run(make(p))
    assert [(t.guided, t.forced) for t in played.tokens] == [(None, False), (None, True),
                                                              ("No", False)]
