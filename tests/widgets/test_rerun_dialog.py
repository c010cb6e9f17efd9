"""widgets/rerun_dialog.py and widgets/reruns.py in the real window, no model: the dialog's
choice as `prism rerun` names an engine, what it may send, and the window's Request menu and
request-list context menu (the rerun itself, on the default model: tests/app/test_gui_rerun.py).
"""

from __future__ import annotations

from inspector.rerun import EngineChoice, RerunFeed, RerunPlan
from tests.support import DEMO
from widgets.rerun_dialog import RerunDialog


def test_the_dialog_names_an_engine_and_ok_waits_for_a_whole_choice(qtbot):
    dialog = RerunDialog("req-1", None, ["smollm2", "gemma3-270m"])
    qtbot.addWidget(dialog)
    # The default: the selected request, on the first pack, each reply capped.
    assert dialog.one.isChecked() and not dialog.whole.isEnabled()
    assert dialog.ok.isEnabled() and not dialog.whole_recording()
    assert dialog.choice() == EngineChoice("pack", "smollm2", max_tokens=256)
    dialog.model_btn.setChecked(True)
    assert not dialog.ok.isEnabled()  # which file?
    dialog.model_path.setText("/models/other-quant.gguf")
    assert dialog.ok.isEnabled()
    assert dialog.choice().argv() == ["--model", "/models/other-quant.gguf", "--max-tokens",
                                      "256"]
    dialog.upstream_btn.setChecked(True)
    assert not dialog.ok.isEnabled()
    dialog.upstream.setText(" http://gpu-box:8000/v1 ")
    dialog.max_tokens.setValue(0)  # as recorded
    assert dialog.choice() == EngineChoice("upstream", "http://gpu-box:8000/v1")
    assert dialog.max_tokens.text() == "as recorded"


def test_the_request_menu_and_the_context_menu_open_it(window, qtbot):
    # The fixture's window has no engine to re-run with: the action is off, and says why.
    assert not window.reruns.action.isEnabled()
    assert window.reruns.ask() is None and "no engine" in window.message.text()
    started = []

    def start(choice, plan):  # app/gui.py's stand-in: a feed whose engine never comes
        started.append((choice, plan))
        return RerunFeed(plan, window.store, choice)

    window.reruns._start = start
    window.reruns.action.setEnabled(True)
    window.reruns.packs = ["smollm2"]
    assert window.reruns.ask() is None and "Select a request" in window.message.text()
    window.playback.set_speed(0.0)
    assert window.open_recording(DEMO)
    window.frame()
    track = window.log.model.track_at(0)
    window.log.select(track)
    assert window.reruns.action in window.log.table.actions()
    assert window.reruns.original_action in window.log.table.actions()
    dialog = window.reruns.ask()
    assert dialog.isVisible() and "3 requests" in dialog.whole.text()
    dialog.whole.setChecked(True)
    dialog.ok.click()
    assert not dialog.isVisible()
    ((choice, plan),) = started
    assert choice == EngineChoice("pack", "smollm2", max_tokens=256)
    assert plan == RerunPlan.of_recording(DEMO)
    # Its feed is polled from now on, and its progress is said.
    feed = window.reruns.feeds[-1]
    assert feed in window.sources and "starting the engine" in window.message.text()
    # One request alone, from the same row.
    started.clear()
    dialog = window.reruns.ask()
    dialog.ok.click()
    ((_choice, plan),) = started
    assert [r.id for r in plan.requests] == [track.id] and plan.rerun_of == ""
    # Not a re-run request: nothing to compare it with.
    assert not window.reruns.compare_with_original(track)
    assert "Select a re-run request" in window.message.text()


def test_a_row_with_no_request_of_its_own_offers_only_its_recording(qtbot):
    from widgets.rerun_dialog import RerunDialog

    dialog = RerunDialog("out.txt", ("s.jsonl", 3), ["smollm2"], alone=False)
    qtbot.addWidget(dialog)
    assert not dialog.one.isEnabled() and dialog.one.toolTip()
    assert dialog.whole.isEnabled() and dialog.whole.isChecked()
    dialog = RerunDialog("r1", ("s.jsonl", 3), ["smollm2"])
    qtbot.addWidget(dialog)
    assert dialog.one.isEnabled() and dialog.one.isChecked()
