"""The *Re-run on…* dialog: what to send again, and to which engine.

Owns `RerunDialog`. What: the request selected in the list, or the whole recording it was
played from (when it was). Which engine, as `prism rerun` names one: a GGUF file (`--model`,
with a file chooser), a built-in pack (`--pack`, the names the window was given), an upstream
server (`--upstream URL`) or, in a window serving several models, one of them (`models`: loaded
if it is not, no engine of its own); and a cap on each reply's tokens (`--max-tokens`, none: as
recorded). OK is enabled only when the choice is complete; `choice()` returns it as an
`EngineChoice` (inspector/rerun.py) and `whole_recording()` says what to send. The window opens
it (widgets/main_window.py) and starts the rerun on accept. `rerun_blocker` says why a row
cannot be re-run at all (the window then turns the action off, with that as its tooltip,
rather than fail after the dialog). GUI thread only.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from PySide6.QtWidgets import (
    QButtonGroup,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QRadioButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from engine.record.reader import is_recording
from inspector.rerun import EngineChoice
from inspector.tracks import Track
from widgets.theme import MUTED

DEFAULT_MAX_TOKENS = 256  # a rerun is a look at another engine, not a long generation


def _is_recording(path: Path) -> bool:
    try:
        return is_recording(path)
    except OSError:  # gone since it was opened
        return False


def rerun_blocker(track: Track | None, recording: Path | None) -> str | None:
    """Why *Re-run on…* cannot start for this row (None: it can). `recording`: the open
    recording the row was played from, if any (its whole recording can still be sent)."""
    if track is None:
        return "Select a request in the list first"
    if track.request is None and (recording is None or not _is_recording(recording)):
        return (f"{track.id} holds no request to send again: it is a model output from a "
                "text file, or a row whose request the window no longer holds")
    return None


class RerunDialog(QDialog):
    """See the module docstring. `request`: the selected request's id; `recording`: the name
    of the recording it was played from and its request count, or None; `alone`: whether the
    selected row holds a request to send by itself."""

    def __init__(self, request: str, recording: tuple[str, int] | None,
                 packs: Sequence[str], parent: QWidget | None = None,
                 models: Sequence[str] = (), alone: bool = True) -> None:
        super().__init__(parent)
        self.setWindowTitle("Re-run on…")
        self.setObjectName("rerun_dialog")

        what = QGroupBox("Send again")
        self.one = QRadioButton(f"the selected request ({request})")
        self.whole = QRadioButton(f"its whole recording ({recording[0]}, {recording[1]} "
                                  "requests)" if recording else "its whole recording")
        self.whole.setEnabled(recording is not None)
        if recording is None:
            self.whole.setToolTip("The selected request was not played from a recording")
        self.one.setEnabled(alone)
        if not alone:  # a plain text output: no request of its own, only its file's
            self.one.setToolTip("The selected row holds no request to send (a text output)")
        (self.one if alone or recording is None else self.whole).setChecked(True)
        lay = QVBoxLayout(what)
        lay.addWidget(self.one)
        lay.addWidget(self.whole)

        engine = QGroupBox("To the engine")
        self.kinds = QButtonGroup(self)
        self.model_btn = QRadioButton("a GGUF file")
        self.pack_btn = QRadioButton("a built-in pack")
        self.upstream_btn = QRadioButton("an upstream server")
        self.model_path = QLineEdit()
        self.model_path.setPlaceholderText("/path/to/model.gguf")
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._browse)
        self.pack = QComboBox()
        self.pack.addItems(list(packs))
        self.upstream = QLineEdit()
        self.upstream.setPlaceholderText("http://gpu-box:8000/v1")
        self.catalog_btn = QRadioButton("a model of this window")
        self.catalog = QComboBox()
        self.catalog.setObjectName("rerun_catalog")
        self.catalog.addItems(list(models))
        form = QFormLayout(engine)
        row = QHBoxLayout()
        row.addWidget(self.model_path, 1)
        row.addWidget(browse)
        form.addRow(self.model_btn, row)
        form.addRow(self.pack_btn, self.pack)
        form.addRow(self.upstream_btn, self.upstream)
        if models:  # serving several models: the window's own come first
            form.insertRow(0, self.catalog_btn, self.catalog)
        for i, b in enumerate((self.model_btn, self.pack_btn, self.upstream_btn,
                               self.catalog_btn)):
            self.kinds.addButton(b, i)
        (self.catalog_btn if models else self.pack_btn if packs
         else self.model_btn).setChecked(True)

        self.max_tokens = QSpinBox()
        self.max_tokens.setRange(0, 1 << 20)
        self.max_tokens.setSpecialValueText("as recorded")
        self.max_tokens.setValue(DEFAULT_MAX_TOKENS)
        self.max_tokens.setToolTip("The most tokens each reply may generate (a recorded "
                                   "request that asked for fewer keeps its own)")
        caps = QFormLayout()
        caps.addRow("max tokens per reply", self.max_tokens)
        note = QLabel("Sampling and seed as recorded. Each request streams into a track of its "
                      "own (Source: rerun); the Compare tab then holds each against its "
                      "original.")
        note.setWordWrap(True)
        note.setStyleSheet(f"color: {MUTED};")

        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok
                                        | QDialogButtonBox.StandardButton.Cancel)
        self.ok = self.buttons.button(QDialogButtonBox.StandardButton.Ok)
        self.ok.setText("Re-run")
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        outer = QVBoxLayout(self)
        for w in (what, engine):
            outer.addWidget(w)
        outer.addLayout(caps)
        outer.addWidget(note)
        outer.addWidget(self.buttons)

        self.kinds.idToggled.connect(lambda *_: self._check())
        self.model_path.textChanged.connect(self._check)
        self.upstream.textChanged.connect(self._check)
        self.pack.currentTextChanged.connect(self._check)
        self.catalog.currentTextChanged.connect(self._check)
        self._check()

    def _browse(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "A GGUF model to re-run on", "",
                                              "GGUF models (*.gguf);;All files (*)")
        if path:
            self.model_path.setText(path)
            self.model_btn.setChecked(True)

    def _value(self) -> tuple[str, str]:
        if self.model_btn.isChecked():
            return "model", self.model_path.text().strip()
        if self.pack_btn.isChecked():
            return "pack", self.pack.currentText().strip()
        if self.catalog_btn.isChecked():
            return "catalog", self.catalog.currentText().strip()
        return "upstream", self.upstream.text().strip()

    def _check(self, *_args) -> None:
        self.ok.setEnabled(bool(self._value()[1]))

    def choice(self) -> EngineChoice:
        kind, value = self._value()
        return EngineChoice(kind, value, max_tokens=self.max_tokens.value() or None)

    def whole_recording(self) -> bool:
        return self.whole.isChecked()
