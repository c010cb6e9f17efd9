"""The window over LlamaEngine(parallel=4) on the real default model (issue 13, the window).

Cross-module on purpose (app/gui.py's Inspector wiring over engine/backends/llama/batch.py,
inspector/tracks.py and widgets/): four requests submitted at once must show as four rows
generating in the same frame, each in its own slot; each row's panes must hold that request's own
tokens and nothing of the three beside it, while it runs (pinned) and after; Follow newest /
pinning must hold with several requests live; and the charts' busy-slots series must see more than
one slot busy. Frames and chart refreshes are driven by the test (the window's timers are stopped),
between real waits that let the engine thread work.
"""

from __future__ import annotations

import asyncio
import os
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before anything creates a QApplication

import pytest

from engine.chat.packs import resolve_pack
from engine.chat.request import ChatRequest, Message, Sampling
from engine.metrics import Metrics
from engine.service import Service
from widgets.request_log import SLOT_COL, STATE_COL

pytestmark = pytest.mark.model

QUESTIONS = (
    "Name three colours of the rainbow.",
    "Write one sentence about cats.",
    "Count from one to ten in words.",
    "What is the capital of France? Explain briefly.",
)


@pytest.fixture
def inspector(qtbot, default_model):
    from app.gui import Inspector
    from engine.backends.llama.engine import LlamaEngine

    pack = resolve_pack("smollm2")
    engine = LlamaEngine(pack.gguf, n_ctx=2048, parallel=4, n_threads=1)
    assert engine.ready.wait(120) and engine.load_error is None
    ins = Inspector(Service(engine, pack, metrics=Metrics(engine)), port=0)
    win = ins.window
    win.timer.stop()  # the test draws the frames
    win.chart_timer.stop()
    ins._status.stop()
    qtbot.addWidget(win)
    win.show()
    yield ins
    asyncio.run(ins.close())  # no server was started: this closes the feed and the engine
    win.close()


def ask(service: Service, i: int, max_tokens: int):
    req = ChatRequest(messages=(Message("user", QUESTIONS[i]),), max_tokens=max_tokens,
                      sampling=Sampling(temperature=0.0, seed=i))
    return service.submit(req)


def run_frames(qtbot, win, until, timeout: float = 240.0, on_frame=None) -> int:
    """Draw frames (charts every 10th) until `until()`; returns the frame count."""
    deadline = time.monotonic() + timeout
    n = 0
    while not until():
        assert time.monotonic() < deadline, "the requests did not finish"
        qtbot.wait(25)
        win.frame()
        n += 1
        if n % 10 == 0:
            win.charts.refresh()
        if on_frame is not None:
            on_frame()
    win.frame()
    win.charts.refresh()
    return n


def shown(win) -> dict[str, str]:
    return {"content": win.channels.text("content"), "raw": win.raw.raw.toPlainText()}


def test_four_requests_generate_at_once_each_in_its_own_row_and_panes(qtbot, inspector):
    win, log, service = inspector.window, inspector.window.log, inspector.service
    model = log.model
    # Long enough replies that all four overlap: prefill chunks beside generating rows are
    # paced (engine/backends/llama/chunks.py), so the last prompt starts a few steps later.
    runs = [ask(service, i, 64 + 4 * i) for i in range(4)]
    done = lambda: all(r.finish is not None for r in runs)  # noqa: E731
    most_generating = 0
    slots_seen: set[tuple[int, ...]] = set()
    pinned = None
    pinned_mid_run: list[str] = []  # the pinned row's pane, frame by frame, while it runs

    def on_frame() -> None:
        nonlocal most_generating, pinned
        rows = [model.track_at(r) for r in range(model.rowCount())]
        generating = [t for t in rows if t.status == "generating"]
        most_generating = max(most_generating, len(generating))
        if len(generating) == 4:
            # The list says so too: four rows read "generating", with four different slots.
            states = [model.index(r, STATE_COL).data() for r in range(4)]
            assert all(s.startswith("generating") for s in states), states
            slots_seen.add(tuple(sorted(int(model.index(r, SLOT_COL).data())
                                        for r in range(4))))
            if pinned is None and all(len(t.tokens) >= 3 for t in generating):
                # The user clicks the oldest row while all four run: it is pinned.
                rect = log.table.visualRect(model.index(3, 0))
                qtbot.mouseClick(log.table.viewport(), qt_left(), pos=rect.center())
                pinned = log.current
        if pinned is not None and pinned.status == "generating":
            pinned_mid_run.append(win.channels.text("content"))

    # Follow newest: after the first frame the newest of the four is selected.
    win.frame()
    assert model.rowCount() == 4 and log.follow.isChecked()
    assert log.current is not None and log.current.id == runs[-1].id
    run_frames(qtbot, win, done, on_frame=on_frame)

    assert most_generating == 4, f"at most {most_generating} rows generated in one frame"
    assert slots_seen == {(0, 1, 2, 3)}
    # Pinned: clicking an older row turned following off and kept that row selected.
    assert pinned is not None and pinned.id == runs[0].id
    assert log.current is pinned and not log.follow.isChecked()
    # While it ran beside three others, its pane only ever grew with its own text.
    final = pinned.result.content
    assert pinned_mid_run and all(final.startswith(t) for t in pinned_mid_run)
    assert len(set(pinned_mid_run)) > 1  # it was followed live, not drawn once at the end

    # Each track holds exactly its run's tokens, and each row's panes show that request only.
    texts = set()
    for run in runs:
        track = inspector.store.get(run.id)
        own = "".join(t.text for t in run.tokens)
        assert [t.id for t in track.tokens] == [t.id for t in run.tokens]
        assert track.raw == own and track.status == "done"
        assert track.slot == run.finish.timings.slot >= 0
        assert track.output_tokens == run.finish.timings.output_tokens <= run.job.max_tokens
        row = model.row_of(track)
        assert model.index(row, SLOT_COL).data() == str(track.slot)
        log.table.selectRow(row)
        assert log.current is track
        assert shown(win) == {"content": run.result.content, "raw": own}
        texts.add(own)
    assert len(texts) == 4  # four different outputs: a mix-up would have shown
    assert len({inspector.store.get(r.id).slot for r in runs}) == 4

    # The charts plotted the busy slots next to the queue depth, up to all four.
    _, busy = win.charts.curves["busy_slots"].getData()
    assert busy is not None and float(busy.max()) > 1
    assert win.charts.plots["queue_depth"].viewRange()[1][1] > float(busy.max())  # in view
    assert win.charts.points("queue_depth") >= 2

    # Pinned, new traffic does not move the selection; following again jumps to the newest.
    log.table.selectRow(model.row_of(inspector.store.get(runs[1].id)))
    pinned = log.current
    late = ask(service, 0, 6)
    run_frames(qtbot, win, lambda: late.finish is not None)
    assert model.rowCount() == 5 and model.track_at(0).id == late.id
    assert log.current is pinned and shown(win)["raw"] == pinned.raw
    log.follow.setChecked(True)
    assert log.current.id == late.id
    assert shown(win)["raw"] == "".join(t.text for t in late.tokens)
    # The status bar counts the slots (none busy now).
    inspector.update_status()
    assert "0/4 slots busy" in win.engine_label.text()


def qt_left():
    from PySide6.QtCore import Qt

    return Qt.MouseButton.LeftButton
