"""widgets/request_log.py: a request's own notes (its tools were not shown to the model) are a
badge beside the anomalies, with a tooltip saying why (issue 9, item 4); the Slot column and
the State column follow a request from waiting to its slot to done (issue 13)."""

from __future__ import annotations

import time

from PySide6.QtCore import Qt

from engine.backends.base import Timings, Token
from inspector.tracks import Track, TrackStore
from widgets.request_log import (
    ANOMALIES_COL,
    BADGES,
    REQUEST_COL,
    SLOT_COL,
    STATE_COL,
    VERDICT_COL,
    RequestLogModel,
)

TIP = Qt.ItemDataRole.ToolTipRole


def test_tools_ignored_is_a_badge_with_its_reason(qtbot):
    model = RequestLogModel()
    plain = Track(id="a")
    marked = Track(id="b", notes=("tools_ignored",))
    marked.anomalies["unknown_tool"] = 2
    model.add(plain)
    model.add(marked)  # newest first: row 0
    col = ANOMALIES_COL
    assert model.index(0, col).data(BADGES) == [("no tools shown", 1), ("unknown tool", 2)]
    assert model.index(0, col).data().startswith("no tools shown")
    assert "does not render `tools`" in model.index(0, col).data(TIP)
    assert model.index(1, col).data(BADGES) == [] and model.index(1, col).data() == ""


def test_a_request_s_own_anomalies_are_badges_too(qtbot):
    # Not parser outcomes, but counted and logged all the same: a dropped extra call (parallel
    # calls off) and special tokens in message content show in the row, with their reasons.
    model = RequestLogModel()
    t = Track(id="a")
    t.anomalies.update({"extra_tool_call": 1, "special_token_in_content": 3, "unknown_tool": 1})
    model.add(t)
    col = ANOMALIES_COL
    assert model.index(0, col).data(BADGES) == [
        ("unknown tool", 1), ("extra call", 1), ("special token in content", 3)]
    assert "not sent to the client" in model.index(0, col).data(TIP)


def test_a_row_goes_from_waiting_to_its_slot_to_done(qtbot):
    model = RequestLogModel()
    t = Track(id="r", start_state="content")
    model.add(t)
    cell = lambda col: model.index(0, col).data()  # noqa: E731
    assert (cell(STATE_COL), cell(SLOT_COL)) == ("queued", "")  # waiting for a slot
    assert "slot" not in model.index(0, REQUEST_COL).data(TIP)
    t.slot = 2  # the engine took it: its prompt is being read
    assert (cell(STATE_COL), cell(SLOT_COL)) == ("prompt", "2")
    assert model.index(0, REQUEST_COL).data(TIP).endswith("\nslot 2")
    t.add_tokens([Token(5, "Hi", time.perf_counter())])
    assert (cell(STATE_COL), cell(SLOT_COL)) == ("generating · content", "2")
    t.finish("stop", Timings(prompt_tokens=40, cached_tokens=31, output_tokens=1, slot=2))
    assert (cell(STATE_COL), cell(SLOT_COL)) == ("done", "2")
    assert "slot 2: 31 of 40 prompt tokens cached" in model.index(0, REQUEST_COL).data(TIP)
    assert "parallel sequence" in model.headerData(SLOT_COL, Qt.Orientation.Horizontal, TIP)


def test_a_recorded_request_shows_the_slot_its_timings_name(qtbot):
    model = RequestLogModel()
    t = Track(id="r", origin="session.jsonl")
    model.add(t)
    t.finish("stop", Timings(output_tokens=3, slot=1))
    assert model.index(0, SLOT_COL).data() == "1"
    t.restart()  # a playback seek backwards: it is waiting again
    assert (model.index(0, SLOT_COL).data(), model.index(0, STATE_COL).data()) == ("", "queued")
    # A recording from before slots (or another engine): no slot, nothing shown.
    old = Track(id="o")
    model.add(old)
    old.finish("stop", Timings(output_tokens=3))
    assert model.index(0, SLOT_COL).data() == "" and old.slot == -1


