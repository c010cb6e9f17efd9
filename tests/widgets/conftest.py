"""Shared fixtures for the widget tests: a real `MainWindow` (offscreen) over a playback that
runs on a fake clock, so every frame is driven by the test, never by wall time."""

from __future__ import annotations

import json
import os
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # before anything creates a QApplication

import pytest

from app.playback import Playback
from app.tracks import TrackStore

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "resources" / "sessions" / "demo.jsonl"
FAILURES = ROOT / "tests" / "fixtures" / "recorded_tool_call_in_thinking.json"


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, dt: float) -> None:
        self.now += dt


def fragments(pane):
    """(text, format) of every run of equally formatted text in a QPlainTextEdit."""
    block = pane.document().begin()
    while block.isValid():
        for it in block:
            frag = it.fragment()
            yield frag.text(), frag.charFormat()
        block = block.next()


def recorded_failures() -> list[str]:
    """The four real outputs where a Qwen model wrote its call inside its thinking."""
    data = json.loads(FAILURES.read_text(encoding="utf-8"))
    return [case["reasoning_content"] for case in data["falhas"]]


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
