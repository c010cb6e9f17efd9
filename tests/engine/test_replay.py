"""engine/replay.py: plain text and recorded sources, pacing, cancel, repeat, max_tokens."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.base import Finish, Job, Timings, Token
from engine.recording import Recorder
from engine.replay import ReplayEngine, split_text

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


def run(engine: ReplayEngine, **kw) -> Collector:
    c = Collector(**kw)
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


@pytest.fixture
def make() -> Iterator:
    engines: list[ReplayEngine] = []

    def factory(*sources: Path, speed: float | None = 0.0) -> ReplayEngine:
        e = ReplayEngine(sources, speed=speed)
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


def test_fifo_when_queued_at_once(make, recording: Path) -> None:
    eng = make(recording, speed=10.0)
    order: list[str] = []
    a, b = Collector(), Collector()
    a.job.on_finish = lambda f: (order.append("a"), a._finished(f))
    b.job.on_finish = lambda f: (order.append("b"), b._finished(f))
    eng.submit(a.job)
    eng.submit(b.job)
    assert eng.queue_depth() >= 1
    b.wait()
    a.wait()
    assert order == ["a", "b"]
    assert (a.text, b.text) == ("abcd", "xyz")
    assert b.finish.timings.queue_ms > 0


def test_instant_vs_paced(make, recording: Path) -> None:
    instant = run(make(recording, speed=0.0))
    assert instant.finish.timings.ttft_ms < 50
    eng = make(recording, speed=1.0)
    t0 = time.perf_counter()
    paced = run(eng)
    elapsed = time.perf_counter() - t0
    assert 0.18 <= elapsed < 0.6  # tokens at 0.1 s and 0.2 s
    gap = paced.tokens[1].t - paced.tokens[0].t
    assert gap == pytest.approx(0.1, abs=0.05)
    assert paced.finish.timings.ttft_ms == pytest.approx(100, abs=50)
    fast = make(recording, speed=4.0)
    t0 = time.perf_counter()
    run(fast)
    assert time.perf_counter() - t0 < 0.15  # 0.2 s of recording at 4x is 0.05 s


def test_plain_text_nominal_pace(make, text_file: Path) -> None:
    eng = make(text_file, speed=10.0)  # 50 tok/s x 10
    c = run(eng)
    n = len(c.tokens)
    span = c.tokens[-1].t - c.tokens[0].t
    assert span == pytest.approx((n - 1) / 500, rel=0.5, abs=0.02)


def test_cancel_mid_output(make, text_file: Path) -> None:
    eng = make(text_file, speed=1.0)  # 50 tok/s
    c = Collector()
    eng.submit(c.job)
    deadline = time.monotonic() + 5
    while len(c.tokens) < 3 and time.monotonic() < deadline:
        time.sleep(0.005)
    c.job.cancel()
    fin = c.wait()
    assert fin.reason == "cancelled"
    assert 3 <= len(c.tokens) <= 5
    assert fin.timings.output_tokens == len(c.tokens)
    assert TEXT.startswith(c.text)


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


def test_close_cancels_waiting_jobs(make, text_file: Path) -> None:
    eng = make(text_file, speed=0.5)
    running, waiting = Collector(), Collector()
    eng.submit(running.job)
    eng.submit(waiting.job)
    time.sleep(0.05)
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
    assert c.finish.reason == "error" and "ends before" in (c.finish.error or "")
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
