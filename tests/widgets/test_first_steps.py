"""widgets/first_steps.py, window_commands.py, actions.py, track_follower.py: the empty window
says what to do, the Help menu lists the keys the actions table declares (and they work), a
request goes to Compose, *Re-run on…* is off for a row it cannot re-run, long
status messages stay whole, and *Follow newest* passes over queued rows."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QKeySequence

from inspector.tracks import Track, TrackStore
from tests.support import DEMO
from tests.widgets.conftest import play_all
from widgets.actions import ACTIONS, shortcut_rows


def test_the_empty_window_says_what_to_do_first(window, qtbot):
    assert window.body.currentWidget() is window.hint
    text = window.hint.text()
    assert "No requests yet" in text and "Server" in text  # no server: says how to start it
    assert "href='compose:'" in text and "href='open:'" in text and "Ctrl+O" in text
    window.set_server("http://127.0.0.1:8421/v1")
    assert "http://127.0.0.1:8421/v1" in window.hint.text()
    window.hint.linkActivated.emit("compose:")
    assert window.tabs.currentWidget() is window.compose
    play_all(window)
    assert window.body.currentWidget() is window.channels


def test_help_lists_every_declared_key_and_the_keys_work(window, qtbot, qapp):
    rows = dict((what, keys) for keys, what in shortcut_rows())
    assert rows["Play / pause"] == "Space" and rows["Step one token"] == "."
    assert rows["Send the composed request"].startswith("Ctrl+Return")
    assert {"Next request", "Previous request", "Quit", "Open recording"} <= rows.keys()
    menus = [a.text() for a in window.menuBar().actions()]
    assert menus[0] == "&File" and menus[-1] == "&Help"
    for spec in ACTIONS:  # each declared action is in its menu, with its keys
        action = window.actions_by_name[spec.name]
        assert [k.toString() for k in action.shortcuts()] == \
            [QKeySequence(k).toString() for k in spec.shortcuts]
        assert action in [m for a in window.menuBar().actions() if a.text() == spec.menu
                          for m in a.menu().actions()]
    # Ctrl+Enter in the message box sends (this window has no engine: the box says so).
    window.tabs.setCurrentWidget(window.compose)
    window.compose.message.setFocus()
    window.activateWindow()
    qapp.processEvents()
    qtbot.keyClick(window.compose.message, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    assert window.compose.status.text() == "No engine to send to."

    # Space plays and pauses the recording; "]" / "[" move between its requests.
    items = window.playback.open(DEMO)
    window.frame()
    assert len(items) == 3 and window.playback.playing
    window.log.table.setFocus()
    qtbot.keyClick(window.log.table, Qt.Key.Key_Space)
    assert not window.playback.playing
    qtbot.keyClick(window.log.table, Qt.Key.Key_BracketRight)
    assert window.playback.index == 1 and window.log.current is items[1].track

    # F1: the shortcuts list, drawn from the same table.
    from widgets.first_steps import ShortcutsDialog

    assert window.findChild(ShortcutsDialog) is None
    window.activateWindow()
    qtbot.keyClick(window, Qt.Key.Key_F1)
    shown = window.findChild(ShortcutsDialog, "shortcuts_dialog")
    assert shown is not None and shown.isVisible()
    # The window's table, then the request list's own keys (Find, next / previous anomaly).
    assert shown.table.rowCount() == len(shortcut_rows()) + 3
    commands = [shown.table.item(i, 1).text() for i in range(shown.table.rowCount())]
    assert commands[-3:] == ["Find requests", "Next anomaly", "Previous anomaly"]
    assert shown.table.item(shown.table.rowCount() - 2, 0).text() == "F8"
    shown.close()


def test_a_request_goes_to_compose_with_its_history(window):
    play_all(window)
    track = window.log.model.track_at(0)  # demo-3: a conversation with a tool result
    window.log.select(track)
    assert window.actions_by_name["to_compose"].isEnabled()
    assert window.to_compose()
    box = window.compose
    assert window.tabs.currentWidget() is box
    req = box.request()
    recorded = track.request["messages"]
    assert [m.role for m in req.messages] == [m["role"] for m in recorded]
    assert [m.content for m in req.messages] == [m["content"] for m in recorded]
    assert len(req.tools) == len(track.request.get("tools") or ())
    assert box.history and "earlier message" in box.history_label.text()
    box.clear_loaded()
    assert [m.role for m in box.request().messages][-1] == "user" and not box.history


def test_rerun_is_off_with_its_reason_for_a_row_it_cannot_rerun(window, tmp_path):
    window.reruns._start = lambda choice, plan: None  # a window with an engine to re-run on
    out = tmp_path / "output.txt"
    out.write_text("<think>plain model output</think>Hello", encoding="utf-8")
    window.playback.set_speed(0.0)
    assert window.open_recording(out)
    window.frame()
    window.frame()
    track = window.log.model.track_at(0)
    window.log.select(track)
    action = window.reruns.action
    assert not action.isEnabled()
    assert "holds no request to send again" in action.toolTip() and track.id in action.toolTip()
    assert not window.actions_by_name["to_compose"].isEnabled()
    play_all(window)  # a recorded request: it can
    window.log.select(window.log.model.track_at(0))
    assert action.isEnabled() and "Send the selected request" in action.toolTip()


def test_a_long_status_message_stays_whole(window, qtbot):
    long = "the re-run on /a/very/long/path/to/some/model.gguf failed: " + "detail " * 60
    window.say(long, error=True)
    msg = window.message
    assert msg.text() == long and msg.toolTip() == long
    assert msg.shown().endswith("…") and len(msg.shown()) < len(long)


class Feed:
    """A source whose tracks the test moves through their states (as a live feed does)."""

    def __init__(self) -> None:
        from engine.metrics import Metrics

        self.metrics = Metrics()
        self.changed: list[Track] = []

    def poll(self, now=None):
        out, self.changed = self.changed, []
        return out

    def sample(self) -> None:
        pass


def test_follow_newest_shows_the_newest_generating_row_not_a_queued_one(qtbot):
    from inspector.playback import Playback
    from widgets.main_window import MainWindow
    from widgets.track_follower import follow_target

    store_feed, store = Feed(), TrackStore()
    win = MainWindow(store, Playback(store), [store_feed])
    win.timer.stop()
    win.chart_timer.stop()
    qtbot.addWidget(win)
    a = Track(id="a", status="generating")
    store_feed.changed = [a]
    win.frame()
    assert win.log.current is a and win.channels.track is a
    b, c = Track(id="b"), Track(id="c")  # queued: nothing to show yet
    store_feed.changed = [b, c]
    win.frame()
    assert win.log.model.track_at(0) is c  # newest first, in the list
    assert win.log.current is a and win.channels.track is a and win.log.follow.isChecked()
    b.status = "generating"
    store_feed.changed = [b]
    win.frame()
    assert win.log.current is b and win.channels.track is b
    assert follow_target([c, b, a]) is b
    b.status, a.status = "done", "done"
    assert follow_target([c, b, a]) is b  # none generating: the newest with output
    assert follow_target([c]) is None
