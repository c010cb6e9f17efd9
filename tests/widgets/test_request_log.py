"""widgets/request_log.py: a request's own notes (its tools were not shown to the model) are a
badge beside the anomalies, with a tooltip saying why (issue 9, item 4)."""

from __future__ import annotations

from PySide6.QtCore import Qt

from inspector.tracks import Track
from widgets.request_log import BADGES, RequestLogModel


def test_tools_ignored_is_a_badge_with_its_reason(qtbot):
    model = RequestLogModel()
    plain = Track(id="a")
    marked = Track(id="b", notes=("tools_ignored",))
    marked.anomalies["unknown_tool"] = 2
    model.add(plain)
    model.add(marked)  # newest first: row 0
    col = 9
    assert model.index(0, col).data(BADGES) == [("no tools shown", 1), ("unknown tool", 2)]
    assert model.index(0, col).data().startswith("no tools shown")
    assert "does not render `tools`" in model.index(0, col).data(Qt.ItemDataRole.ToolTipRole)
    assert model.index(1, col).data(BADGES) == [] and model.index(1, col).data() == ""
