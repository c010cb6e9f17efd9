"""The window's Request → Re-run on… (app/gui.py's rerun thread, widgets/reruns.py and
widgets/rerun_dialog.py, inspector/rerun.py), on a real window and the real default model.

Cross-module on purpose: a recording (two requests, replayed outputs) is opened in the window,
a played request is right-clicked, the dialog sends its whole recording to the default model's
pack with a small cap, and the rerun runs off the GUI thread through `prism rerun`'s own loop.
Its two requests must arrive as rows of their own (Source "rerun"), each filled with its own
tokens and linked to the original it re-ran; the Compare tab then holds each pair, *Compare
with its original* opens one, and the rerun's recording names its original and each
counterpart, as `prism rerun`'s does. Frames are drawn by the test between real waits.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before anything creates a QApplication

import pytest

from engine.chat.request import ChatRequest, Message, Sampling
from engine.record.compare import compare, parting
from engine.record.reader import read_session
from inspector.rerun import SOURCE

pytestmark = pytest.mark.model

OUTPUTS = ("The sea is wide and grey.", "Red, green and blue.")
ASKS = ("Write one sentence about the sea.", "Name three colours.")
SHOT = Path(os.environ.get("PRISM_RERUN_SHOT", "/tmp/rerun.png"))


def run_frames(qtbot, win, until, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while not until():
        assert time.monotonic() < deadline, "the rerun did not finish"
        qtbot.wait(25)
        win.frame()
    win.frame()


@pytest.fixture
def original(replay_service) -> Path:
    """A recording of two requests, as the window's engine recorded them (replayed outputs)."""
    service = replay_service(*OUTPUTS, pack="smollm2", record=True)
    for ask in ASKS:
        service.submit(ChatRequest(messages=(Message("user", ask),), max_tokens=32,
                                   sampling=Sampling(temperature=0.0, seed=1))).wait(10)
    service.recorder.close()
    return service.recorder.path


def test_rerun_on_streams_into_tracks_of_its_own_and_the_pairs_compare(
        qtbot, replay_service, original, default_model, tmp_path, monkeypatch):
    from PySide6.QtWidgets import QApplication

    from app.gui import Inspector
    from widgets.theme import apply_dark_palette

    app = QApplication.instance()
    palette, style = app.palette(), app.style().name()
    apply_dark_palette(app)  # as `prism` runs it, for the screenshot
    # The window records, so its rerun does too: into this test's recordings folder.
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    inspector = Inspector(replay_service("unused", pack="smollm2", record=True), port=0)
    win = inspector.window
    win.timer.stop()  # the test draws the frames
    win.chart_timer.stop()
    inspector._status.stop()
    qtbot.addWidget(win)
    win.show()
    try:
        win.playback.set_speed(0.0)
        assert win.open_recording(original)
        run_frames(qtbot, win, lambda: win.playback.finished)
        log = win.log
        played = [log.model.track_at(r) for r in range(log.model.rowCount())]
        assert [t.origin for t in played] == [original.name] * 2
        first = next(t for t in played if t.raw == OUTPUTS[0])

        # Right-click the first request: its context menu holds Re-run on…
        log.select(first)
        menu = {a.text(): a for a in log.table.actions()}
        menu["&Re-run on…"].trigger()
        dialog = win.reruns.dialog
        assert dialog is not None and dialog.isVisible() and dialog.whole.isEnabled()
        assert "2 requests" in dialog.whole.text()
        dialog.whole.setChecked(True)
        dialog.pack_btn.setChecked(True)
        dialog.pack.setCurrentText("smollm2")
        dialog.max_tokens.setValue(8)
        assert dialog.ok.isEnabled()
        dialog.ok.click()
        (feed,) = win.reruns.feeds
        assert feed in win.sources and feed.plan.rerun_of == str(original.resolve())
        run_frames(qtbot, win, lambda: feed.complete)
        assert feed.error is None, feed.message

        # Two rows of their own, newest first, each filled by the default model.
        reruns = [log.model.track_at(r) for r in range(2)]
        assert sorted(reruns, key=lambda t: t.created) == feed.tracks
        assert {t.source for t in reruns} == {SOURCE}
        assert {t.counterpart for t in reruns} == {t.id for t in played}
        for t in reruns:
            assert t.status == "done" and t not in played
            assert 1 <= len(t.tokens) <= 8 and t.raw == "".join(x.text for x in t.tokens)
            assert t.model == default_model.stem  # the other engine answers as itself
        assert "2/2 requests" in win.message.text() and "Compare tab" in win.message.text()

        # The Compare tab holds both pairs; each compares the original's tokens with the
        # rerun's own.
        view = win.compare
        assert len(view.comparisons) == 2
        assert {(c.a.id, c.b.id) for c in view.comparisons} == \
            {(t.counterpart, t.id) for t in reruns}
        again = next(t for t in reruns if t.counterpart == first.id)
        log.select(again)
        assert win.reruns.compare_with_original()
        c = view.comparison
        assert win.tabs.currentWidget() is view
        assert (c.a.id, c.b.id) == (first.id, again.id)
        assert (c.a.text, c.b.text) == (OUTPUTS[0], again.raw)
        # Where they part, from the tokens themselves (the played row's, the rerun row's).
        want = parting(first.tokens, again.tokens)
        assert want is not None  # replayed text against a sampled reply
        assert (c.parting.index_a, c.parting.index_b, c.parting.offset) == \
            (want.index_a, want.index_b, want.offset)
        assert c.parting.token_b == want.token_b
        assert c.parting.token_a.text == want.token_a.text
        assert c == compare(c.a, c.b) and view.summary.text() == c.summary()

        # Its recording names what it re-ran, as `prism rerun`'s does.
        (path,) = (tmp_path / "data" / "prism" / "sessions").glob("*.jsonl")
        written = read_session(path)
        assert written.rerun_of == str(original.resolve())
        assert [r.counterpart for r in written.requests] == \
            [r.id for r in read_session(original).requests]
        assert [r.id for r in written.requests] == [t.id for t in feed.tracks]

        win.resize(1560, 980)
        qtbot.wait(50)
        SHOT.parent.mkdir(parents=True, exist_ok=True)
        assert win.grab().save(str(SHOT))
    finally:
        asyncio.run(inspector.close())
        win.close()
        app.setStyle(style)
        app.setPalette(palette)
