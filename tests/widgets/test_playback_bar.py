"""widgets/playback_bar.py over inspector/playback.py: play, pause, step, speed, seek, prev/next,
driven through the bar's own buttons on a fake clock."""

from __future__ import annotations

from PySide6.QtCore import Qt

from tests.widgets.conftest import DEMO


def due(tokens, seconds: float) -> int:
    return sum(1 for t in tokens if t.t <= seconds)


def click(qtbot, button) -> None:
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)


def test_play_pause_step_speed_seek(window, qtbot, clock):
    bar, pb = window.bar, window.playback
    assert not bar.play_btn.isEnabled()
    assert window.open_recording(DEMO, play=False)
    assert bar.play_btn.isEnabled() and bar.position.text() == "request 1/3 · 0/81 tokens"
    click(qtbot, bar.next_btn)
    click(qtbot, bar.next_btn)
    assert pb.index == 2 and bar.position.text() == "request 3/3 · 0/119 tokens"
    click(qtbot, bar.prev_btn)
    click(qtbot, bar.prev_btn)
    assert pb.index == 0
    item = pb.current
    toks = item.tokens

    # Play at 1×: what is due after 0.5 s of the recording, and no more.
    click(qtbot, bar.play_btn)
    assert pb.playing and bar.play_btn.text() == "Pause"
    clock.advance(0.5)
    window.frame()
    assert item.pos == due(toks, 0.5) > 0
    assert len(item.track.tokens) == item.pos

    # Pause: time passes, nothing comes.
    click(qtbot, bar.play_btn)
    assert not pb.playing and bar.play_btn.text() == "Play"
    before = item.pos
    clock.advance(5.0)
    window.frame()
    assert item.pos == before

    # Step: exactly one token, and the panes show it.
    click(qtbot, bar.step_btn)
    window.frame()
    assert item.pos == before + 1
    assert window.raw.text() + item.track.held == "".join(t.text for t in toks[: before + 1])

    # 10×: 0.1 s of wall time is a second of the recording.
    bar.speed.setCurrentIndex(bar.speed.findData(10.0))
    assert pb.speed == 10.0
    click(qtbot, bar.play_btn)
    clock.advance(0.1)
    window.frame()
    recorded_now = toks[before].t + 1.0
    assert item.pos == due(toks, recorded_now)
    click(qtbot, bar.play_btn)  # pause

    # Seek back to 5 tokens: the request restarts and the panes redraw from nothing.
    gen = item.track.generation
    bar.slider.setValue(5)
    window.frame()
    assert item.pos == 5 and item.track.generation == gen + 1
    assert window.raw.text() + item.track.held == "".join(t.text for t in toks[:5])
    assert window.raw.strip._n == 5
    # Seek forward past the end: finished, the finish shows in the list.
    bar.slider.setValue(bar.slider.maximum())
    window.frame()
    assert item.track.status == "done" and bar.position.text() == "request 1/3 · done"
    assert window.channels.text("content") == item.track.result.content

    # Instant plays the rest of the session within a frame.
    bar.speed.setCurrentIndex(bar.speed.findData(0.0))
    click(qtbot, bar.play_btn)
    window.frame()
    assert pb.finished and not pb.playing
    assert [it.track.status for it in pb.items] == ["done"] * 3
    assert bar.play_btn.text() == "Play"


def test_step_crosses_into_the_next_request(window):
    pb = window.playback
    pb.open(DEMO, play=False)
    pb.select(0)
    pb.seek(len(pb.current.tokens))  # every token fed, not yet finished
    assert pb.current.track.status == "generating"
    pb.step()
    assert pb.index == 0 and pb.current.track.status == "done"
    pb.step()
    assert pb.index == 1 and pb.current.pos == 1
    window.frame()
    assert window.log.current is pb.items[1].track  # follows the newest request


def test_play_at_the_end_starts_over(window, clock):
    pb = window.playback
    pb.set_speed(0.0)
    pb.open(DEMO)
    window.frame()
    assert pb.finished
    pb.set_speed(1.0)
    pb.play()
    assert pb.index == 0 and pb.current.pos == 0 and pb.playing
    clock.advance(0.4)
    window.frame()
    assert 0 < pb.current.pos < len(pb.current.tokens)


def test_a_bad_file_is_reported_not_raised(window, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"format": "prism-session", "version": 99}\n', encoding="utf-8")
    assert not window.open_recording(bad)
    assert "Cannot open" in window.message.text()
    assert not window.open_recording(tmp_path / "missing.jsonl")


def test_dropping_a_file_opens_it(window):
    from PySide6.QtCore import QMimeData, QPointF, QUrl
    from PySide6.QtGui import QDropEvent

    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(DEMO))])
    event = QDropEvent(QPointF(10, 10), Qt.DropAction.CopyAction, mime,
                       Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
    window.dropEvent(event)
    assert len(window.playback.items) == 3 and window.playback.playing
    assert window.message.text() == "Opened demo.jsonl: 3 request(s)"
