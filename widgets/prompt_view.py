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
from collections.abc import Callable
from dataclasses import dataclass

from PySide6.QtGui import QColor, QTextCharFormat, QTextCursor, QTextFormat
from PySide6.QtWidgets import QHBoxLayout, QLabel, QToolButton, QVBoxLayout, QWidget

from engine.chat.detect import format_label
from engine.chat.request import ChatRequest
from engine.parse.events import SPECIAL_TOKEN_IN_CONTENT
from engine.record import context, forensics
from inspector.tracks import Track
from widgets.context_panel import ContextPanel
from widgets.text_pane import TextPane
from widgets.theme import MUTED, TEXT, formats

_SPECIAL = re.compile(r"<\|[^|<>\s]{1,40}\|>|</?(?:think|tool_call|tool_response|tools)>"
                      r"|<(?:start_of_turn|end_of_turn|bos|eos)>|\[/?INST\]")
# What a span of the prompt is to the cache: "reused", "held" (matched, not reused) or
# "differs" (the first differing token). Far from theme.py's properties, which count up from 1.
CACHE = QTextFormat.Property.UserProperty + 40
REUSED_BG, HELD_BG, DIFFERS_BG, DIFFERS_FG = "#1f3a2b", "#30343c", "#7a4a12", "#ffd08a"


INSERTED_BG, DELETED_BG = "#1f4a2b", "#5a2228"


@dataclass(frozen=True, slots=True)
class ContextSource:
    """What the view needs to count a prompt's parts: the model's tokenizer (`name` says
    whose), the service's render of a request (to locate tools; None: counted as JSON), and
    the request shown before a given one (the diff's other side)."""

    tokenize: Callable[[str], list[int]]
    name: str = ""
    render: Callable[[ChatRequest], str] | None = None
    previous: Callable[[Track], Track | None] | None = None
    detokenize: Callable[[list[int]], str] | None = None


class PromptView(QWidget):
    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.label = QLabel("Prompt")
        self.label.setStyleSheet(f"color: {MUTED}; padding: 2px;")
        self.label.setWordWrap(True)
        self.diff_button = QToolButton()
        self.diff_button.setText("Diff with previous")
        self.diff_button.setCheckable(True)
        self.diff_button.setToolTip("Show this prompt against the previous request's, token by "
                                    "token: what was added, what changed, where the cache's "
                                    "prefix ends")
        self.diff_button.toggled.connect(lambda _on: self._redraw())
        self.context = ContextPanel()
        self.context.part_chosen.connect(self._show_part)
        self.pane = TextPane(mono=True)
        head = QHBoxLayout()
        head.setContentsMargins(0, 0, 0, 0)
        head.addWidget(self.label, 1)
        head.addWidget(self.diff_button)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(2)
        lay.addLayout(head)
        lay.addWidget(self.context)
        lay.addWidget(self.pane, 1)
        self.track: Track | None = None
        self._gen = -1
        self.source: ContextSource | None = None
        self.breakdown: context.Breakdown | None = None
        self.diff: context.PromptDiff | None = None
        self._breakdowns: dict[tuple[str, str, int], context.Breakdown] = {}
        self.context.setVisible(False)

    def set_context_source(self, source: ContextSource | None) -> None:
        self.source = source
        self._breakdowns.clear()
        self._redraw()

    def _redraw(self) -> None:
        track, self.track = self.track, None
        self.show_track(track)

    def show_track(self, track: Track | None) -> None:
        if track is self.track and track is not None and track.generation == self._gen:
            return  # the prompt never changes while a request runs
        self.track = track
        self._gen = track.generation if track is not None else -1
        self.pane.clear_all()
        self.diff = None
        self._count(track)
        if track is None:
            self.label.setText("Prompt")
            return
        if track.released:
            self.label.setText("Prompt released (old request; the list keeps its summary only)")
            return
        if self.diff_button.isChecked() and self._show_diff(track):
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
        unused = self.breakdown.unused_tools() if self.breakdown is not None else ()
        never = f" · tools never called: {', '.join(unused)}" if unused else ""
        self.label.setText(f"Prompt · {tokens} · {len(prompt)} chars · {start}"
                           f" · family {format_label(track.family)}{found}{cache}{never}")

    def _count(self, track: Track | None) -> None:
        """The breakdown of the track's prompt, counted once per prompt."""
        src = self.source
        if track is None or src is None or not track.prompt:
            self.breakdown = None
        else:
            key = (track.source, track.id, len(track.prompt))
            if key not in self._breakdowns:
                self._breakdowns[key] = context.of_request(track.prompt, track.request,
                                                           src.tokenize, src.render)
            self.breakdown = self._breakdowns[key]
        self.context.set_breakdown(self.breakdown)
        self.context.setVisible(self.breakdown is not None)

    def _show_part(self, start: int, end: int) -> None:
        if self.track is None or self.diff is not None:
            return
        c = QTextCursor(self.pane.document())
        c.setPosition(_qt_pos(self.track.prompt, start))
        c.setPosition(_qt_pos(self.track.prompt, end), QTextCursor.MoveMode.KeepAnchor)
        self.pane.setTextCursor(c)
        self.pane.centerCursor()

    def _show_diff(self, track: Track) -> bool:
        """Draw the previous request's prompt against this one, token-aligned: equal runs
        dimmed (long ones folded), inserted tokens on green, removed ones struck on red."""
        src = self.source
        other = src.previous(track) if src is not None and src.previous is not None else None
        if src is None or other is None or not other.prompt:
            self.label.setText("Prompt · diff: no earlier request with a prompt to compare")
            return True
        d = self.diff = context.prompt_diff(other.prompt, track.prompt, src.tokenize)
        text = src.detokenize or (lambda ids: " ".join(str(i) for i in ids))
        f = formats()
        ins, dele = QTextCharFormat(f.plain(TEXT)), QTextCharFormat(f.plain(MUTED))
        ins.setBackground(QColor(INSERTED_BG))
        dele.setBackground(QColor(DELETED_BG))
        dele.setFontStrikeOut(True)
        self.pane.begin()
        try:
            for op in d.ops:
                if op.tag == "equal":
                    n = op.a1 - op.a0
                    shown = list(d.a[op.a0:op.a1])
                    if n > 48:
                        self.pane.append(text(shown[:16]), f.plain(MUTED))
                        self.pane.append(f" …{n - 32} equal tokens… ", f.state("markup"))
                        shown = shown[-16:]
                    self.pane.append(text(shown), f.plain(MUTED))
                    continue
                if op.a1 > op.a0:
                    self.pane.append(text(list(d.a[op.a0:op.a1])), dele)
                if op.b1 > op.b0:
                    self.pane.append(text(list(d.b[op.b0:op.b1])), ins)
        finally:
            self.pane.end_batch()
        added = sum(op.b1 - op.b0 for op in d.changed)
        removed = sum(op.a1 - op.a0 for op in d.changed)
        self.label.setText(f"Prompt · diff with {other.id}: {d.common_prefix} tokens shared "
                           f"from the start · {added} added · {removed} removed · "
                           f"{len(d.changed)} change(s)")
        return True

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
