"""inspector/rerun.py without a window: what a rerun sends (one request from the list, or a
whole recording), the engine choice as `prism rerun`'s options, and the feed that turns the
rerun's runs into tracks of their own, each linked to its original. The "other engine" is a
replayed one; the rerun's thread is played by the test, calling the feed as app/gui.py's does.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from app.rerun import rebuild
from engine.chat.request import ChatRequest, Message, Sampling
from engine.record.compare import compare, side_of
from engine.record.reader import read_session
from inspector.playback import load_items
from inspector.rerun import SOURCE, EngineChoice, RerunFeed, RerunPlan, side_of_track
from inspector.tracks import LiveFeed, TrackStore
from tests.support import DEMO

ASKS = ("Write one sentence about the sea.", "Name three colours.")


def test_an_engine_choice_is_prism_rerun_s_options():
    assert EngineChoice("pack", "smollm2", max_tokens=8).argv() == \
        ["--pack", "smollm2", "--max-tokens", "8"]
    assert EngineChoice("model", "/m/x.gguf", n_ctx=512).argv() == \
        ["--model", "/m/x.gguf", "--n-ctx", "512"]
    assert EngineChoice("upstream", "http://gpu:8000/v1").describe() == \
        "upstream http://gpu:8000/v1"
    assert EngineChoice("model", "/m/x.gguf").describe() == "model x.gguf"
    with pytest.raises(ValueError, match="one of model, pack, upstream"):
        EngineChoice("replay", "x.jsonl")
    with pytest.raises(ValueError, match="say which upstream"):
        EngineChoice("upstream", "  ")


def test_a_plan_of_a_live_request_sends_it_as_it_was(replay_service):
    service = replay_service("The sea is grey.", pack="smollm2")
    store = TrackStore()
    live = LiveFeed(service, store)
    request = ChatRequest(messages=(Message("user", ASKS[0]),), max_tokens=16,
                          sampling=Sampling(temperature=0.7, seed=3), api="gui")
    service.submit(request).wait(5)
    (track,) = live.poll()
    plan = RerunPlan.of_track(track)
    (rec,) = plan.requests
    assert (rec.id, plan.rerun_of, plan.label) == (track.id, "", track.id)
    # Sent again as it was (but for the model, which the other engine names).
    again = rebuild(rec)
    assert (again.messages, again.sampling, again.max_tokens, again.api) == \
        (request.messages, request.sampling, request.max_tokens, "gui")
    assert plan.originals[track.id].text == "The sea is grey." == track.raw
    track.release()  # a row too old to keep its document holds nothing to send
    with pytest.raises(ValueError, match="holds no request"):
        RerunPlan.of_track(track)
    live.close()


def test_a_plan_of_a_recording_sends_every_request(tmp_path: Path):
    plan = RerunPlan.of_recording(DEMO)
    session = read_session(DEMO)
    assert [r.id for r in plan.requests] == [r.id for r in session.requests]
    assert plan.rerun_of == str(DEMO.resolve()) and plan.label == DEMO.name
    assert {k: s.text for k, s in plan.originals.items()} == \
        {r.id: side_of(r).text for r in session.requests}
    text = tmp_path / "out.txt"
    text.write_text("just an output", encoding="utf-8")
    with pytest.raises(ValueError, match="not a recording"):
        RerunPlan.of_recording(text)


def test_the_feed_links_each_rerun_track_to_its_original(replay_service):
    plan = RerunPlan.of_recording(DEMO)
    store = TrackStore()
    feed = RerunFeed(plan, store, EngineChoice("pack", "smollm2"))
    assert feed.poll() == [] and feed.metrics is None and not feed.complete
    other = replay_service("Another answer.", "A second one.", "And a third.", pack="smollm2")
    # The rerun's thread, as app/gui.py runs it: attach, then announce and send each request.
    feed.attach(other)
    assert other.engine.name in feed.message and feed.metrics is other.metrics
    runs = []
    for rec in plan.requests:
        request = rebuild(rec)
        feed.expect(rec, request)
        runs.append(other.submit(request))
        feed.sent(runs[-1])
        runs[-1].wait(5)
    assert feed.current is runs[-1]
    feed.done("re-run done")
    assert not feed.complete  # done there, not yet here: the updates wait in the deque
    changed = feed.poll()
    assert feed.complete and changed == feed.tracks
    assert [t.id for t in feed.tracks] == [r.id for r in runs]
    assert [t.counterpart for t in feed.tracks] == [r.id for r in plan.requests]
    assert {t.source for t in feed.tracks} == {SOURCE}
    assert [t.raw for t in feed.tracks] == ["Another answer.", "A second one.", "And a third."]
    # Each pair: the recorded original against the rerun's own track, most changed first.
    for t in feed.tracks:
        assert feed.original(t) is plan.originals[t.counterpart]
    want = sorted((compare(plan.originals[t.counterpart], side_of_track(t, f"now:{t.id}"))
                   for t in feed.tracks), key=lambda c: -c.change)
    assert feed.pairs() == want
    # A track of another source is none of its business.
    (played,) = load_items(DEMO)[:1]
    assert feed.original(played.track) is None
    feed.close()


def test_a_failed_start_is_said_and_ends_the_rerun():
    feed = RerunFeed(RerunPlan.of_recording(DEMO), TrackStore(), EngineChoice("pack", "nope"))
    feed.fail("cannot re-run on pack nope: no such pack")
    assert feed.complete and feed.error == feed.message and feed.pairs() == []


@pytest.mark.parametrize("records", [True, False], ids=["recorded", "unrecorded"])
def test_a_rerun_longer_than_the_documents_kept_pairs_every_side_whole(replay_service,
                                                                       records):
    """40 requests re-run: the store lets the first rerun tracks' documents go (it keeps 32),
    yet each pair compares the whole rerun reply: read back from the rerun's recording, or,
    where the window does not record, from the runs. Recorded, the pairs are File → Compare
    recordings' on the same two files."""
    from engine.record.compare import compare_sessions

    n = 40
    first = replay_service(*(f"Original answer {i}." for i in range(n)), pack="smollm2",
                           record=True)
    for i in range(n):
        first.submit(ChatRequest(messages=(Message("user", f"ask {i}"),))).wait(5)
    first.recorder.close()
    plan = RerunPlan.of_recording(first.recorder.path)
    store = TrackStore()
    feed = RerunFeed(plan, store, EngineChoice("pack", "smollm2"))
    other = replay_service(*(f"Rerun reply {i}, longer." for i in range(n)), pack="smollm2",
                           record=records)
    feed.attach(other)
    for rec in plan.requests:
        request = rebuild(rec)
        feed.expect(rec, request)
        feed.sent(other.submit(request))
        feed.current.wait(5)
        feed.poll()  # as the window's frames do: old documents are let go meanwhile
    feed.done("re-run done")
    feed.poll()
    assert feed.complete and len(feed.tracks) == n
    assert sum(t.released for t in feed.tracks) == n - store.max_documents
    found = feed.pairs()
    assert len(found) == n
    want = {f"Original answer {i}.": f"Rerun reply {i}, longer." for i in range(n)}
    for c in found:
        assert c.b.text == want[c.a.text] and c.b.tokens and c.b.result["content"] == c.b.text
        assert c.b.finish == "stop" and c.a.id == next(
            t.counterpart for t in feed.tracks if t.id == c.b.id)
    if records:
        other.recorder.close()
        files = compare_sessions(read_session(first.recorder.path),
                                 read_session(other.recorder.path), ("was", "now"))

        def seen(cs):
            return sorted((c.a.label, c.b.label, c.a.text, c.b.text, c.change, c.changed(),
                           c.a.result == c.b.result) for c in cs)

        assert seen(found) == seen(files)
    feed.close()
