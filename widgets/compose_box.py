"""The compose box: send a chat to the same engine the server uses, streamed into the panes.

Owns `ComposeBox`: system prompt, message, tools (OpenAI JSON), thinking (pack default, on,
off), sampling (temperature, top_p, seed), max tokens and top-k alternatives to record, *Guard
calls* (the request's `guard_calls`: once the model opens a call, the rest follows the tool's
schema; it starts as the app's --no-guard-calls says, and is off and greyed out for an engine
that runs no guard: a replay, an upstream); Send and Stop. It builds an
`engine.chat.request.ChatRequest` (client "gui") and hands it to a `submit` callable given by
the app (which calls `Service.submit` and returns the run); the request then appears in the
list like any other and its tokens arrive through the same queue. Errors (bad tools JSON,
context overflow, template errors) are shown under the buttons, never raised. GUI thread only.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from engine.chat.request import ChatRequest, Message, Sampling
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
        row = QHBoxLayout()
        for label, w in (("thinking", self.thinking), ("temperature", self.temperature),
                         ("top_p", self.top_p), ("seed", self.seed),
                         ("max tokens", self.max_tokens), ("top-k", self.top_k)):
            row.addWidget(QLabel(label))
            row.addWidget(w)
        row.addWidget(self.guard)
        row.addStretch(1)
        row.addWidget(self.send_btn)
        row.addWidget(self.stop_btn)
        form.addRow("System", self.system)
        form.addRow("Message", self.message)
        form.addRow("Tools", self.tools)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(4, 4, 4, 4)
        lay.addLayout(form)
        lay.addLayout(row)
        lay.addWidget(self.status)
        self.send_btn.clicked.connect(self.send)
        self.stop_btn.clicked.connect(self.stop)

    def request(self) -> ChatRequest:
        """The request the fields describe (raises ValueError on bad tools JSON)."""
        messages = []
        if self.system.toPlainText().strip():
            messages.append(Message("system", self.system.toPlainText()))
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
        return ChatRequest(
            messages=tuple(messages),
            tools=tools,
            sampling=Sampling(temperature=self.temperature.value(), top_p=self.top_p.value(),
                              seed=None if self.seed.value() < 0 else self.seed.value()),
            max_tokens=self.max_tokens.value(),
            top_logprobs=self.top_k.value(),
            thinking=self.thinking.currentData(),
            # Always stated, so the box's switch is what the request gets, whatever the
            # server's default.
            guard_calls=self.guard.isChecked(),
            api="gui",
            model="",
        )

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
