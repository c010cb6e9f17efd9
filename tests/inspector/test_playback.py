"""inspector/playback.py without a window: loading, pacing on a hand-moved clock, step, seek,
and the playback's own metrics (each request counted once, however often it is replayed)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from engine.backends.base import Finish, Timings, Token
from engine.parse.events import merge, result_of
from engine.parse.parser import OutputParser
from engine.record.reader import read_session
from engine.record.recording import Recorder
from engine.record.replay import split_text
from inspector.playback import Playback
from inspector.tracks import TrackStore
from tests.support import DEMO, Clock

ANSWER = "Thinking it over.\n</think>\n\nThe answer is 42."


def key(events):
    return [(e.kind, e.text, e.span, e.anomaly) for e in merge(events)]


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def pb(clock: Clock) -> Playback:
    return Playback(TrackStore(), clock=clock)


@pytest.fixture
def two_requests(tmp_path: Path) -> Path:
    """r1: "ab" "cd" at 0.1 s and 0.2 s, finished; r2: "xyz", cut off (no finish record)."""
    path = tmp_path / "two.jsonl"
    with Recorder(path, model="m", pack="qwen3-xml") as rec:
        rec.request("r1", {"messages": []}, "p1", start_state="content", family="qwen-xml",
                    t0=0.0)
        rec.token("r1", 0, Token(1, "ab", 0.1))
        rec.token("r1", 1, Token(2, "cd", 0.2))
        rec.finish("r1", Finish("stop", Timings(output_tokens=2)))
        rec.request("r2", {"messages": []}, "p2", start_state="content", t0=1.0)
        for i, ch in enumerate("xyz"):
            rec.token("r2", i, Token(10 + i, ch, 1.0 + 0.1 * (i + 1)))
    return path


def test_instant_plays_every_request_to_the_end_with_the_live_parse(pb: Playback) -> None:
    pb.set_speed(0.0)
    items = pb.open(DEMO)
    assert len(items) == len(read_session(DEMO).requests) == 3
    changed = pb.poll()
    assert pb.finished and not pb.playing
    assert {t.id for t in changed} >= {"demo-3"}
    for it, req in zip(items, read_session(DEMO).requests, strict=True):
        track = it.track
        assert track.raw == req.text and track.status == "done"
        parser = OutputParser(start=req.start_state, family=req.family, tools=req.tools,
                              stream_tools=req.stream_tools)
        expected = parser.feed(req.text) + parser.finish()
        assert key(track.events) == key(expected)  # call ids are drawn afresh per parse
        want = result_of(expected, req.finish)
        assert (track.result.reasoning, track.result.content, track.finish_reason) == (
            want.reasoning, want.content, want.finish_reason)
        assert [(c.name, c.arguments) for c in track.result.tool_calls] == [
            (c.name, c.arguments) for c in want.tool_calls]
    totals = pb.metrics.snapshot()["totals"]
    assert totals["finished"] == 3 and totals["output_tokens"] == sum(
        len(r.tokens) for r in read_session(DEMO).requests)


def test_recorded_pace_on_the_playback_clock(pb: Playback, clock: Clock,
                                             two_requests: Path) -> None:
    pb.open(two_requests)  # plays at 1x
    track = pb.current.track
    clock.advance(0.099)
    pb.poll()
    assert track.tokens == []
    clock.advance(0.002)
    pb.poll()
    assert track.raw == "ab"
    # re-based on the playback clock: the list shows the recorded time to first token
    assert track.ttft_ms == pytest.approx(100)
    clock.advance(0.1)
    pb.poll()
    assert track.raw == "abcd" and track.status == "done"  # the finish comes with the last


def test_step_feeds_one_position_then_finishes_then_moves_on(pb: Playback,
                                                             two_requests: Path) -> None:
    items = pb.open(two_requests, play=False)
    first = items[0]
    pb.step()
    assert (first.pos, first.track.raw, first.track.status) == (1, "ab", "generating")
    pb.step(2)
    assert first.pos == 3 and first.track.status == "done"
    pb.step()
    assert pb.index == 1 and items[1].pos == 1


def test_an_unfinished_recorded_request_shows_as_an_error(pb: Playback,
                                                          two_requests: Path) -> None:
    items = pb.open(two_requests, play=False)
    pb.select(1)
    pb.seek(10)
    track = items[1].track
    assert track.raw == "xyz" and track.status == "error"
    assert "ends before" in (track.error or "")


def test_seek_back_restarts_and_counts_the_request_once(pb: Playback,
                                                        two_requests: Path) -> None:
    items = pb.open(two_requests, play=False)
    track = items[0].track
    pb.seek(3)
    assert track.status == "done"
    gen = track.generation
    pb.seek(1)
    assert track.generation == gen + 1 and track.raw == "ab" and track.status == "generating"
    pb.seek(3)
    assert track.raw == "abcd" and track.status == "done"
    totals = pb.metrics.snapshot()["totals"]
    assert totals["requests"] == 1 and totals["finished"] == 1


def test_plain_text_is_one_output(pb: Playback, tmp_path: Path) -> None:
    path = tmp_path / "answer.txt"
    path.write_text(ANSWER, encoding="utf-8")
    pb.set_speed(0.0)
    (item,) = pb.open(path)
    pb.poll()
    assert [t.text for t in item.tokens] == split_text(ANSWER)
    assert item.track.result.reasoning == "Thinking it over."
    assert item.track.result.content == "The answer is 42."


def test_a_damaged_recording_plays_what_precedes(pb: Playback, two_requests: Path,
                                                 caplog) -> None:
    data = two_requests.read_text(encoding="utf-8")
    two_requests.write_text(data + '{"type": "tok', encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="prism"):
        items = pb.open(two_requests, play=False)
    assert [it.track.id for it in items] == ["r1", "r2"]
    assert "truncated" in caplog.text


def test_a_recording_plays_back_its_cache_figures_and_prefix_match(pb: Playback,
                                                                   tmp_path: Path) -> None:
    """Issue 20: what a live request's cache did (slot, disk, computed; where the prompt left
    the best cached prefix) is recorded by the service and shown again by its playback."""
    from engine.backends.base import PrefixMatch
    from engine.chat.packs import resolve_pack
    from engine.chat.request import ChatRequest, Message
    from engine.metrics import Metrics
    from engine.service import Service
    from tests.caching_engine import CachingReplay

    prefix = PrefixMatch(held=9, source="disk", prompt_char=30, cached_text="old",
                         prompt_text="new")
    (tmp_path / "out.txt").write_text("Done.", encoding="utf-8")
    engine = CachingReplay([tmp_path / "out.txt"], lambda prompt: (6, 4, prefix))
    path = tmp_path / "live.jsonl"
    try:
        with Recorder(path, model="m", pack="smollm2") as rec:
            svc = Service(engine, resolve_pack("smollm2", require_model=False),
                          metrics=Metrics(engine), recorder=rec)
            run = svc.submit(ChatRequest(messages=(Message("user", "List the files, please."),)))
            run.wait(5)
    finally:
        engine.close()
    live = run.timings
    assert (live.slot_tokens, live.disk_tokens, live.computed_tokens) == (
        2, 4, live.prompt_tokens - 6)
    (item,) = pb.open(path)
    assert item.track.prefix == prefix  # from the start: it describes the prompt
    pb.set_speed(0.0)
    pb.poll()
    track = item.track
    assert track.status == "done" and track.timings == live and track.prefix == prefix
    assert pb.metrics.snapshot()["totals"]["prompt_tokens_by_source"] == {
        "slot": 2, "disk": 4, "computed": live.computed_tokens}
