"""Shared fixtures for the widget tests: a real `MainWindow` (offscreen) over a playback that
runs on a fake clock, so every frame is driven by the test, never by wall time."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before anything creates a QApplication

import pytest

from engine.parse.events import result_of
from engine.parse.filters import Chain
from engine.parse.reading import Reading
from inspector.playback import Playback
from inspector.tracks import TrackStore
from tests.support import DEMO, Clock, recorded_failures  # noqa: F401 - widget tests import them


def fragments(pane):
    """(text, format) of every run of equally formatted text in a QPlainTextEdit."""
    block = pane.document().begin()
    while block.isValid():
        for it in block:
            frag = it.fragment()
            yield frag.text(), frag.charFormat()
        block = block.next()


def fixture_result(data: dict) -> dict:
    """An exported fixture's chunks read afresh as its reading says (parser and filters): the
    result dict to compare with its `expected`."""
    reading = Reading.from_dict(data["parser"])
    parser, filters = reading.parser(id_prefix="fixture"), Chain(reading.filters())
    events = [ev for chunk in data["chunks"] for ev in filters.feed(parser.feed(chunk))]
    events += filters.feed(parser.finish()) + filters.finish()
    return result_of(events, "stop").to_dict()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def window(qtbot, clock):
    """The inspector window over a fake-clock playback; frames are called by the test."""
    from widgets.main_window import MainWindow

    store = TrackStore()
    playback = Playback(store, clock=clock)
    win = MainWindow(store, playback, [playback])
    win.timer.stop()  # the test drives frames
    win.chart_timer.stop()
    qtbot.addWidget(win)
    win.show()
    yield win
    win.close()


def play_all(window, path=DEMO, speed: float = 0.0):
    """Open a file and play it to the end at once; returns the playback's items."""
    pb = window.playback
    pb.set_speed(speed)
    items = pb.open(path)
    window.frame()
    window.frame()
    return items
