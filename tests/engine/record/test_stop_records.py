"""A request the server's stop cut is recorded as such (engine/record/recording.py), judged so
(engine/record/verdict.py) and replayed with its recorded tokens (engine/record/replay.py),
while a client's own cancel stays a cancel everywhere."""

from __future__ import annotations

import threading

from engine.backends.base import Finish, Job, Timings, Token
from engine.record.reader import read_session
from engine.record.recording import SHUTDOWN, Recorder, request_from_dict
from engine.record.replay import ReplayEngine
from engine.record.verdict import CANCELLED, LABELS, kind_of, verdict_of

ASKED = {"messages": [{"role": "user", "content": "count"}]}
OTHER = {"messages": [{"role": "user", "content": "count again"}]}


def _record(path, stop_before_second: bool) -> None:
    with Recorder(path, model="m") as rec:
        for rid, request in (("a", ASKED), ("b", OTHER)):
            if rid == "b" and stop_before_second:
                rec.stopping()
            rec.request(rid, request, "prompt")
            for i, text in enumerate(("1,", " 2,", " 3,")):
                rec.token(rid, i, Token(i + 1, text, 0.0))
            rec.finish(rid, Finish("cancelled", Timings(output_tokens=3)))


def test_a_cancel_after_stopping_is_recorded_as_the_stop(tmp_path):
    _record(tmp_path / "s.jsonl", stop_before_second=True)
    a, b = read_session(tmp_path / "s.jsonl").requests
    assert (a.finish, a.cancelled_by) == ("cancelled", "")  # before the stop: the client's
    assert (b.finish, b.cancelled_by) == ("cancelled", SHUTDOWN)
    assert '"cancelled_by": "shutdown"' in (tmp_path / "s.jsonl").read_text()


def test_only_a_cancel_is_marked(tmp_path):
    with Recorder(tmp_path / "s.jsonl") as rec:
        rec.stopping()
        rec.request("a", ASKED, "prompt")
        rec.finish("a", Finish("stop", Timings()))
    (a,) = read_session(tmp_path / "s.jsonl").requests
    assert (a.finish, a.cancelled_by) == ("stop", "")


def test_the_verdict_names_the_stop_not_the_client():
    assert kind_of(None, "cancelled") == CANCELLED
    v = verdict_of((), "cancelled", cancelled_by=SHUTDOWN)
    assert v.kind == "shutdown" and v.label == LABELS["shutdown"] == "cut by the server stopping"
    assert kind_of(None, "cancelled", cancelled_by=SHUTDOWN) == "shutdown"


def _play(engine: ReplayEngine, request) -> tuple[str, Finish]:
    texts: list[str] = []
    done = threading.Event()
    fins: list[Finish] = []
    job = Job(prompt="prompt", on_token=lambda t: texts.append(t.text),
              on_finish=lambda f: (fins.append(f), done.set()))
    engine.prepare(job, request_from_dict(request))
    engine.submit(job)
    assert done.wait(10)
    return "".join(texts), fins[0]


def test_a_replay_plays_a_cut_stream_and_keeps_a_clients_cancel(tmp_path):
    _record(tmp_path / "s.jsonl", stop_before_second=True)
    engine = ReplayEngine([tmp_path / "s.jsonl"])
    try:
        text, fin = _play(engine, OTHER)
        assert (text, fin.reason) == ("1, 2, 3,", "length")  # the stop's cut: played
        _, fin = _play(engine, ASKED)
        assert fin.reason == "cancelled"  # the client's own cancel: still one
    finally:
        engine.close()
