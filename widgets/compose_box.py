"""The compose box: send a chat to the same engine the server uses, streamed into the panes.

Owns `ComposeBox`: system prompt, message, tools (OpenAI JSON), thinking (pack default, on,
off), sampling (temperature, top_p, seed), max tokens and top-k alternatives to record, *Guard
calls* (the request's `guard_calls`: once the model opens a call, the rest follows the tool's
schema; it starts as the app's --no-guard-calls says, and is off and greyed out for an engine
that runs no guard: a replay, an upstream); Send and Stop. It builds an
`engine.chat.request.ChatRequest` (client "gui") and hands it to a `submit` callable given by
the app (which calls `Service.submit` and returns the run); the request then appears in the
list like any other and its tokens arrive through the same queue. Errors (bad tools JSON,
context overflow, template errors) are shown under the buttons, never raised. `load(request)`
(Request → *Copy to Compose*) fills the box from any request, live or recorded: its system
prompt, its last user message, tools and sampling; the messages between them (an agent's turns
and tool results) are kept as the request's history, named above the fields, sent with it
until *Clear* — and its other settings (stop strings, tool choice, min_p...) ride along.
Serving several models (`set_models`), a *model* chooser lists them and names the request's
`model`; `submit` may then return None: the model is loading and the request goes once it
has loaded. GUI thread only.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable

from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from engine.chat.request import ChatRequest, Message, Sampling
from engine.record.recording import request_from_dict
from engine.service import Run
from widgets.theme import COLOURS, MUTED

EXAMPLE_TOOLS = """[{"type": "function", "function": {"name": "get_weather",
  "description": "Current weather for a city",
  "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                 "required": ["city"]}}}]"""


class ComposeBox(QWidget):
    def __init__(self, parent=None, submit: Callable[[ChatRequest], Run] | None = None,
                 guard_calls: bool | None = True) -> None:
        """`guard_calls`: *Guard calls* at start; None: the engine runs no guard."""
        super().__init__(parent)
        self.submit = submit
        self.run = None
        self.history: tuple[Message, ...] = ()  # a loaded request's turns before its last
        self._loaded: ChatRequest | None = None  # the request loaded, for its other settings
        self.history_label = QLabel("")
        self.history_label.setWordWrap(True)
        self.history_label.setStyleSheet(f"color: {COLOURS['markup']};")
        self.clear_btn = QPushButton("Clear")
        self.clear_btn.setToolTip("Forget the loaded request: a fresh one-message chat")
        self.clear_btn.clicked.connect(self.clear_loaded)
        self.history_row = QWidget()
        hrow = QHBoxLayout(self.history_row)
        hrow.setContentsMargins(0, 0, 0, 0)
        hrow.addWidget(self.history_label, 1)
        hrow.addWidget(self.clear_btn)
        self.history_row.hide()
        self.system = QPlainTextEdit()
        self.system.setPlaceholderText("System prompt (optional)")
        self.system.setMaximumHeight(48)
        self.message = QPlainTextEdit()
        self.message.setPlaceholderText("Message")
        self.message.setPlainText("What is the capital of Portugal? Answer in one sentence.")
        self.tools = QPlainTextEdit()
        self.tools.setPlaceholderText("Tools: an OpenAI-style JSON list (optional)\n"
                                      + EXAMPLE_TOOLS)
        self.tools.setMaximumHeight(70)
        self.thinking = QComboBox()
        for label, value in (("pack default", None), ("on", True), ("off", False)):
            self.thinking.addItem(label, value)
        self.temperature = QDoubleSpinBox()
        self.temperature.setRange(0.0, 2.0)
        self.temperature.setSingleStep(0.1)
        self.temperature.setValue(0.7)
        self.top_p = QDoubleSpinBox()
        self.top_p.setRange(0.0, 1.0)
        self.top_p.setSingleStep(0.05)
        self.top_p.setValue(0.95)
        self.seed = QSpinBox()
        self.seed.setRange(-1, 2**31 - 1)
        self.seed.setValue(-1)
        self.seed.setSpecialValueText("random")
        self.max_tokens = QSpinBox()
        self.max_tokens.setRange(1, 32768)
        self.max_tokens.setValue(256)
        self.top_k = QSpinBox()
        self.top_k.setRange(0, 20)
        self.top_k.setSpecialValueText("off")
        self.top_k.setToolTip("Record each token's top-k alternatives (shown in the token "
                              "strip; costs about 2% of decode speed)")
        self.model = QComboBox()  # serving several models: which one answers
        self.model.setObjectName("compose_model")
        self.model.setToolTip("The model this request goes to (one not loaded is loaded "
                              "first)")
        self.model_label = QLabel("model")
        self.guard = QCheckBox("Guard calls")
        self.guard.setChecked(bool(guard_calls))
        self.guard.setEnabled(guard_calls is not None)
        self.guard.setToolTip(
            "Once the model opens a real tool call, sample the rest of it under the tool's "
            "schema. Tokens the guard changed are marked in the token strip."
            if guard_calls is not None else
            "This engine runs no call guard (only the local llama engine can: not a replay "
            "or an upstream).")
        self.send_btn = QPushButton("Send")
        self.send_btn.setDefault(True)
        self.stop_btn = QPushButton("Stop")
        self.stop_btn.setEnabled(False)
        self.status = QLabel("")
        self.status.setWordWrap(True)
        self.status.setStyleSheet(f"color: {MUTED};")

        form = QFormLayout()
        form.setContentsMargins(0, 0, 0, 0)
        # Two rows of settings, so the box fits a 1280 px window beside nothing else.
        row, row2 = QHBoxLayout(), QHBoxLayout()
        for target, items in ((row, (("thinking", self.thinking),
                                     ("temperature", self.temperature), ("top_p", self.top_p),
                                     ("seed", self.seed))),
                              (row2, (("max tokens", self.max_tokens),
                                      ("top-k", self.top_k)))):
            for label, w in items:
                target.addWidget(QLabel(label))
                target.addWidget(w)
        row.addStretch(1)
        row2.addWidget(self.model_label)
        row2.addWidget(self.model)
        self.set_models(())
        row2.addWidget(self.guard)
        row2.addStretch(1)
        row2.addWidget(self.send_btn)
        row2.addWidget(self.stop_btn)
        self.send_btn.setToolTip("Send to this window's engine (Ctrl+Enter)")
        form.addRow("System", self.system)
        form.addRow("Message", self.message)
        form.addRow("Tools", self.tools)
        inner = QWidget()
        lay = QVBoxLayout(inner)
        lay.setContentsMargins(4, 4, 4, 4)
        lay.addWidget(self.history_row)
        lay.addLayout(form)
        lay.addLayout(row)
        lay.addLayout(row2)
        lay.addWidget(self.status)
        # In a scroll area: a short tab scrolls the box rather than hold the window's
        # layout to the box's height.
        scroll = QScrollArea()
        scroll.setWidget(inner)
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(scroll)
        self.send_btn.clicked.connect(self.send)
        self.stop_btn.clicked.connect(self.stop)

    def set_models(self, ids) -> None:
        """The models a request may name (serving several); none: the chooser is hidden."""
        current = self.model.currentText()
        self.model.clear()
        self.model.addItems(list(ids))
        if current and self.model.findText(current) >= 0:
            self.model.setCurrentText(current)
        self.model.setVisible(bool(ids))
        self.model_label.setVisible(bool(ids))

    def request(self) -> ChatRequest:
        """The request the fields describe (raises ValueError on bad tools JSON)."""
        messages = []
        if self.system.toPlainText().strip():
            messages.append(Message("system", self.system.toPlainText()))
        messages += self.history
        # A loaded agent turn may end on a tool result: no empty user message after it.
        if self.message.toPlainText().strip() or not self.history:
            messages.append(Message("user", self.message.toPlainText()))
        tools_text = self.tools.toPlainText().strip()
        tools: tuple = ()
        if tools_text:
            try:
                tools = tuple(json.loads(tools_text))
            except (ValueError, TypeError) as e:
                raise ValueError(f"tools: not a JSON list ({e})") from None
            if not all(isinstance(t, dict) for t in tools):
                raise ValueError("tools: every entry must be an object")
        base = self._loaded or ChatRequest(messages=())
        return dataclasses.replace(
            base,
            messages=tuple(messages),
            tools=tools,
            sampling=dataclasses.replace(
                base.sampling if self._loaded else Sampling(),
                temperature=self.temperature.value(), top_p=self.top_p.value(),
                seed=None if self.seed.value() < 0 else self.seed.value()),
            max_tokens=self.max_tokens.value(),
            top_logprobs=self.top_k.value(),
            thinking=self.thinking.currentData(),
            # Always stated, so the box's switch is what the request gets, whatever the
            # server's default.
            guard_calls=self.guard.isChecked(),
            api="gui",
            model=self.model.currentText() if self.model.count() else "",
        )

    def load(self, request: ChatRequest | dict) -> str:
        """Fill the box from a request (a recorded one as its dict); returns a note on the
        history it kept (" with 4 earlier messages", or "")."""
        req = request_from_dict(request) if isinstance(request, dict) else request
        msgs = list(req.messages)
        systems = []
        while msgs and msgs[0].role in ("system", "developer"):
            systems.append(msgs.pop(0).content)
        last = msgs.pop().content if msgs and msgs[-1].role == "user" else ""
        self._loaded, self.history = req, tuple(msgs)
        self.system.setPlainText("\n\n".join(systems))
        self.message.setPlainText(last)
        self.tools.setPlainText(json.dumps(list(req.tools), indent=1) if req.tools else "")
        self.temperature.setValue(req.sampling.temperature)
        self.top_p.setValue(req.sampling.top_p)
        self.seed.setValue(-1 if req.sampling.seed is None else req.sampling.seed)
        self.max_tokens.setValue(req.max_tokens or self.max_tokens.value())
        self.top_k.setValue(min(req.top_logprobs or 0, self.top_k.maximum()))
        self.thinking.setCurrentIndex(max(0, self.thinking.findData(req.thinking)))
        if req.model and self.model.findText(req.model) >= 0:  # serving several models
            self.model.setCurrentText(req.model)
        if req.guard_calls is not None and self.guard.isEnabled():
            self.guard.setChecked(req.guard_calls)
        n = len(self.history)
        note = f" with {n} earlier message{'s' * (n != 1)}" if n else ""
        self.history_label.setText(
            f"Loaded{note}: they are sent before the message below "
            f"({', '.join(m.role for m in self.history[-6:])}{', …' if n > 6 else ''})"
            if n else "Loaded a request: its other settings (stop, tool choice) ride along")
        self.history_row.show()
        return note

    def clear_loaded(self) -> None:
        self._loaded, self.history = None, ()
        self.history_row.hide()

    def send(self):
        """Submit the request; returns the run (or None, with the reason shown)."""
        if self.submit is None:
            self._say("No engine to send to.", error=True)
            return None
        try:
            req = self.request()
            self.run = self.submit(req)
        except Exception as e:  # shown to the user: the box must never take the window down
            self._say(f"{type(e).__name__}: {e}", error=True)
            return None
        if self.run is None:  # its model loads first
            self._say(f"{req.model} is loading: the request is sent once it has loaded")
            return None
        self.stop_btn.setEnabled(True)
        self._say(f"sent as {self.run.id}")
        return self.run

    def stop(self) -> None:
        if self.run is not None:
            self.run.cancel()
            self._say(f"cancelled {self.run.id}")
        self.stop_btn.setEnabled(False)

    def refresh(self) -> None:
        """Frame timer: Stop is only enabled while our last request runs."""
        run = self.run
        if run is not None and run.done and self.stop_btn.isEnabled():
            self.stop_btn.setEnabled(False)
            self._say(f"{run.id}: {run.finish_reason}")

    def _say(self, text: str, error: bool = False) -> None:
        self.status.setStyleSheet(f"color: {COLOURS['anomaly'] if error else MUTED};")
        self.status.setText(text)
