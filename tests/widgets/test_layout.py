"""widgets/main_window.py, widgets/window_layout.py, widgets/metrics_chart.py: the layout holds at
1280×800, 1600×1000 and 1920×1080 (real windows, offscreen): rows in view, every chart's plot
tall enough to read, the Ledger dock wide enough for its numbers; and the layout is saved at
close and restored by the next window."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QSettings

from inspector.playback import Playback
from inspector.tracks import TrackStore
from tests.support import DEMO
from widgets.metrics_chart import MIN_PLOT_HEIGHT

SIZES = [(1280, 800), (1600, 1000), (1920, 1080)]
# The least rows the request list shows at each size (it showed 4–7 with the charts beside it).
ROWS = {1280: 7, 1600: 10, 1920: 12}


def make_window(qtbot, settings=None, size=None):
    from widgets.main_window import MainWindow

    store = TrackStore()
    playback = Playback(store)
    win = MainWindow(store, playback, [playback], settings=settings, size=size)
    win.timer.stop()  # the test draws the frames
    win.chart_timer.stop()
    qtbot.addWidget(win)
    return win


def settings_at(tmp_path) -> QSettings:
    return QSettings(str(tmp_path / "prism.ini"), QSettings.Format.IniFormat)


def played(win, qapp):
    win.show()
    qapp.processEvents()
    win.playback.set_speed(0.0)
    win.playback.open(DEMO)
    win.frame()
    win.frame()
    win.charts.refresh()
    qapp.processEvents()


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_the_layout_holds_at_common_screen_sizes(qtbot, qapp, tmp_path, size):
    win = make_window(qtbot, settings_at(tmp_path), size)
    played(win, qapp)
    assert win.size().toTuple() == size

    table = win.log.table
    rows = table.viewport().height() // table.verticalHeader().defaultSectionSize()
    assert rows >= ROWS[size[0]], rows
    assert table.viewport().width() > 0.9 * win.width()  # the list has the window's width
    assert win.log.current is not None and win.body.currentWidget() is win.channels

    win.tabs.setCurrentWidget(win.charts)
    qapp.processEvents()
    heights = win.charts.plot_heights()
    assert len(heights) == 5
    for name, plot in win.charts.plots.items():
        # Every plot is there, in view, tall enough for its y labels, without scrolling.
        assert plot.isVisible() and heights[name] >= MIN_PLOT_HEIGHT, (name, heights)
        assert plot.getViewBox().sceneBoundingRect().width() >= 120, name
        view_rect = win.charts.view.viewport().rect()
        top_left = win.charts.view.mapFromScene(plot.sceneBoundingRect().topLeft())
        assert view_rect.contains(top_left), name
    assert not win.charts.scroll.verticalScrollBar().isVisible()

    win.ledger_action.trigger()
    qapp.processEvents()
    assert win.ledger_dock.isVisible()
    assert win.ledger_dock.width() >= 440, win.ledger_dock.width()


def test_the_layout_is_saved_at_close_and_restored(qtbot, qapp, tmp_path):
    first = make_window(qtbot, settings_at(tmp_path), (1500, 940))
    played(first, qapp)
    first.ledger_action.trigger()
    qapp.processEvents()
    first.split.setSizes([500, 150, 200])
    first.tabs.setCurrentWidget(first.charts)
    qapp.processEvents()
    split, ledger = first.split.sizes(), first.ledger_dock.width()
    first.close()

    second = make_window(qtbot, settings_at(tmp_path))
    second.show()
    qapp.processEvents()
    assert second.size().toTuple() == (1500, 940)
    assert second.split.sizes() == split
    assert second.ledger_dock.isVisible() and abs(second.ledger_dock.width() - ledger) <= 2
    assert second.tabs.currentWidget() is second.charts
    second.close()

    # --size wins over the saved size; the rest is restored.
    third = make_window(qtbot, settings_at(tmp_path), (1280, 800))
    third.show()
    qapp.processEvents()
    assert third.size().toTuple() == (1280, 800)
    assert third.ledger_dock.isVisible()


def test_a_window_without_settings_saves_nothing(qtbot, qapp, tmp_path):
    win = make_window(qtbot, None, (1280, 800))
    win.show()
    qapp.processEvents()
    win.close()
    assert not (tmp_path / "prism.ini").exists()
    fresh = make_window(qtbot, settings_at(tmp_path))
    assert fresh.size().toTuple() == (1560, 980)  # the default (offscreen: no screen limit)
