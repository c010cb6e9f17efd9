"""The raw view: the model's output exactly as written, tags included, and its token strip.

Owns `RawView` (the raw text, each event's span in the format of the state that produced it,
markup in the tag colour, the held tail dim at the end, anomalies underlined with a tooltip) and
`TokenStrip` (one box per token, alternating shades so boundaries show; shaded by probability
when the engine recorded top-k alternatives; hover for id, time and alternatives; ids instead of
text on request). The raw text is rebuilt from the events' spans, which tile the output, so what
is drawn is provably what the parser consumed. GUI thread only; reads tracks.
"""

from __future__ import annotations

import json
import math
from bisect import bisect_right

from PySide6.QtWidgets import QCheckBox, QHBoxLayout, QLabel, QSplitter, QVBoxLayout, QWidget

from engine.events import ANOMALY, CONTENT, MARKUP, REASONING, TOOL_CALL, TOOL_START, merge
from inspector.tracks import Track
from widgets.channel_view import anomaly_format
from widgets.text_pane import TextPane
from widgets.theme import MUTED, TEXT, formats
from widgets.track_follower import TrackFollower

_KIND_STATE = {REASONING: "reasoning", CONTENT: "content", MARKUP: "markup"}
# Token shades: (even, odd) backgrounds, then by probability when top-k is known.
_SHADES = ("#273040", "#3a4760")
_PROB_SHADES = (  # p < .1, < .3, < .6, < .9, >= .9 : red to green, two tones each
    ("#5a2630", "#6a2d38"),
    ("#5a4026", "#6a4a2d"),
    ("#4d4d26", "#5a5a2d"),
    ("#2f4d33", "#37593c"),
    ("#284236", "#2f4d3f"),
)


class RawView(TrackFollower, QWidget):
    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.raw = TextPane(mono=True)
        self.strip = TokenStrip()
        self.ids = QCheckBox("ids")
        self.ids.setToolTip("Show token ids instead of their text")
        self.ids.toggled.connect(self.strip.set_show_ids)
        self.label = QLabel("Tokens")
        self.label.setStyleSheet(f"color: {MUTED};")
        head = QHBoxLayout()
        head.setContentsMargins(4, 0, 4, 0)
        head.addWidget(self.label, 1)
        head.addWidget(self.ids)
        strip_box = QWidget()
        lay = QVBoxLayout(strip_box)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(2)
        lay.addLayout(head)
        lay.addWidget(self.strip)
        split = QSplitter()
        split.addWidget(self.raw)
        split.addWidget(strip_box)
        split.setSizes([600, 500])
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(split)
        self.track = None
        self._reset_state()

    def _reset_state(self) -> None:
        self._n = 0
        self._call_start: dict[int, int] = {}
        self._flag_next: str | None = None

    def _reset(self) -> None:
        self._reset_state()
        self.raw.clear_all()
        self.strip.show_track(self.track)

    def _draw_new(self, track: Track) -> None:
        pane = self.raw
        pane.begin()
        try:
            pane.clear_tail()
            new = track.events[self._n :]
            self._n = len(track.events)
            raw = track.raw
            for ev in merge(new):
                self._draw(ev, raw)
            held = track.held
            if held:
                pane.set_tail(held, formats().held(track.state or "reasoning"))
        finally:
            pane.end_batch()
        self.strip.sync()
        n = len(track.tokens)
        self.label.setText(f"Tokens: {n}" + ("  (released)" if track.released else
                                             "  · hover a token for its id, time, top-k"))

    def text(self) -> str:
        """The decided raw text (without the held tail)."""
        full = self.raw.toPlainText()
        tail = self.raw.tail_text
        return full[: len(full) - len(tail)] if tail else full

    def _draw(self, ev, raw: str) -> None:
        f = formats()
        pane = self.raw
        a, b = ev.span
        text = raw[a:b]
        if ev.kind == ANOMALY:
            kind = ev.anomaly or ""
            if text:  # a dropped tag: it is in the raw output, marked
                pane.append(text, anomaly_format(kind, ev.text))
                return
            start = self._call_start.get(ev.index) if ev.index is not None else None
            if start is not None:
                pane.merge_format(start, pane.end(), f.flag(kind))
            self._flag_next = kind  # what follows belongs to it (the call, or its text)
            return
        if ev.kind in (TOOL_START, TOOL_CALL) and ev.index is not None:
            self._call_start.setdefault(ev.index, pane.end())
        fmt = f.state(_KIND_STATE.get(ev.kind, "call"))
        start = pane.append(text, fmt)
        if self._flag_next and text:
            pane.merge_format(start, pane.end(), f.flag(self._flag_next))
            self._flag_next = None


class TokenStrip(TrackFollower, TextPane):
    """One shaded box per token. Tooltips come from a position lookup, not per-token formats,
    so ten thousand tokens cost ten thousand integers."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent, mono=True)
        self.tooltip_provider = self._tip
        self.show_ids = False
        self.track = None
        self._n = 0
        self._ends: list[int] = []

    def set_show_ids(self, on: bool) -> None:
        self.show_ids = on
        self.show_track(self.track)

    def _reset(self) -> None:
        self.clear_all()
        self._n, self._ends = 0, []

    def _draw_new(self, track: Track) -> None:
        toks = track.tokens
        if self._n >= len(toks):
            return
        self.begin()
        try:
            for i in range(self._n, len(toks)):
                tok = toks[i]
                self.append(self._display(tok), self._format(i, tok))
                self._ends.append(self.end())
            self._n = len(toks)
        finally:
            self.end_batch()

    def _display(self, tok) -> str:
        if self.show_ids:
            return f"{tok.id} "
        if not tok.text:
            return "∅"
        return tok.text.replace("\n", "⏎\n").replace("\t", "→")

    def _format(self, i: int, tok):
        shades = _SHADES
        p = self.probability(tok)
        if p is not None:
            shades = _PROB_SHADES[sum(p >= x for x in (0.1, 0.3, 0.6, 0.9))]
        return formats().plain(TEXT, background=shades[i % 2])

    @staticmethod
    def probability(tok) -> float | None:
        """The chosen token's probability, when the engine recorded alternatives."""
        if not tok.top:
            return None
        for text, lp in tok.top:
            if text == tok.text:
                return math.exp(lp)
        return 0.0  # sampled from outside the recorded top-k

    def token_at(self, pos: int) -> int | None:
        i = bisect_right(self._ends, pos)
        return i if i < len(self._ends) else None

    def _tip(self, pos: int) -> str | None:
        i = self.token_at(pos)
        track = self.track
        if i is None or track is None or i >= len(track.tokens):
            return None
        tok = track.tokens[i]
        t0 = track.submitted
        lines = [f"token {i} · id {tok.id} · +{(tok.t - t0) * 1000:.0f} ms",
                 json.dumps(tok.text, ensure_ascii=False)]
        p = self.probability(tok)
        if p is not None:
            lines.append(f"p = {p:.1%}")
            lines += [f"  {math.exp(lp):6.1%}  {json.dumps(t, ensure_ascii=False)}"
                      for t, lp in tok.top]
        return "\n".join(lines)
