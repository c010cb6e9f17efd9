"""widgets/ledger_view.py in a real window: the ledger of the open recordings, grouped as
chosen, and the request list's "why it stopped" column, whose click selects the deciding
event in the raw view (issue 21, items 3 and 4)."""

from __future__ import annotations

from PySide6.QtCore import Qt

from engine.record import verdict as v
from engine.record.ledger import ledger, read_replies, table
from tests.engine.record.test_ledger import CASES, record
from widgets.request_log import VERDICT, VERDICT_COL


def test_the_ledger_of_the_open_recordings(window, tmp_path, qtbot):
    first = record(tmp_path, "first", CASES[:6])
    second = record(tmp_path, "second", CASES[6:])
    assert window.open_recording(first, play=False)
    assert window.open_recording(second, play=False)
    window.ledger_action.trigger()  # View → Ledger of open recordings
    assert window.ledger_dock.isVisible()
    view = window.ledger
    assert view.cell("replies") == str(len(CASES))
    # the same figures `prism stats` prints, from the same files
    (expected,) = [cells for label, cells in table(ledger(read_replies([first, second])))
                   if label == "unknown tool /1000"]
    assert view.cell("unknown tool /1000") == expected[0] == f"{1000 / len(CASES):.1f}"
    assert view.cell("verdict: call written but dropped") == "2"
    view.by.setCurrentText("family")
    assert view.table.columnCount() == 1 and view.cell("family") == "qwen-xml"
    view.by.setCurrentText("every key")
    view.resize(640, 760)
    view.grab().save("/tmp/ledger.png")


def test_why_it_stopped_is_a_column_and_a_click_shows_the_event(window, tmp_path, qtbot):
    path = record(tmp_path, "played", CASES[:7])
    pb = window.playback
    pb.set_speed(0.0)
    assert window.open_recording(path, play=False)
    pb.select(0)
    pb.play()
    window.frame()
    assert pb.finished
    model = window.log.model
    labels = [model.index(r, VERDICT_COL).data() for r in range(model.rowCount())]
    # newest first; played as recorded, so the verdicts are the known ones
    assert labels == [v.LABELS[c[3]] for c in reversed(CASES[:7])]
    row = labels.index(v.LABELS[v.CALL_FROM_REASONING])
    index = model.index(row, VERDICT_COL)
    verdict = index.data(VERDICT)
    track = model.track_at(row)
    rect = window.log.table.visualRect(index)
    qtbot.mouseClick(window.log.table.viewport(), Qt.MouseButton.LeftButton,
                     pos=rect.center())
    assert window.log.current is track
    assert window.tabs.currentWidget() is window.raw
    a, b = verdict.span
    # Qt writes a selection's line breaks as U+2029
    selected = window.raw.raw.textCursor().selectedText().replace("\u2029", "\n")
    assert selected == track.raw[a:b]
    assert "</tool_call>" in track.raw[a:b]


def test_a_request_the_template_refused_shows_why_live_and_played(qtbot, replay_service,
                                                                   clock, window):
    from engine.chat.request import ChatRequest, Message
    from engine.chat.template import TemplateError
    from inspector.playback import Playback
    from inspector.tracks import LiveFeed, TrackStore
    from tests.engine.record.test_ledger import TOOLS
    from widgets.main_window import MainWindow

    # Llama 3's template puts the tools in the first user message: with none, it raises.
    service = replay_service("never sent", pack="llama3-json", record=True)
    store = TrackStore()
    feed, playback = LiveFeed(service, store), Playback(store, clock=clock)
    live = MainWindow(store, playback, [feed, playback], submit=service.submit)
    live.timer.stop()
    qtbot.addWidget(live)
    refused = ChatRequest(messages=(Message("system", "You call tools."),), tools=TOOLS)
    try:
        service.submit(refused)
    except TemplateError as e:
        rid = e.request_id
    live.frame()
    model = live.log.model
    assert model.rowCount() == 1 and model.track_at(0).id == rid
    assert model.index(0, VERDICT_COL).data() == v.LABELS[v.TEMPLATE_REFUSED] == \
        "refused by the template"
    assert "Llama 3 puts tools" in model.index(0, VERDICT_COL).data(Qt.ItemDataRole.ToolTipRole)
    feed.close()
    # Its recording says the same when played (in another window), and in the ledger.
    service.recorder.close()
    window.playback.set_speed(0.0)
    assert window.open_recording(service.recorder.path)
    window.frame()
    (played,) = window.playback.items
    model = window.log.model
    assert model.rowCount() == 1 and model.track_at(0) is played.track
    assert played.track.id == rid and played.track.status == "error"
    assert model.index(0, VERDICT_COL).data() == "refused by the template"
    window.ledger_action.trigger()
    assert window.ledger.cell("verdict: refused by the template") == "1"


def test_the_ledger_counts_the_window_s_own_requests_and_a_cell_filters_the_list(
        qtbot, replay_service, clock, tmp_path):
    """Right after the window served requests live, the ledger counts them (not "0 replies in
    0 file(s)"), next to an open recording; a click on a count filters the request list to
    the requests it counts."""
    from engine.chat.request import ChatRequest, Message
    from inspector.playback import Playback
    from inspector.tracks import LiveFeed, TrackStore
    from tests.engine.record.test_ledger import TOOLS
    from widgets.main_window import MainWindow

    served = CASES[:6] * 7  # 42 requests: more than the store keeps text for
    service = replay_service(*[c[0] for c in served])
    store = TrackStore()
    feed, playback = LiveFeed(service, store), Playback(store, clock=clock)
    live = MainWindow(store, playback, [feed, playback], submit=service.submit)
    live.timer.stop()
    qtbot.addWidget(live)
    live.show()
    for text, kw, _anomalies, _verdict in served:
        service.submit(ChatRequest(messages=(Message("user", f"weather? {text[:8]}"),),
                                   tools=TOOLS, **kw)).wait(5)
        live.frame()  # the window sees each finish, as its frame timer does
    feed.close()
    assert live.log.model.total == 42 and any(t.released for t in store)
    live.open_recording(record(tmp_path, "opened", CASES[6:]), play=False)
    live.ledger_action.trigger()
    view = live.ledger
    groups = range(view.table.columnCount())
    assert sum(int(view.cell("replies", c)) for c in groups) == 42 + len(CASES[6:])
    assert "42 live" in view.note.text() and "5 in 1 file(s)" in view.note.text()
    # the window's own requests are a group of their own (engine "live (this window)")
    own = next(c for c in groups if view.cell("engine", c) == "live (this window)")
    assert view.cell("replies", own) == "42"
    assert view.cell("verdict: call left unfinished", own) == "7"
    # A click on a count: the list shows the requests it counts.
    row = next(r for r in range(view.table.rowCount())
               if view.table.verticalHeaderItem(r).text() == "unfinished call /1000")
    rect = view.table.visualRect(view.table.model().index(row, own))
    qtbot.mouseClick(view.table.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    log = live.log
    assert log.bar.text.startswith("~anomaly ^unfinished_call$ & ~id ")  # its group's
    shown = [log.model.track_at(r) for r in range(log.model.rowCount())]
    assert len(shown) == 7 and all(t.anomalies["unfinished_call"] for t in shown)
    assert sum(1 for t in shown if t.released) == 2  # requests 4 and 10: found all the same
