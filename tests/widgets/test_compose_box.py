"""widgets/compose_box.py: a chat sent from the window runs on the service's engine and streams
into the panes through the same queue as server traffic; errors are shown, never raised."""

from __future__ import annotations

import pytest

from engine.chat.packs import load_pack
from engine.metrics import Metrics
from engine.service import Service
from inspector.tracks import LiveFeed, TrackStore


def live_window(qtbot, service):
    from inspector.playback import Playback
    from widgets.main_window import MainWindow

    store = TrackStore()
    feed = LiveFeed(service, store)
    win = MainWindow(store, Playback(store), [feed], submit=service.submit)
    qtbot.addWidget(win)
    win.show()
    return win, feed


@pytest.fixture
def answering(replay_service) -> Service:
    return replay_service("Portugal's capital?\n</think>\n\nLisbon is the capital of Portugal.")


def test_compose_sends_to_the_engine_and_streams_into_the_panes(qtbot, answering):
    win, feed = live_window(qtbot, answering)
    box = win.compose
    box.system.setPlainText("Be brief.")
    run = box.send()
    assert run is not None and run.request.api == "gui"
    assert [m.role for m in run.request.messages] == ["system", "user"]
    qtbot.waitUntil(lambda: win.log.current is not None and win.log.current.status == "done",
                    timeout=5000)
    track = win.log.current
    assert track.id == run.id and track.source == "gui"
    assert win.channels.text("reasoning") == "Portugal's capital?"
    assert win.channels.text("content") == "Lisbon is the capital of Portugal."
    assert "<|im_start|>system\nBe brief." in win.prompt.pane.toPlainText()
    qtbot.waitUntil(lambda: not box.stop_btn.isEnabled(), timeout=2000)
    feed.close()


def test_bad_tools_json_is_shown_not_sent(qtbot, answering):
    win, feed = live_window(qtbot, answering)
    box = win.compose
    box.tools.setPlainText("[{not json")
    assert box.send() is None
    assert box.status.text().startswith("ValueError: tools: not a JSON list")
    win.frame()
    assert win.log.model.rowCount() == 0
    feed.close()


@pytest.mark.model
def test_compose_runs_a_real_request_on_the_default_model(qtbot, default_model):
    from engine.backends.llama.engine import LlamaEngine

    pack = load_pack("smollm2")
    engine = LlamaEngine(default_model, n_ctx=1024)
    try:
        service = Service(engine, pack, metrics=Metrics(engine))
        win, feed = live_window(qtbot, service)
        box = win.compose
        box.max_tokens.setValue(8)
        box.temperature.setValue(0.0)
        box.seed.setValue(7)
        box.top_k.setValue(3)
        run = box.send()
        assert run is not None, box.status.text()
        qtbot.waitUntil(lambda: win.log.current is not None
                        and win.log.current.status == "done", timeout=120_000)
        track = win.log.current
        assert track.id == run.id and 0 < len(track.tokens) <= 8
        assert track.finish_reason in ("stop", "length")
        assert win.channels.text("content").strip()
        assert win.raw.text() == track.raw and win.raw.strip._n == len(track.tokens)
        assert track.model == engine.name and track.prompt_tokens > 0
        assert run.request.sampling.seed == 7 and run.request.top_logprobs == 3
        # The engine recorded alternatives: the token strip shows each token's probability.
        assert all(len(t.top) == 3 for t in track.tokens)
        assert "p = " in win.raw.strip._tip(0)
        feed.close()
    finally:
        engine.close()


def test_guard_calls_is_on_by_default_and_follows_the_switch(qtbot, answering):
    win, feed = live_window(qtbot, answering)
    box = win.compose
    assert box.guard.isChecked() and box.guard.isEnabled()
    assert box.request().guard_calls is True  # stated, not left to the server's default
    box.guard.setChecked(False)
    assert box.request().guard_calls is False
    feed.close()


@pytest.mark.parametrize("start,checked,enabled", [(False, False, True), (None, False, False)])
def test_the_switch_starts_as_the_app_says(qtbot, answering, start, checked, enabled):
    from inspector.playback import Playback
    from widgets.main_window import MainWindow

    store = TrackStore()
    # False: --no-guard-calls; None: an engine that runs no guard (a replay, an upstream).
    win = MainWindow(store, Playback(store), [], submit=answering.submit, guard_calls=start)
    qtbot.addWidget(win)
    box = win.compose
    assert (box.guard.isChecked(), box.guard.isEnabled()) == (checked, enabled)
    assert box.request().guard_calls is False
    assert ("runs no call guard" in box.guard.toolTip()) == (start is None)


@pytest.mark.model
def test_the_switch_reaches_the_real_engines_job(qtbot, default_model):
    from engine.backends.llama.engine import LlamaEngine
    from widgets.compose_box import EXAMPLE_TOOLS

    engine = LlamaEngine(default_model, n_ctx=1024)
    try:
        service = Service(engine, load_pack("smollm2"), metrics=Metrics(engine))
        win, feed = live_window(qtbot, service)
        box = win.compose
        box.tools.setPlainText(EXAMPLE_TOOLS)
        box.max_tokens.setValue(2)
        guarded = box.send()
        assert guarded is not None, box.status.text()
        assert guarded.job.guard is not None  # the llama engine guards calls under "auto"
        guarded.wait(120)
        box.guard.setChecked(False)
        free = box.send()
        assert free is not None and free.job.guard is None
        free.wait(120)
        feed.close()
    finally:
        engine.close()
