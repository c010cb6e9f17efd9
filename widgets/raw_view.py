"""The raw view: the model's output exactly as written, tags included, and its token strip.

Owns `RawView` (the raw text, each event's span in the format of the state that produced it,
markup in the tag colour, the held tail dim at the end, anomalies underlined with a tooltip) and
`TokenStrip` (one box per token, alternating shades so boundaries show; shaded by probability
when the engine recorded top-k alternatives; a token the call guard chose in its own cyan, its
tooltip naming the model's own draw, so "the model wrote this" and "the guard made it write
this" look different; hover for id, time and alternatives; ids instead of text on request).
The raw text is rebuilt from the events' spans, which tile the output, so what is drawn is
provably what the parser consumed; a token the guard chose is marked there too (its
`guided_token` event is zero-width at the token's end: the mark waits until the parser has
decided the token's text). GUI thread only; reads tracks.

A family's call markers (`<｜tool▁sep｜>`, `[ARGS]`, `<|tool_call>`, `<arg_key>` ...) lie inside
the parser's call events, not in markup events (the call's span owns its tags), so the view
finds them in the call's text by the family's own marker table (`call_tags`) and draws them in
the tag colour too (issue 12, "The inspector"; docs/design.md, section 7 "The window").
"""

from __future__ import annotations

import json
import math
import re
from bisect import bisect_right
from functools import cache

from PySide6.QtGui import QColor, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import QCheckBox, QHBoxLayout, QLabel, QSplitter, QVBoxLayout, QWidget

from engine.parse import families
from engine.parse.events import (
    ANOMALY,
    CONTENT,
    EXTRA_TOOL_CALL,
    GUIDED_TOKEN,
    INVALID_ARGUMENTS,
    MARKUP,
    REASONING,
    TOOL_ARGS,
    TOOL_CALL,
    TOOL_START,
    merge,
)
from inspector.tracks import Track
from widgets.channel_view import anomaly_format
from widgets.text_pane import TextPane
from widgets.theme import GUIDED, GUIDED_FG, GUIDED_SHADES, GUIDED_TIP, MUTED, TEXT, formats
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
_CALL_KINDS = (TOOL_START, TOOL_ARGS, TOOL_CALL)
# Whole tags of the XML-like families (their records' `tag_forms`) are drawn whole; their
# quoted attribute values (the call's name, a parameter's key) stay in the call colour, as in
# the tools pane.
_VALUE = re.compile(r'="([^"]*)"')
_LOOKBACK = 256  # a tag split over two call events is found when the second one is drawn


@cache
def call_tags(family: str) -> re.Pattern | None:
    """The family's markers as one pattern (its preserved tokens, its call openers and its
    whole tags); None for `auto` and the `<tool_call>` families, which list none."""
    fam = families.get(family)
    tokens = fam.preserved_tokens if fam is not None else ()
    if not tokens and not (fam is not None and fam.tag_forms):  # Command R+: tag_forms only
        return None
    marks = fam.markers
    literals = {*tokens, *marks.calls} - {*marks.body_openers}
    # Tags open with `<` or `[`; a preserved fragment of one (DSML's `｜DSML｜`) is not a tag.
    literals = {t for t in literals if t.strip() and t[0] in "<["}
    alts = [*fam.tag_forms, *map(re.escape, sorted(literals, key=len, reverse=True))]
    return re.compile("|".join(alts))


def _flag(kind: str, detail: str = "") -> QTextCharFormat:
    """The cached flag format, or a copy whose tooltip also says `detail` (what failed, for
    invalid arguments)."""
    base = formats().flag(kind)
    if not detail:
        return base
    f = QTextCharFormat(base)
    f.setToolTip(f"{base.toolTip()}\n\n{detail[:400]}")
    return f


def guard_tip(drew: str, took: str) -> str:
    """What a guided token's tooltip says: the model's own draw, the token taken."""
    return (f"guard: model drew {json.dumps(drew, ensure_ascii=False)}, "
            f"took {json.dumps(took, ensure_ascii=False)}\n{GUIDED_TIP}")


def _guided_mark(drew: str, took: str) -> QTextCharFormat:
    """Merged onto a guided token's text in the raw view: its state colour stays, the guard's
    background and underline are added (one per token: its tooltip is its own)."""
    f = QTextCharFormat()
    f.setBackground(QColor(GUIDED_SHADES[0]))
    f.setUnderlineStyle(QTextCharFormat.UnderlineStyle.SingleUnderline)
    f.setUnderlineColor(QColor(GUIDED_FG))
    f.setToolTip(guard_tip(drew, took))
    f.setProperty(GUIDED, True)
    return f


