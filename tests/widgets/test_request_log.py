"""widgets/request_log.py: a request's own notes (its tools were not shown to the model) are a
badge beside the anomalies, with a tooltip saying why (issue 9, item 4); the Slot column and
the State column follow a request from waiting to its slot to done (issue 13)."""

from __future__ import annotations

import time

from PySide6.QtCore import Qt

from engine.backends.base import Timings, Token
from inspector.tracks import Track
from widgets.request_log import (
    ANOMALIES_COL,
    BADGES,
    REQUEST_COL,
    SLOT_COL,
    STATE_COL,
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
