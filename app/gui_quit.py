"""How the window process is asked to stop: signals, and the hidden test hook `--quit-by`.

Owns `StopRequest`. SIGINT and SIGTERM do not raise KeyboardInterrupt in whatever code the Qt
loop happens to run (that left the server, the engine and the recorder unclosed and printed a
traceback): the handler only sets a flag, which `app/gui.py`'s main coroutine reads on its
next tick (every 50 ms) or before it starts anything, and then closes down in order, as the
window's Quit does. Installed before the service is built, so a signal during start-up is a
clean stop too. With `--quit-by close|menu|keys` (tests only), SIGUSR1 asks the window to quit
*that* way, through its real path: `QWidget.close` (what the close button's event calls), the
File → Quit action, or a Ctrl+Q key press through Qt's shortcut map. Main thread only (Python
runs signal handlers there).
"""

from __future__ import annotations

import signal
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopRequest:
    """Set by a signal; `take_hook()` says once whether a test asked for a quit by the UI."""

    def __init__(self, quit_by: str | None = None) -> None:
        self.signal: int | None = None  # the signal that asked for the stop, if any
        self.quit_by = quit_by
        self._hook = False
        self._previous: dict[int, object] = {}

    @property
    def requested(self) -> bool:
        return self.signal is not None

    def install(self) -> StopRequest:
        for sig in STOP_SIGNALS:
            self._previous[sig] = signal.signal(sig, self._stop)
        if self.quit_by:
            self._previous[signal.SIGUSR1] = signal.signal(signal.SIGUSR1, self._hooked)
        return self

    def uninstall(self) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()

    def _stop(self, signum: int, _frame: FrameType | None) -> None:
        self.signal = signum

    def _hooked(self, _signum: int, _frame: FrameType | None) -> None:
        self._hook = True

    def take_hook(self) -> str | None:
        if not self._hook:
            return None
        self._hook = False
        return self.quit_by


def quit_by(window, how: str) -> None:
    """Quit the window as a user would (see the module docstring)."""
    if how == "close":
        window.close()
    elif how == "menu":
        window.actions_by_name["quit"].trigger()
    elif how == "keys":
        from PySide6.QtCore import Qt
        from PySide6.QtTest import QTest

        # Offscreen, no window is active until asked: a window shortcut needs an active one.
        window.activateWindow()
        window.raise_()
        QTest.keyClick(window, Qt.Key.Key_Q, Qt.KeyboardModifier.ControlModifier)
    else:
        raise ValueError(f"unknown way to quit: {how}")