def _u16(text: str) -> int:
    """Length in Qt document positions (UTF-16 units: a character past U+FFFF counts two)."""
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


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
        self._flag_next: QTextCharFormat | None = None
        self._flag_index: int | None = None  # the call the pending flag belongs to
        self._call_from = -1  # raw offset where the current run of call events began
        self._drawn = 0  # raw offset up to which decided text is drawn
        self._tok_i = self._tok_end = 0  # tokens walked so far, and where the last one ends
        self._guided: list[tuple[int, int, str, str]] = []  # (a, b, drew, took) to mark

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
            tags = call_tags(track.family)
            for ev in merge(new):
                if ev.kind == GUIDED_TOKEN:
                    self._note_guided(track, ev.span[1])
                    continue
                self._draw(ev, raw, tags)
                self._drawn = max(self._drawn, ev.span[1])
            if self._guided:
                self._mark_guided(raw)
            held = track.held
            if held:
                pane.set_tail(held, formats().held(track.state or "reasoning"))
        finally:
            pane.end_batch()
        self.strip.sync()
        self.label.setText(self.strip.summary(track))

    def _note_guided(self, track: Track, end: int) -> None:
        """The token that ends at raw offset `end` was chosen by the guard: remember its span
        (found by walking the tokens once, in order, as their events come)."""
        toks = track.tokens
        while self._tok_i < len(toks) and self._tok_end < end:
            self._tok_end += len(toks[self._tok_i].text)
            self._tok_i += 1
        tok = toks[self._tok_i - 1] if self._tok_i else None
        if tok is not None and tok.guided is not None and self._tok_end == end:
            self._guided.append((end - len(tok.text), end, tok.guided, tok.text))

    def _mark_guided(self, raw: str) -> None:
        """Mark the guided tokens whose text is drawn; the others wait (held back)."""
        waiting = []
        for a, b, drew, took in self._guided:
            if b > self._drawn:
                waiting.append((a, b, drew, took))
                continue
            start = _u16(raw[:a])
            self.raw.merge_format(start, start + _u16(raw[a:b]), _guided_mark(drew, took))
        self._guided = waiting

    def show_span(self, span: tuple[int, int]) -> None:
        """Select the raw output's `span` (character offsets, as events give them) and scroll
        to it: where a verdict's deciding event stands (an empty span puts the cursor there)."""
        raw = self.track.raw if self.track is not None else ""
        a, b = (min(max(x, 0), len(raw)) for x in span)
        start = _u16(raw[:a])
        cursor = self.raw.textCursor()
        cursor.setPosition(start)
        cursor.setPosition(start + _u16(raw[a:b]), QTextCursor.MoveMode.KeepAnchor)
        self.raw.setTextCursor(cursor)
        self.raw.ensureCursorVisible()

    def text(self) -> str:
        """The decided raw text (without the held tail)."""
        full = self.raw.toPlainText()
        tail = self.raw.tail_text
        return full[: len(full) - len(tail)] if tail else full

    def _draw(self, ev, raw: str, tags: re.Pattern | None = None) -> None:
        f = formats()
        pane = self.raw
        a, b = ev.span
        text = raw[a:b]
        if ev.kind not in _CALL_KINDS:
            self._call_from = -1
        if ev.kind == ANOMALY:
            kind = ev.anomaly or ""
            if text:  # a dropped tag: it is in the raw output, marked
                pane.append(text, anomaly_format(kind, ev.text))
                if kind == EXTRA_TOOL_CALL and ev.index == self._flag_index:
                    self._flag_next = None  # the extra call's own flag: its text is marked
                return
            flag = _flag(kind, ev.text if kind == INVALID_ARGUMENTS else "")
            start = self._call_start.get(ev.index) if ev.index is not None else None
            if start is not None:
                pane.merge_format(start, pane.end(), flag)
            # what follows belongs to it (the call, or its text)
            self._flag_next, self._flag_index = flag, ev.index
            return
        if ev.kind in (TOOL_START, TOOL_CALL) and ev.index is not None:
            self._call_start.setdefault(ev.index, pane.end())
        fmt = f.state(_KIND_STATE.get(ev.kind, "call"))
        start = pane.append(text, fmt)
        if tags is not None and ev.kind in _CALL_KINDS and text:
            self._colour_tags(tags, raw, a, b, start)
        if self._flag_next is not None and text:
            pane.merge_format(start, pane.end(), self._flag_next)
            self._flag_next = None

    def _colour_tags(self, tags: re.Pattern, raw: str, a: int, b: int, start: int) -> None:
        """Draw the family's markers inside the call text raw[a:b] (drawn at pane position
        `start`) in the tag colour, looking back into the same call for a tag begun there."""
        if self._call_from < 0:
            self._call_from = a
        lo = max(self._call_from, a - _LOOKBACK)
        fmt = formats().state("markup")
        for m in tags.finditer(raw, lo, b):
            s, e = m.span()
            if e <= a:
                continue  # drawn with an earlier event
            cuts = [s, *(i for v in _VALUE.finditer(raw, s, e) for i in v.span(1)), e]
            for x, y in zip(cuts[::2], cuts[1::2], strict=True):
                px = start - _u16(raw[x:a]) if x < a else start + _u16(raw[a:x])
                self.raw.merge_format(px, px + _u16(raw[x:y]), fmt)


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
        self.guided = 0  # tokens drawn so far that the call guard chose

    def set_show_ids(self, on: bool) -> None:
        self.show_ids = on
        self.show_track(self.track)

    def _reset(self) -> None:
        self.clear_all()
        self._n, self._ends, self.guided = 0, [], 0

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
                self.guided += tok.guided is not None
            self._n = len(toks)
        finally:
            self.end_batch()

    def _display(self, tok) -> str:
        if self.show_ids:
            return f"{tok.id} "
        if not tok.text:
            return "∅"
        return tok.text.replace("\n", "⏎\n").replace("\t", "→")

    def summary(self, track: Track) -> str:
        """The strip's heading: the token count, and how many the call guard chose (of those
        drawn: counted as they are, not rescanned per frame)."""
        n, guided = len(track.tokens), self.guided
        text = f"Tokens: {n}" + (f" · {guided} chosen by the call guard" if guided else "")
        return text + ("  (released)" if track.released else
                       "  · hover a token for its id, time, top-k")

    def _format(self, i: int, tok):
        if tok.guided is not None:
            return formats().guided(bool(i % 2))
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
        if tok.guided is not None:
            lines.append(guard_tip(tok.guided, tok.text))
        p = self.probability(tok)
        if p is not None:
            lines.append(f"p = {p:.1%}")
            lines += [f"  {math.exp(lp):6.1%}  {json.dumps(t, ensure_ascii=False)}"
                      for t, lp in tok.top]
        return "\n".join(lines)