def test_the_cached_column_shows_reused_of_prompt_with_the_sources_in_its_tooltip(qtbot):
    """Issue 20: "cached/prompt" per row; the tooltip splits it into slot, disk and computed
    and, with the engine's prefix match, says where the prompt left the best cached prefix."""
    from engine.backends.base import PrefixMatch
    from engine.chat.request import ChatRequest, Message
    from widgets.request_log import CACHED_COL

    msgs = (Message("system", "Time: 10:32. Be terse."), Message("user", "hi"))
    prompt = "<|im_start|>system\nTime: 10:32. Be terse.<|im_end|>\n<|im_start|>user\nhi"
    at = prompt.index("2. Be")
    model = RequestLogModel()
    t = Track(id="r", prompt=prompt, request=ChatRequest(messages=msgs),
              prefix=PrefixMatch(7300, "disk", at, "1. Be terse.", "2. Be terse."))
    model.add(t)
    assert model.index(0, CACHED_COL).data() == ""  # not finished: nothing known yet
    t.finish("stop", Timings(prompt_tokens=7379, cached_tokens=7012, disk_tokens=7000))
    assert model.index(0, CACHED_COL).data() == "7012/7379"
    tip = model.index(0, CACHED_COL).data(TIP)
    assert tip.startswith("7012 of 7379 prompt tokens reused (slot 12, disk 7000), 367 computed")
    assert "The best cache (disk) held 7300 tokens" in tip
    assert f"message 0 (system), char {msgs[0].content.index('2. Be')}" in tip
    assert 'cache had:  "1. Be terse."' in tip and 'prompt has: "2. Be terse."' in tip
    assert "reused from the KV cache" in model.headerData(CACHED_COL, Qt.Orientation.Horizontal,
                                                          TIP)
    t.release()  # an old row keeps its figures, not its prompt: no place then
    assert model.index(0, CACHED_COL).data() == "7012/7379"
    assert "message 0" not in model.index(0, CACHED_COL).data(TIP)
    # Another engine (no prefix match) still shows the figures; no cache at all shows 0.
    other = Track(id="o")
    model.add(other)
    other.finish("stop", Timings(prompt_tokens=9))
    assert model.index(0, CACHED_COL).data() == "0/9"
    assert model.index(0, CACHED_COL).data(TIP) == \
        "0 of 9 prompt tokens reused (slot 0, disk 0), 9 computed"


# -- the filter bar, next anomaly, rows that stay put, the columns in view -----------------

def _log(qtbot, tracks, store=None):
    """A shown request list fed as the window feeds it: each track added, then a frame's
    `changed` (the store, where given, releases the old rows' text as it goes)."""
    from widgets.request_log import RequestLog

    log = RequestLog()
    qtbot.addWidget(log)
    log.resize(900, 400)
    log.show()
    for t in tracks:
        if store is not None:
            store.add(t)
        log.add(t)
        log.model.changed([t])
    return log


def _shown(log) -> str:
    return "".join(log.model.track_at(r).id for r in range(log.model.rowCount()))


def test_the_filter_over_every_field_shows_those_rows(qtbot):
    from tests.inspector.test_query import CASES, rows

    log = _log(qtbot, rows())
    assert _shown(log) == "edcba"  # newest first
    for text, expected in CASES:
        assert log.set_filter(text), text
        assert _shown(log) == expected[::-1], text
        assert log.bar.error.isHidden()
        assert log.bar.shown.text() == (f"{len(expected)} of 5" if text else "")
    assert log.model.total == 5


def test_a_bad_expression_is_an_inline_error_and_the_list_keeps_its_filter(qtbot):
    from tests.inspector.test_query import rows

    log = _log(qtbot, rows())
    assert log.set_filter("~model gemma")
    assert _shown(log) == "cb"
    assert not log.set_filter("~anomaly '(unfinished'")
    assert log.bar.error.isVisible() and "bad regex" in log.bar.error.text()
    assert _shown(log) == "cb"
    assert log.set_filter("")
    assert log.bar.error.isHidden() and _shown(log) == "edcba"


def test_free_text_finds_rows_whose_text_was_released(qtbot):
    from tests.inspector.test_query import make

    store = TrackStore(max_documents=3)
    tracks = [make(f"r{i:02}", f"answer number {i} says {'needle' if i == 4 else 'hay'}")
              for i in range(40)]
    log = _log(qtbot, tracks, store)
    old = tracks[4]
    assert old.released and old.raw == ""
    assert log.set_filter("needle")
    assert _shown(log) == "r04"
    # the row still says why it stopped, from its summary
    assert log.model.index(0, VERDICT_COL).data() == "answered"
    assert log.set_filter("~o 'number (4|39) says'")
    assert _shown(log) == "r39r04"


