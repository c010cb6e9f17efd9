"""inspector/recall.py through the store: a row let go reads its document back from its
recording when it is selected, equal to the live run and to a fresh replay of the recording;
memory stays bounded; a recording of the live session is a source of its own."""

from __future__ import annotations

from engine.chat.request import ChatRequest, Message
from engine.parse.events import merge
from engine.record.reader import read_session
from engine.record.recording import request_to_dict
from inspector.playback import Playback
from inspector.recall import recorded_side
from inspector.tracks import LiveFeed, TrackStore

N = 70  # the middle row is let go too (the store keeps 32 documents)


def output(i: int) -> str:
    # Reasoning, a stray end tag in every fifth (an anomaly), content.
    stray = "</think> " if i % 5 == 0 else ""
    return f"Thinking about {i}, step by step.\n</think>\n\n{stray}Answer {i}: " + \
        " ".join(f"w{i}.{k}" for k in range(i % 7 + 3))


def key(events):
    return [(e.kind, e.text, e.span, e.anomaly) for e in merge(events)]


def serve(replay_service, n: int = N):
    """n requests through a recording service into a live feed; the runs, in order."""
    svc = replay_service(*(output(i) for i in range(n)), record=True)
    store = TrackStore()  # 32 documents, as the window keeps
    feed = LiveFeed(svc, store)
    runs = []
    for i in range(n):
        runs.append(svc.submit(ChatRequest(messages=(Message("user", f"question {i}?"),),
                                           api="gui")))
        runs[-1].wait(5)
        feed.poll()
    feed.poll()
    return svc, store, feed, runs


def test_a_released_row_reads_its_document_back_when_selected(replay_service):
    svc, store, feed, runs = serve(replay_service)
    tracks = [store.get(r.id) for r in runs]
    assert all(t.status == "done" for t in tracks)
    assert sum(t.released for t in tracks) == N - store.max_documents
    assert tracks[0].released and tracks[0].raw == "" and tracks[0].prompt == ""

    # A fresh replay of the recording, every request kept: the oracle.
    fresh = Playback(TrackStore(max_documents=N))
    fresh.set_speed(0.0)
    fresh.open(svc.recorder.path)
    fresh.poll()
    assert fresh.finished
    replayed = {it.track.id: it.track for it in fresh.items}

    for i in (0, N // 2, N - 1):
        t, run = tracks[i], runs[i]
        store.protected = t  # what the window does when a row is selected
        assert not t.released
        assert t.raw == output(i) == "".join(tok.text for tok in run.tokens)
        assert [tok.text for tok in t.tokens] == [tok.text for tok in run.tokens]
        assert t.events == run.events  # what the live run showed
        assert t.result == run.result and t.prompt == run.prompt
        assert request_to_dict(t.request) == replayed[t.id].request
        assert t.anomalies == replayed[t.id].anomalies
        assert t.anomalies["stray_think_end"] == (1 if i % 5 == 0 else 0)
        r = replayed[t.id]
        assert key(t.events) == key(r.events) and t.result == r.result
        assert (t.prompt, t.raw, t.state) == (r.prompt, r.raw, r.state)
        assert t.fixture() == r.fixture()

    # Bounded: a row read back counts among the 32 documents held, as the newest.
    assert sum(not t.released for t in store) == store.max_documents
    store.protected = tracks[1]
    assert not tracks[1].released
    assert sum(not t.released for t in store) == store.max_documents
    feed.close()


def test_a_released_row_compares_as_its_recording_reads(replay_service):
    svc, store, feed, runs = serve(replay_service, 34)
    old = store.get(runs[0].id)
    assert old.released
    side = recorded_side(old, "was")
    whole = read_session(svc.recorder.path).requests[0]
    assert side.id == old.id and "".join(t.text for t in side.tokens) == output(0)
    assert side.result == whole.result and side.finish == "stop"
    feed.close()


def test_the_live_sessions_recording_plays_as_rows_of_its_own(replay_service):
    svc, store, feed, runs = serve(replay_service, 3)
    pb = Playback(store)
    pb.set_speed(0.0)
    pb.open(svc.recorder.path)
    pb.poll()
    name = svc.recorder.path.name
    assert len(store) == 6  # three live rows, three played ones: ids repeat across sources
    for run in runs:
        live, played = store.get(run.id, "live"), store.get(run.id, name)
        assert live is not played and played.raw == live.raw != ""
    pb.open(svc.recorder.path)  # the same file again: a source of its own too
    pb.poll()
    assert len(store) == 9 and store.get(runs[0].id, f"{name} (2)") is not None
    feed.close()
