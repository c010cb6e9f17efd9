"""The playback bar: open a recording; play, pause, step, speed, seek; previous/next request.

Owns `PlaybackBar`, a thin view over a Qt-free playback model (`inspector.playback.Playback`, passed
in, duck-typed: items, index, playing, speed, play/pause/step/seek/select/set_speed). Buttons
call the model; `refresh()` (frame timer) mirrors the model back into the widgets with signals
blocked, so a refresh never reads as a user's seek. GUI thread only.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSlider,
    QStyle,
    QWidget,
)

from inspector.playback import Playback
from widgets.theme import MUTED

SPEEDS = (("1×", 1.0), ("10×", 10.0), ("instant", 0.0))


class PlaybackBar(QWidget):
    open_requested = Signal()
    navigated = Signal()  # the user chose another request (previous / next)

    def __init__(self, playback: Playback, parent=None) -> None:
        super().__init__(parent)
        self.playback = playback
        self.open_btn = QPushButton("Open recording…")
        self.open_btn.setToolTip("Open a Prism recording (.jsonl) or a plain text model output;"
                                 " or drop one on the window")
        # Standard icons: media glyphs are missing from many fonts.
        icon = self.style().standardIcon
        sp = QStyle.StandardPixmap
        self._icons = {"play": icon(sp.SP_MediaPlay), "pause": icon(sp.SP_MediaPause)}
        self.prev_btn = QPushButton(icon(sp.SP_MediaSkipBackward), "")
        self.prev_btn.setToolTip("Previous request")
        self.play_btn = QPushButton(self._icons["play"], "Play")
        self.step_btn = QPushButton(icon(sp.SP_MediaSeekForward), "Step")
        self.step_btn.setToolTip("Pause and feed one token")
        self.next_btn = QPushButton(icon(sp.SP_MediaSkipForward), "")
        self.next_btn.setToolTip("Next request")
        self.speed = QComboBox()
        for label, value in SPEEDS:
            self.speed.addItem(label, value)
        self.speed.setToolTip("Playback speed: as recorded, ten times faster, or at once")
        self.slider = QSlider(Qt.Orientation.Horizontal)
        self.slider.setToolTip("Seek within the current request (token position)")
        self.slider.setMinimumWidth(180)
        self.position = QLabel("no recording")
        self.position.setStyleSheet(f"color: {MUTED};")
        self.position.setMinimumWidth(190)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(4, 2, 4, 2)
        for w in (self.open_btn, self.prev_btn, self.play_btn, self.step_btn, self.next_btn,
                  self.speed):
            lay.addWidget(w)
        lay.addWidget(self.slider, 1)
        lay.addWidget(self.position)
        self.open_btn.clicked.connect(self.open_requested)
        self.play_btn.clicked.connect(self._toggle)
        self.step_btn.clicked.connect(lambda: self._do(self.playback.step))
        self.prev_btn.clicked.connect(lambda: self._jump(-1))
        self.next_btn.clicked.connect(lambda: self._jump(1))
        self.speed.currentIndexChanged.connect(
            lambda i: self._do(self.playback.set_speed, self.speed.itemData(i)))
        self.slider.valueChanged.connect(lambda v: self._do(self.playback.seek, v))
        self.refresh()

    def set_speed(self, value: float) -> None:
        """Choose the entry for `value` (adding it when it is not one of the presets)."""
        i = self.speed.findData(value)
        if i < 0:
            self.speed.addItem(f"{value:g}×", value)
            i = self.speed.count() - 1
        self.speed.setCurrentIndex(i)

    def _do(self, fn, *args) -> None:
        fn(*args)
        self.refresh()

    def _toggle(self) -> None:
        self._do(self.playback.toggle)

    def _jump(self, delta: int) -> None:
        pb = self.playback
        if pb.items:
            pb.pause()
            self._do(pb.select, max(0, min(len(pb.items) - 1, pb.index + delta)))
            self.navigated.emit()

    def refresh(self) -> None:
        pb = self.playback
        has = bool(pb.items)
        for w in (self.prev_btn, self.play_btn, self.step_btn, self.next_btn, self.slider):
            w.setEnabled(has)
        self.play_btn.setText("Pause" if pb.playing else "Play")
        self.play_btn.setIcon(self._icons["pause" if pb.playing else "play"])
        it = pb.current
        widgets = (self.slider, self.speed)
        for w in widgets:
            w.blockSignals(True)
        try:
            i = self.speed.findData(pb.speed)
            if i >= 0:
                self.speed.setCurrentIndex(i)
            if it is None:
                self.slider.setRange(0, 0)
                self.position.setText("no recording")
                return
            n = len(it.tokens)
            self.slider.setRange(0, n + 1)
            self.slider.setValue(it.pos)
            where = "done" if it.pos > n else f"{it.pos}/{n} tokens"
            self.position.setText(f"request {pb.index + 1}/{len(pb.items)} · {where}")
        finally:
            for w in widgets:
                w.blockSignals(False)
