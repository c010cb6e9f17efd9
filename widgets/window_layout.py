"""The window's layout across sessions: its size at first start, and what is saved at close.

Owns `restore_layout` and `save_layout`. Saved in a `QSettings` the app passes in (app/gui.py:
Qt's per-user settings; tests: a file of their own): the window's geometry, its dock and
toolbar state (`QMainWindow.saveState`: the Ledger dock, open or not, and its width), the
request list / panes / tabs split, and the open tab. With nothing saved (or a layout saved by
another arrangement of the window, `SETTINGS_VERSION`), the window opens at `DEFAULT_SIZE`
shrunk to the screen's free area, the split in `SPLIT` proportions. GUI thread only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QSettings
from PySide6.QtGui import QGuiApplication

if TYPE_CHECKING:
    from widgets.main_window import MainWindow

DEFAULT_SIZE = (1560, 980)
# The vertical split: request list, channel panes, tabs (proportions; Qt scales them).
SPLIT = (36, 30, 34)
SETTINGS_VERSION = 1


def fitted(window: MainWindow, size: tuple[int, int]) -> tuple[int, int]:
    """`size`, shrunk to the screen's free area when that is smaller."""
    screen = window.screen()
    w, h = size
    # Offscreen (tests, --screenshot) the "screen" is a made-up 800 px square: not a limit.
    if screen is not None and QGuiApplication.platformName() != "offscreen":
        free = screen.availableGeometry()
        w, h = min(w, free.width()), min(h, free.height())
    return w, h


def split_sizes(height: int) -> list[int]:
    """The split's pixel sizes for a central area `height` tall, in `SPLIT` proportions."""
    total = sum(SPLIT)
    return [max(1, height * part // total) for part in SPLIT]


def restore_layout(window: MainWindow, settings: QSettings | None,
                   size: tuple[int, int] | None = None) -> bool:
    """Restore what `save_layout` saved (True), or lay the window out afresh (False). `size`
    wins over the saved size (the split keeps its saved proportions)."""
    restored = False
    if settings is not None and settings.value("layout/version", 0, int) == SETTINGS_VERSION:
        geometry, state = settings.value("layout/geometry"), settings.value("layout/state")
        split = settings.value("layout/split")
        restored = bool(geometry) and window.restoreGeometry(geometry)
        if restored and state:
            window.restoreState(state, SETTINGS_VERSION)
        if restored and split:
            window.split.restoreState(split)
        tab = settings.value("layout/tab", 0, int)
        if restored and 0 <= tab < window.tabs.count():
            window.tabs.setCurrentIndex(tab)
        window._ledger_sized = restored  # a restored dock keeps the width it was given
    saved = settings.value("layout/size") if restored and settings is not None else None
    if size is not None or not restored or saved:
        # The size, set apart from the geometry (which Qt fits to the screen it was saved
        # on): --size, else the saved size, else the default; each within this screen.
        if size is None and saved:
            size = (int(saved[0]), int(saved[1]))
        window.resize(*fitted(window, size or DEFAULT_SIZE))
    if not restored:
        # An estimate of the central area before the first layout (menus, toolbar, status).
        window.split.setSizes(split_sizes(max(300, window.height() - 110)))
    return restored


def save_layout(window: MainWindow, settings: QSettings | None) -> None:
    if settings is None:
        return
    settings.setValue("layout/version", SETTINGS_VERSION)
    settings.setValue("layout/geometry", window.saveGeometry())
    settings.setValue("layout/size", [window.width(), window.height()])
    settings.setValue("layout/state", window.saveState(SETTINGS_VERSION))
    settings.setValue("layout/split", window.split.saveState())
    settings.setValue("layout/tab", window.tabs.currentIndex())
    settings.sync()
