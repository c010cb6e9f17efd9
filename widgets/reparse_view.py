"""Re-parse and export: read the selected request again under other settings, see what changes.

Owns `ReparseView`: choose the start state (thinking or not), the call family and
`stream_tools`, re-run the output through a fresh parser token by token (`track.reparse`), and
see a line diff of the two readings (reasoning, content, calls, anomalies, finish reason). Both
sides read the output as the track's `Reading` says (engine/parse/reading.py), the request's
policy included (one call per reply), so "as shown" is what the window showed and the other
side differs only by the settings chosen here. `Export fixture…` writes the request as a parser
test fixture (`track.fixture()`: raw output, chunks, its reading, expected result).
`result_text()` and `diff()` are pure functions so they are tested without a window. GUI thread
only.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
from pathlib import Path

from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from engine.parse import families
from engine.parse.events import ANOMALY_KINDS, ParseResult
from inspector.tracks import Track
from widgets.text_pane import TextPane
from widgets.theme import COLOURS, MUTED, TEXT, formats


def result_text(result: ParseResult) -> list[str]:
    """A result as lines, sections in a fixed order, for a readable line diff."""
    lines = ["== reasoning =="]
    lines += result.reasoning.splitlines() or [""]
    lines.append("== content ==")
    lines += result.content.splitlines() or [""]
    lines.append("== tool calls ==")
    for c in result.tool_calls:
        lines.append(f"{c.name}:")
        lines += json.dumps(c.arguments, indent=2, ensure_ascii=False).splitlines()
    lines.append("== anomalies ==")
    lines += [f"{k}: {result.anomalies.get(k, 0)}" for k in ANOMALY_KINDS
              if result.anomalies.get(k, 0)]
    lines.append(f"== finish_reason: {result.finish_reason}")
    return lines


def diff(before: ParseResult, after: ParseResult) -> list[str]:
    """Unified diff lines; empty when both readings agree."""
    return list(difflib.unified_diff(result_text(before), result_text(after),
                                     "as shown", "re-parsed", n=2, lineterm=""))


def summary(before: ParseResult, after: ParseResult) -> str:
    parts = []
    for name, a, b in (("reasoning", len(before.reasoning), len(after.reasoning)),
                       ("content", len(before.content), len(after.content)),
                       ("calls", len(before.tool_calls), len(after.tool_calls)),
                       ("anomalies", sum(before.anomalies.values()),
                        sum(after.anomalies.values()))):
        parts.append(f"{name} {a}" + (f" → {b}" if a != b else ""))
    return " · ".join(parts) + f" · finish {before.finish_reason}" + (
        f" → {after.finish_reason}" if before.finish_reason != after.finish_reason else "")


class ReparseView(QWidget):
    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.track = None
        self.start = QComboBox()
        self.start.addItems(["reasoning", "content"])
        self.start.setToolTip("Where parsing starts: in reasoning (the prompt opened <think>)"
                              " or in content")
        self.family = QComboBox()
        self.family.addItems(list(families.NAMES))
        self.stream_tools = QCheckBox("stream_tools")
        self.run_btn = QPushButton("Re-parse")
        self.export_btn = QPushButton("Export fixture…")
        self.export_btn.setToolTip("Save this request as a parser test fixture: raw output, "
                                   "chunks, settings and the expected result")
        self.summary = QLabel("Select a request.")
        self.summary.setStyleSheet(f"color: {MUTED};")
        self.summary.setWordWrap(True)
        self.out = TextPane(mono=True)
        row = QHBoxLayout()
        for label, w in (("start", self.start), ("family", self.family)):
            row.addWidget(QLabel(label))
            row.addWidget(w)
        row.addWidget(self.stream_tools)
        row.addWidget(self.run_btn)
        row.addStretch(1)
        row.addWidget(self.export_btn)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(4, 4, 4, 4)
        lay.addLayout(row)
        lay.addWidget(self.summary)
        lay.addWidget(self.out)
        self.run_btn.clicked.connect(self.reparse)
        self.export_btn.clicked.connect(self._export_clicked)

    def set_track(self, track: Track | None) -> None:
        """Show a request's own settings (nothing is re-parsed until asked)."""
        self.track = track
        self.out.clear_all()
        if track is None:
            self.summary.setText("Select a request.")
            return
        self.start.setCurrentText(track.start_state)
        self.family.setCurrentText(track.family)
        self.stream_tools.setChecked(bool(track.stream_tools))
        reading = track.reading
        policy = ", one call per reply" if reading.one_call else ""
        self.summary.setText(f"{track.id}: parsed with start={reading.start}, "
                             f"family={reading.family}, stream_tools={reading.stream_tools}"
                             f"{policy}. Change a setting and re-parse to see what differs.")

    def reparse(self) -> list[str]:
        """Re-parse the selected request with the chosen settings; returns the diff lines."""
        track = self.track
        if track is None or track.released:
            self.summary.setText("Nothing to re-parse (no request, or its document was "
                                 "released).")
            return []
        _, before = track.reparse()
        chosen = dataclasses.replace(track.reading, start=self.start.currentText(),
                                     family=self.family.currentText(),
                                     stream_tools=self.stream_tools.isChecked())
        _, after = track.reparse(chosen)
        lines = diff(before, after)
        self.summary.setText(summary(before, after) if lines else
                             "Same reading: these settings change nothing for this output.")
        f = formats()
        self.out.clear_all()
        self.out.begin()
        try:
            for line in lines:
                colour = TEXT
                if line.startswith("+") and not line.startswith("+++"):
                    colour = "#7bd88f"
                elif line.startswith("-") and not line.startswith("---"):
                    colour = COLOURS["anomaly"]
                elif line.startswith("@@") or line.startswith("=="):
                    colour = MUTED
                self.out.append(line + "\n", f.plain(colour))
        finally:
            self.out.end_batch()
        return lines

    def export(self, path: Path | str) -> Path:
        """Write the selected request as a fixture JSON file."""
        path = Path(path)
        data = self.track.fixture()
        path.write_text(json.dumps(data, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
        self.summary.setText(f"Exported {self.track.id} to {path} "
                             f"({len(data['chunks'])} chunks, expected "
                             f"{data['expected']['finish_reason']}).")
        return path

    def _export_clicked(self) -> None:
        track = self.track
        if track is None or track.released:
            return
        path, _ = QFileDialog.getSaveFileName(self, "Export fixture", f"{track.id}.json",
                                              "JSON (*.json)")
        if path:
            self.export(path)
