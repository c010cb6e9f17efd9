"""The view layer: Qt widgets of the inspector window.

Rules of the layer (docs/design.md §2, import-linter contracts): imports PySide6, pyqtgraph,
the Qt-free model in `inspector` and engine types, never `llama_cpp` and never `app`. Widgets
read the model; they own no state a test would need a window to check.

Threads: the GUI thread only. Nothing here is called from the engine thread; the window pulls
new events from the model on its frame timer.
"""
