"""The prompt view: the rendered prompt a request sent to the model, and its token count.

Owns `PromptView`. Special tokens and tags (`<|im_start|>`, `<think>`, `<tool_call>`, ...) are
drawn in the markup colour so the template's structure shows; special tokens that came from
message content (`Track.content_specials`, engine/chat/special.py) in the anomaly colour. A note
says whether the prompt left `<think>` open (the parser's start state). With the engine's prefix
match (`Track.prefix`, issue 20) the part of the prompt the best cache held is shaded (green
where it was reused, grey where it was held but not reused: a busy slot, a disk entry cut
shorter), the first differing token is marked, and both carry a tooltip with what the cache
held there instead (engine/record/forensics.py); the view scrolls to that token. GUI thread
only; reads tracks.
"""

from __future__ import annotations

import re

from PySide6.QtGui import QColor, QTextCharFormat, QTextCursor, QTextFormat
from PySide6.QtWidgets import QLabel, QVBoxLayout, QWidget

from engine.parse.events import SPECIAL_TOKEN_IN_CONTENT
from engine.record import forensics
from inspector.tracks import Track
from widgets.text_pane import TextPane
from widgets.theme import MUTED, TEXT, formats

_SPECIAL = re.compile(r"<\|[^|<>\s]{1,40}\|>|</?(?:think|tool_call|tool_response|tools)>"
                      r"|<(?:start_of_turn|end_of_turn|bos|eos)>|\[/?INST\]")
# What a span of the prompt is to the cache: "reused", "held" (matched, not reused) or
# "differs" (the first differing token). Far from theme.py's properties, which count up from 1.
CACHE = QTextFormat.Property.UserProperty + 40
REUSED_BG, HELD_BG, DIFFERS_BG, DIFFERS_FG = "#1f3a2b", "#30343c", "#7a4a12", "#ffd08a"


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
        cache = self._mark_cache(track)
        n = track.prompt_tokens
        start = "open <think>: parsing starts in reasoning" if track.start_state == "reasoning" \
            else "parsing starts in content"
        tokens = f"{n} tokens" if n else "token count not recorded"
        found = ""
        if track.content_specials:
            how = "kept as text" if track.special_escaped else "read as control tokens"
            found = f" · special tokens in message content: {how}"
        self.label.setText(f"Prompt · {tokens} · {len(prompt)} chars · {start}"
                           f" · dialect {track.dialect}{found}{cache}")

    def _mark_cache(self, track: Track) -> str:
        """Shade what the cache held, mark the first differing token, scroll to it; returns
        the label's note ("" without a prefix match)."""
        prefix, t, prompt = track.prefix, track.timings, track.prompt
        note = ""
        if t is not None and t.prompt_tokens and (t.cached_tokens or prefix is not None):
            note = f" · cache: {t.cached_tokens} of {t.prompt_tokens} reused"
            note += f" ({t.disk_tokens} from disk)" if t.disk_tokens else ""
        if prefix is None or not prefix.source:
            return note
        at = forensics.prompt_offset(prompt, prefix)
        place = forensics.locate(prompt, forensics.messages_of(track.request), at)
        tip = forensics.miss_tip(t, prefix, place)
        # Reused is known once the request finished; a playback shows the prefix from its start.
        reused = t is not None and t.cached_tokens >= prefix.held
        shade = _cache_format("reused" if reused else "held", REUSED_BG if reused else HELD_BG,
                              tip)
        # The token starts at `at`; it is marked up to the first char the two texts differ in.
        same = next((i for i, (a, b) in enumerate(zip(prefix.cached_text, prefix.prompt_text,
                                                      strict=False)) if a != b),
                    min(len(prefix.cached_text), len(prefix.prompt_text)))
        end = min(at + same + 1, len(prompt))
        mark = _cache_format("differs", DIFFERS_BG, tip)
        mark.setForeground(QColor(DIFFERS_FG))
        mark.setFontUnderline(True)
        self.pane.merge_format(0, _qt_pos(prompt, at), shade)
        self.pane.merge_format(_qt_pos(prompt, at), _qt_pos(prompt, end), mark)
        c = QTextCursor(self.pane.document())
        c.setPosition(_qt_pos(prompt, at))
        self.pane.setTextCursor(c)
        self.pane.centerCursor()
        return note + f" · left the cache at {place.describe()}"


def _cache_format(kind: str, background: str, tip: str) -> QTextCharFormat:
    # Per request (the tooltip is its own), two per view: no point caching them in theme.py.
    f = QTextCharFormat()
    f.setBackground(QColor(background))
    f.setToolTip(tip)
    f.setProperty(CACHE, kind)
    return f


def _qt_pos(text: str, i: int) -> int:
    """A Python offset in `text` as a QTextDocument position (UTF-16 code units)."""
    head = text[:i]
    return len(head) + sum(1 for ch in head if ord(ch) > 0xFFFF)
