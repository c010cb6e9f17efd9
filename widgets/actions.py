"""The window's menu commands as one declared table: name, menu, text, shortcuts, tooltip.

Owns `ActionSpec` (one command, frozen), `ACTIONS` (the table, in menu order) and
`build_actions`, which turns the table into `QAction`s in the window's menus, each bound to the
handler the window names for it. The Help menu's *Keyboard shortcuts* list is drawn from the
same table (`shortcut_rows`), so a shortcut is declared once and cannot be documented wrong.
Menus made elsewhere (the Request menu, widgets/reruns.py) are found by title and added to,
not made twice. GUI thread only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QMainWindow, QMenu


@dataclass(frozen=True)
class ActionSpec:
    name: str  # the handler's key
    menu: str  # the menu's title, with its mnemonic ("&File")
    text: str
    shortcuts: tuple[str, ...] = ()  # portable key sequences ("Ctrl+O", "Space")
    tip: str = ""
    separator_before: bool = False


ACTIONS: tuple[ActionSpec, ...] = (
    ActionSpec("open", "&File", "&Open recording…", ("Ctrl+O",),
               "Open a Prism recording (.jsonl) or a plain text model output"),
    ActionSpec("export", "&File", "&Export selected request as fixture…"),
    ActionSpec("compare", "&File", "&Compare recordings…", (),
               "A rerun against the recording it re-ran, or any two"),
    ActionSpec("recordings", "&File", "Show the &recordings folder", (),
               "Where this window records, and where File → Open starts",
               separator_before=True),
    ActionSpec("quit", "&File", "&Quit", ("Ctrl+Q",),
               "Stop the server, the engine and the recorder, and close", True),
    ActionSpec("play", "&Playback", "&Play / pause", ("Space",),
               "Play or pause the opened recording"),
    ActionSpec("step", "&Playback", "&Step one token", (".",),
               "Pause and feed the playback one token"),
    ActionSpec("next", "&Playback", "&Next request", ("]",),
               "The next request: of the playback, or the newer row of the list"),
    ActionSpec("previous", "&Playback", "P&revious request", ("[",),
               "The previous request: of the playback, or the older row of the list"),
    ActionSpec("send", "&Request", "&Send the composed request", ("Ctrl+Return", "Ctrl+Enter"),
               "Send what the Compose tab holds to this window's engine",
               separator_before=True),
    ActionSpec("to_compose", "&Request", "Copy to C&ompose", ("Ctrl+Shift+C",),
               "Put the selected request (messages, tools, sampling) in the Compose tab to "
               "edit and send again"),
    ActionSpec("shortcuts", "&Help", "&Keyboard shortcuts", ("F1",),
               "Every command with a key, in one list"),
)


def _menu(window: QMainWindow, title: str) -> QMenu:
    for action in window.menuBar().actions():
        menu = action.menu()
        if menu is not None and menu.title() == title:
            return menu
    return window.menuBar().addMenu(title)


def build_actions(window: QMainWindow, handlers: Mapping[str, Callable[[], object]],
                  specs: tuple[ActionSpec, ...] = ACTIONS) -> dict[str, QAction]:
    """One QAction per spec, in its menu, triggering `handlers[spec.name]`; returned by name.
    Shortcuts work window-wide (a text field keeps plain keys such as Space for typing)."""
    actions: dict[str, QAction] = {}
    for spec in specs:
        menu = _menu(window, spec.menu)
        if spec.separator_before and menu.actions():
            menu.addSeparator()
        action = QAction(spec.text, window)
        action.setObjectName(f"action_{spec.name}")
        if spec.shortcuts:
            action.setShortcuts([QKeySequence(s) for s in spec.shortcuts])
            action.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        if spec.tip:
            action.setToolTip(spec.tip)
            action.setStatusTip(spec.tip)
        handler = handlers[spec.name]
        action.triggered.connect(lambda _checked=False, h=handler: h())
        menu.addAction(action)
        actions[spec.name] = action
    return actions


def shortcut_rows(specs: tuple[ActionSpec, ...] = ACTIONS) -> list[tuple[str, str]]:
    """(keys, what it does) for every command with a key, as the platform spells the keys."""
    rows = []
    for spec in specs:
        if spec.shortcuts:
            keys = " or ".join(QKeySequence(s).toString(QKeySequence.SequenceFormat.NativeText)
                               for s in spec.shortcuts)
            rows.append((keys, spec.text.replace("&", "").rstrip("…")))
    return rows