def test_rows_that_start_to_pass_the_filter_are_inserted_in_their_place(qtbot):
    from tests.inspector.test_query import make

    done = [make(f"d{i}", "fine") for i in range(3)]
    log = _log(qtbot, done[:2])
    assert log.set_filter("~state generating")
    running = Track(id="run", start_state="content")
    log.add(running)
    log.model.changed([running])
    assert _shown(log) == ""
    running.add_tokens([Token(1, "Hi", time.perf_counter())])
    log.model.changed([running])
    log.add(done[2])
    log.model.changed([done[2]])
    assert _shown(log) == "run"
    running.finish("stop")
    log.model.changed([running])
    assert _shown(log) == ""
    assert log.set_filter("~state done")
    assert _shown(log) == "d2rund1d0"


def test_f8_and_shift_f8_go_to_the_rows_with_anomalies_among_those_shown(qtbot):
    from PySide6.QtGui import QKeySequence

    from tests.inspector.test_query import rows

    log = _log(qtbot, rows())  # newest first: e d c b a; d and c have anomalies
    assert log.current.id == "e"  # followed
    assert log.next_anomaly_action.shortcut() == QKeySequence("F8")
    assert log.previous_anomaly_action.shortcut() == QKeySequence("Shift+F8")
    log.activateWindow()
    qtbot.waitUntil(log.isActiveWindow)  # shortcuts reach an active window only
    qtbot.keyClick(log.table, Qt.Key.Key_F8)
    assert log.current.id == "d" and not log.follow.isChecked()
    qtbot.keyClick(log.table, Qt.Key.Key_F8)
    assert log.current.id == "c"
    qtbot.keyClick(log.table, Qt.Key.Key_F8)  # none below: it stays
    assert log.current.id == "c" and log.bar.shown.text() == "no anomaly below"
    qtbot.keyClick(log.table, Qt.Key.Key_F8, Qt.KeyboardModifier.ShiftModifier)
    assert log.current.id == "d"
    assert log.set_filter("~model gemma")  # c, b: only c has one
    log.select(log.model.track_at(1))
    log.next_anomaly_action.trigger()
    assert log.model.track_at(1).id == "b" and log.current.id == "b"
    log.previous_anomaly_action.trigger()
    assert log.current.id == "c"


def test_a_pinned_row_does_not_move_when_rows_arrive(qtbot):
    from tests.inspector.test_query import make

    log = _log(qtbot, [make(f"r{i:03}", "fine") for i in range(60)])
    table = log.table
    row = 5
    rect = table.visualRect(log.model.index(row, VERDICT_COL))
    qtbot.mouseClick(table.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    pinned = log.current
    assert pinned is log.model.track_at(row) and not log.follow.isChecked()
    y = table.visualRect(log.model.index(log.model.row_of(pinned), 0)).y()
    for i in range(60, 70):
        t = make(f"r{i:03}", "more")
        log.add(t)
        log.model.changed([t])
    qtbot.wait(1)
    assert log.model.row_of(pinned) == row + 10
    assert table.visualRect(log.model.index(row + 10, 0)).y() == y  # where it was
    assert log.current is pinned


def test_following_with_the_pointer_over_the_list_keeps_the_rows_in_view(qtbot):
    from tests.inspector.test_query import make

    log = _log(qtbot, [make(f"r{i:03}", "fine") for i in range(40)])
    table = log.table
    assert log.follow.isChecked() and table.verticalScrollBar().value() == 0
    qtbot.mouseMove(table.viewport(), table.visualRect(log.model.index(3, 0)).center())
    under = table.indexAt(table.visualRect(log.model.index(3, 0)).center()).row()
    track = log.model.track_at(under)
    t = make("new", "more")
    log.add(t)
    log.model.changed([t])
    assert log.current is t  # still following: the newest is selected
    assert log.model.track_at(table.indexAt(
        table.visualRect(log.model.index(4, 0)).center()).row()) is track
    assert table.visualRect(log.model.index(4, 0)).y() == \
        table.visualRect(log.model.index(0, 0)).y() + 4 * 22
    assert table.verticalScrollBar().value() == 22  # scrolled by the new row


def test_the_most_telling_columns_are_in_view_at_1280x800(window, qtbot):
    from widgets.request_log import MESSAGE_COL

    window.resize(1280, 800)
    qtbot.wait(10)
    table = window.log.table
    header = table.horizontalHeader()
    width = table.viewport().width()
    assert width > 0
    for col in (VERDICT_COL, ANOMALIES_COL, MESSAGE_COL):
        left = header.sectionViewportPosition(col)
        assert left >= 0 and left + header.sectionSize(col) <= width, (col, left, width)
    assert [header.logicalIndexAt(x) for x in (1, header.sectionSize(VERDICT_COL) + 1)] == \
        [VERDICT_COL, ANOMALIES_COL]
