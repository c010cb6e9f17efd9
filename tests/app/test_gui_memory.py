"""The recording is the window's memory (inspector/recall.py, engine/record/index.py, through
app/gui.py's window): a real window, offscreen, serving a session longer than the 32 documents
it keeps. Old rows, selected, show what a fresh replay of the recording shows; the window's own
recording opened plays as rows of its own; a whole-recording rerun of more than 32 requests on
the real default model compares pair by pair with no empty side, as File → Compare recordings
does; a damaged or binary file is named once, with the line.

Cross-module on purpose (the store, the feed, the playback, the views, the rerun). Frames are
drawn by the test between real waits; the session goes through the window's own service, as
the server and Compose send it.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before anything creates a QApplication

import pytest

from engine.chat.request import ChatRequest, Message
from engine.record.reader import read_session

CALL_ID = re.compile(r"call_[0-9a-f]{8}\d+")
N = 300  # an agent session: far past the 32 documents kept (rows 1, 150 and 300 read)
TOOL = {"type": "function", "function": {"name": "run", "parameters": {
    "type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}}


def output(i: int) -> str:
    """An agent's turn: reasoning, then content, a call in every third, a stray tag in every
    fifth."""
    text = f"Let me think about step {i}.\n</think>\n\n"
    if i % 5 == 0:
        text += "</think> "
    text += f"Step {i}: " + " ".join(f"w{i}.{k}" for k in range(i % 7 + 2))
    if i % 3 == 0:
        text += f"\n<tool_call>\n<function=run>\n<parameter=cmd>\nls {i}\n</parameter>\n" \
                "</function>\n</tool_call>"
    return text


def frames(qtbot, win, until, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while not until():
        assert time.monotonic() < deadline, "timed out waiting for the window"
        qtbot.wait(10)
        win.frame()
    win.frame()


def shown(win, track) -> dict:
    """Everything the window draws of the selected request."""
    from widgets.request_log import verdict

    if win.log.current is track:  # clicked afresh, as a user picks a row
        win.log.select(next(t for t in win.store if t is not track))
    win.log.select(track)
    assert win.log.current is track
    v = verdict(track)
    return {
        **{f"pane {n}": win.channels.text(n) for n in win.channels.panes},
        **{f"title {n}": t.text() for n, t in win.channels.titles.items()},
        "raw": win.raw.text(), "strip": win.raw.strip.toPlainText(),
        "tokens": win.raw.label.text(), "prompt": win.prompt.pane.toPlainText(),
        "prompt title": win.prompt.label.text(),
        "verdict": None if v is None else (v.kind, v.detail, v.span),
    }


def anonymous(seen: dict) -> dict:
    return {k: CALL_ID.sub("call_…", v) if isinstance(v, str) else v for k, v in seen.items()}


def window(qtbot, service):
    from app.gui import Inspector

    inspector = Inspector(service, port=0)
    win = inspector.window
    win.timer.stop()  # the test draws the frames
    win.chart_timer.stop()
    inspector._status.stop()
    qtbot.addWidget(win)
    win.show()
    return inspector, win


def replayed(qtbot, path: Path, source=None) -> dict:
    """A fresh replay of a recording in a window of its own that keeps every document: each
    request id → what that window shows of it (the Prompt view counting with `source`, the
    window's own, as `prism --replay` wires it)."""
    from inspector.playback import Playback
    from inspector.tracks import TrackStore
    from widgets.main_window import MainWindow

    store = TrackStore(max_documents=10_000)
    pb = Playback(store)
    win = MainWindow(store, pb, [pb])
    win.prompt.set_context_source(source)
    win.timer.stop()
    win.chart_timer.stop()
    qtbot.addWidget(win)
    win.show()
    pb.set_speed(0.0)
    assert win.open_recording(path)
    frames(qtbot, win, lambda: pb.finished)
    out = {t.id: shown(win, t) for t in store}
    win.close()
    return out


@pytest.fixture
def session(qtbot, replay_service):
    """A window whose service recorded N requests, served one after another with frames
    between them, as a session arrives."""
    service = replay_service(*(output(i) for i in range(N)), record=True)
    inspector, win = window(qtbot, service)
    runs = []
    for i in range(N):
        runs.append(service.submit(ChatRequest(messages=(Message("user", f"Do step {i}."),),
                                               tools=(TOOL,), api="gui")))
        runs[-1].wait(10)
        win.frame()
    frames(qtbot, win, lambda: all(t.status == "done" for t in win.store)
           and len(win.store) == N)
    yield inspector, win, runs
    asyncio.run(inspector.close())
    win.close()


def test_old_rows_show_what_a_fresh_replay_of_the_recording_shows(qtbot, session):
    inspector, win, runs = session
    tracks = [win.store.get(r.id, "live") for r in runs]
    assert sum(t.released for t in tracks) == N - win.store.max_documents
    want = replayed(qtbot, inspector.service.recorder.path, win.prompt.source)
    for i in (0, N // 2, N - 1):
        t = tracks[i]
        if i < N - win.store.max_documents:
            assert t.released  # let go: read back when selected
        got = shown(win, t)
        # Call ids are drawn at random per reading: the row read back shows the live run's
        # (its client got those), a fresh replay its own.
        for call in runs[i].result.tool_calls:
            assert call.id in got["pane call"]
        assert anonymous(got) == anonymous(want[t.id]), i
        assert got["raw"] == output(i) and str(len(runs[i].tokens)) in got["tokens"]
        result = runs[i].result  # the live run's (a stray tag shows in the pane, marked)
        assert result.content.strip() and result.content.strip() in got["pane content"]
        assert got["pane reasoning"].strip() == result.reasoning.strip() != ""
        assert "released" not in got["tokens"] + got["prompt title"]
        assert f"Do step {i}." in got["prompt"]
        assert got["verdict"] is not None
    # Memory stays bounded: the rows read back count among the 32 documents held.
    assert sum(not t.released for t in win.store) == win.store.max_documents


def test_the_windows_own_recording_plays_as_rows_of_its_own(qtbot, session):
    inspector, win, runs = session
    path = inspector.service.recorder.path
    win.playback.set_speed(0.0)
    assert win.open_recording(path)
    frames(qtbot, win, lambda: win.playback.finished)
    model = win.log.model
    assert model.rowCount() == 2 * N
    played = [model.track_at(r) for r in range(N)]  # newest first: the played ones
    assert {t.origin for t in played} == {path.name}
    assert sorted(t.id for t in played) == sorted(r.id for r in runs)
    # A played row and the live row of the same id are two rows showing the same request,
    # read back from the one recording where they were let go.
    for rid in (runs[1].id, runs[-1].id):
        live, again = win.store.get(rid, "live"), win.store.get(rid, path.name)
        assert live is not again and live.released
        assert shown(win, again) == shown(win, live)
        assert win.channels.text("content") and win.log.current is live


def test_a_damaged_or_binary_file_is_named_once_with_the_line(qtbot, replay_service, tmp_path):
    inspector, win = window(qtbot, replay_service("unused"))
    try:
        damaged = tmp_path / "damaged.jsonl"
        damaged.write_text('{"format": "prism-session", "version": 1}\n{"type": "request"}\n',
                           encoding="utf-8")
        assert not win.open_recording(damaged)
        said = win.message.text()
        assert said.count("damaged.jsonl") == 1 and "line 2" in said, said
        binary = tmp_path / "weights.bin"
        binary.write_bytes(bytes(range(256)) * 4)
        assert not win.open_recording(binary)
        said = win.message.text()
        assert said.count("weights.bin") == 1, said
        assert "neither a Prism recording nor UTF-8 text" in said and "codec" not in said
        assert not win.open_recording(tmp_path / "missing.jsonl")
        assert win.message.text().count("missing.jsonl") == 1
    finally:
        asyncio.run(inspector.close())
        win.close()


@pytest.mark.model
def test_a_rerun_of_more_than_32_requests_compares_pair_by_pair(
        qtbot, replay_service, default_model, tmp_path, monkeypatch):
    from engine.record.compare import side_of
    from inspector.rerun import EngineChoice, RerunPlan

    n = 34  # past the 32 documents kept
    first = replay_service(*(f"Answer number {i}." for i in range(n)), pack="smollm2",
                           record=True)
    for i in range(n):
        first.submit(ChatRequest(messages=(Message("user", f"Say {i}."),))).wait(10)
    first.recorder.close()
    original = first.recorder.path
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))  # the rerun's recording
    inspector, win = window(qtbot, replay_service("unused", pack="smollm2", record=True))
    try:
        win.playback.set_speed(0.0)
        assert win.open_recording(original)
        frames(qtbot, win, lambda: win.playback.finished)
        feed = win.reruns.start(EngineChoice("pack", "smollm2", max_tokens=3),
                                RerunPlan.of_recording(original))
        frames(qtbot, win, lambda: feed.complete)
        assert feed.error is None, feed.message
        assert len(feed.tracks) == n and sum(t.released for t in feed.tracks) > 0
        found = win.compare.comparisons
        assert len(found) == n
        recorded = {r.id: r for r in read_session(original).requests}
        for c in found:
            assert c.a == side_of(recorded[c.a.id], f"was:{c.a.id}")
            assert c.b.tokens and 1 <= len(c.b.tokens) <= 3 and c.b.result, c.b.id
        # File → Compare recordings on the same two files: the same pairs, the same order.
        (rerun_path,) = (tmp_path / "data" / "prism" / "sessions").glob("*.jsonl")
        assert win.compare_recordings(rerun_path)
        files = win.compare.comparisons

        def seen(cs):
            return [(c.a.label, c.b.label, c.a.text, c.b.text, c.change, c.changed())
                    for c in cs]

        assert sorted(seen(found)) == sorted(seen(files))
        assert [c.change for c in found] == [c.change for c in files]
    finally:
        asyncio.run(inspector.close())
        win.close()
