"""The prompt view: the rendered prompt a request sent to the model, and its token count.

Owns `PromptView`. Special tokens and tags (`<|im_start|>`, `<think>`, `<tool_call>`, ...) are
drawn in the markup colour so the template's structure shows; special tokens that came from
message content (`Track.content_specials`, engine/chat/special.py) in the anomaly colour. A note
says whether the prompt left `<think>` open (the parser's start state). GUI thread only; reads
tracks.
"""

from __future__ import annotations

import re

from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from engine.parse.events import SPECIAL_TOKEN_IN_CONTENT
from inspector.tracks import Track
from widgets.text_pane import TextPane
from widgets.theme import MUTED, TEXT, formats

_SPECIAL = re.compile(r"<\|[^|<>\s]{1,40}\|>|</?(?:think|tool_call|tool_response|tools)>"
                      r"|<(?:start_of_turn|end_of_turn|bos|eos)>|\[/?INST\]")


class PromptView(QWidget):
    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.label = QLabel("Prompt")
        self.label.setStyleSheet(f"color: {MUTED}; padding: 2px;")
        self.pane = TextPane(mono=True)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(2)
        lay.addWidget(self.label)
        lay.addWidget(self.pane)
        self.track: Track | None = None
        self._gen = -1

    def show_track(self, track: Track | None) -> None:
        if track is self.track and track is not None and track.generation == self._gen:
            return  # the prompt never changes while a request runs
        self.track = track
        self._gen = track.generation if track is not None else -1
        self.pane.clear_all()
        if track is None:
            self.label.setText("Prompt")
            return
        if track.released:
            self.label.setText("Prompt released (old request; the list keeps its summary only)")
            return
        prompt = track.prompt
        f = formats()
        # A special token the messages wrote is marked as the anomaly (or drawn as the plain
        # text it was tokenized as, with --escape-special); the template's own as markup.
        from_content = f.plain(TEXT) if track.special_escaped \
            else f.anomaly(SPECIAL_TOKEN_IN_CONTENT)
        marks = [(a, b, from_content) for a, b in track.content_specials]
        starts = {a for a, _, _ in marks}
        marks += [(m.start(), m.end(), f.state("markup")) for m in _SPECIAL.finditer(prompt)
                  if m.start() not in starts]
        marks.sort(key=lambda mark: mark[0])
        self.pane.begin()
        try:
            pos = 0
            for a, b, fmt in marks:
                if a < pos:
                    continue
                self.pane.append(prompt[pos:a], f.plain(TEXT))
                self.pane.append(prompt[a:b], fmt)
                pos = b
            self.pane.append(prompt[pos:], f.plain(TEXT))
        finally:
            self.pane.end_batch()
        sb = self.pane.verticalScrollBar()
        sb.setValue(sb.maximum())  # the end of the prompt is where the model takes over
        n = track.prompt_tokens
        start = "open <think>: parsing starts in reasoning" if track.start_state == "reasoning" \
            else "parsing starts in content"
        tokens = f"{n} tokens" if n else "token count not recorded"
        found = ""
        if track.content_specials:
            how = "kept as text" if track.special_escaped else "read as control tokens"
            found = f" · special tokens in message content: {how}"
        self.label.setText(f"Prompt · {tokens} · {len(prompt)} chars · {start}"
                           f" · dialect {track.dialect}{found}")
