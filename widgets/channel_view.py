"""The channel panes: reasoning, content and tool calls of one request, side by side.

Owns `ChannelPanes`, which renders a track's parser events into three `TextPane`s: every span
in the cached format of the state that produced it, the held-back tail drawn dim at the end of
the pane of the parser's current state (redrawn each frame until it resolves), anomalies as
inline markers with tooltips, and each tool call as a header plus its arguments, streamed as
they come and pretty-printed once the call completes; the tools pane's title counts the tokens
the call guard chose (the token strip shows which), the reasoning pane's title when the
reasoning budget closed the thinking (`reasoning_budget`). Rendering is incremental: `sync()` draws
only the events that arrived since the last frame (merged first, so a frame of a hundred tokens
is a handful of inserts). GUI thread only; reads tracks, never writes them.
"""

from __future__ import annotations

import json

from PySide6.QtGui import QTextCharFormat
from PySide6.QtWidgets import QHBoxLayout, QLabel, QSplitter, QVBoxLayout, QWidget

from engine.parse.events import (
    ANOMALY,
    CONTENT,
    EXTRA_TOOL_CALL,
    GUIDED_TOKEN,
    IMPLICIT_REASONING_END,
    INVALID_ARGUMENTS,
    MARKUP,
    REASONING,
    REASONING_BUDGET,
    REPAIRED_CALL,
    STRAY_THINK_END,
    TOOL_ARGS,
    TOOL_CALL,
    TOOL_START,
    UNKNOWN_TOOL,
    merge,
)
from engine.parse.markers import THINK_CLOSE
from inspector.tracks import Track
from widgets.text_pane import TextPane
from widgets.theme import ANOMALY_MARKS, ANOMALY_TIPS, COLOURS, MUTED, formats
from widgets.track_follower import TrackFollower

PANES = ("reasoning", "content", "call")
TITLES = {"reasoning": "Reasoning", "content": "Content", "call": "Tool calls"}


def anomaly_format(kind: str, detail: str = "", strike: bool = False) -> QTextCharFormat:
    """The cached marker format, or a copy carrying this instance's detail in its tooltip."""
    base = formats().anomaly(kind, strike)
    if not detail or detail == THINK_CLOSE:
        return base
    f = QTextCharFormat(base)
    f.setToolTip(f"{ANOMALY_TIPS.get(kind, kind)}\n\n{detail[:400]}")
    return f


class ChannelPanes(TrackFollower, QWidget):
    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.panes: dict[str, TextPane] = {}
        self.titles: dict[str, QLabel] = {}
        split = QSplitter()
        for name in PANES:
            box = QWidget()
            lay = QVBoxLayout(box)
            lay.setContentsMargins(2, 2, 2, 2)
            lay.setSpacing(2)
            title = QLabel(TITLES[name])
            title.setStyleSheet(f"color: {COLOURS[name]}; font-weight: bold; padding: 2px;")
            pane = TextPane(mono=name == "call")
            lay.addWidget(title)
            lay.addWidget(pane)
            split.addWidget(box)
            self.panes[name], self.titles[name] = pane, title
        split.setSizes([420, 420, 360])
        lay = QHBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(split)
        self.track = None
        self._reset_state()

    def _reset_state(self) -> None:
        self._n = 0  # events drawn
        self._args_start: dict[int, int] = {}  # call index -> where its arguments begin
        self._flag_next: str | None = None  # an anomaly that concerns the next text event
        self._repairs_next = ""  # what the next complete call needed repaired (its mark's tip)
        self._invalid_next = ""  # how the next complete call's arguments break its schema
        self._counts = dict.fromkeys(PANES, 0)
        self._guided = 0  # guided_token events: tokens the call guard chose
        self._budget = ""  # the reasoning_budget event's text: the budget closed the thinking

    # -- following a track (TrackFollower hooks) -------------------------------------------

    def _reset(self) -> None:
        self._reset_state()
        for pane in self.panes.values():
            pane.clear_all()
        if self.track is None:
            self._update_titles()

    def _draw_new(self, track: Track) -> None:
        """Draw what arrived since the last call, and the current held tail."""
        panes = self.panes.values()
        for pane in panes:
            pane.begin()
        try:
            new = track.events[self._n :]
            self._n = len(track.events)
            for pane in panes:
                pane.clear_tail()
            for ev in merge(new):
                self._draw(ev)
            held = track.held
            state = track.state if track.state in self.panes else REASONING
            if held:
                self.panes[state].set_tail(held, formats().held(state))
        finally:
            for pane in panes:
                pane.end_batch()
        self._update_titles()

    # -- public ----------------------------------------------------------------------------

    def text(self, pane: str) -> str:
        """A pane's decided text (without the held tail): what the tests compare."""
        p = self.panes[pane]
        full = p.toPlainText()
        tail = p.tail_text
        return full[: len(full) - len(tail)] if tail else full

    # -- drawing ---------------------------------------------------------------------------

    def _draw(self, ev) -> None:
        f = formats()
        kind = ev.kind
        if kind in (REASONING, CONTENT):
            pane = self.panes[kind]
            start = pane.append(ev.text, f.state(kind))
            self._counts[kind] += len(ev.text)
            if self._flag_next:
                pane.merge_format(start, pane.end(), f.flag(self._flag_next))
                self._flag_next = None
        elif kind == MARKUP:
            pass  # tags are consumed; the raw view shows them
        elif kind == TOOL_START:
            self._call_header(ev.index or 0, ev.text, ev.call_id)
            self._args_start[ev.index or 0] = self.panes["call"].end()
        elif kind == TOOL_ARGS:
            self.panes["call"].append(ev.text, f.state("call"))
        elif kind == TOOL_CALL:
            self._call_done(ev)
        elif kind == ANOMALY:
            self._anomaly(ev)
        elif kind == GUIDED_TOKEN:
            self._guided += 1  # its text is the model's own draw: never drawn as output
        elif kind == REASONING_BUDGET:
            self._budget = ev.text  # shown in the reasoning pane's title, not as output

    def _call_header(self, index: int, name: str, call_id: str | None) -> None:
        pane = self.panes["call"]
        if pane.end() > 0:
            pane.append("\n", formats().state("call"))
        pane.append(f"▸ {name}", formats().plain(COLOURS["call"], bold=True))
        pane.append(f"  #{index}" + (f"  {call_id}" if call_id else "") + "\n",
                    formats().plain(MUTED))

    def _call_done(self, ev) -> None:
        pane = self.panes["call"]
        call = ev.call
        index = ev.index if ev.index is not None else (call.index if call else 0)
        start = self._args_start.pop(index, None)
        if start is None:  # not streamed: the whole call arrives at once
            self._call_header(index, call.name if call else ev.text, call.id if call else None)
            start = pane.end()
        args = call.arguments if call else {}
        pretty = json.dumps(args, indent=2, ensure_ascii=False)
        pane.replace_from(start, pretty + "\n", formats().state("call"))
        self._counts["call"] += 1
        if self._flag_next:
            pane.append(ANOMALY_MARKS.get(self._flag_next, " ⚠ ").strip() + "\n",
                        anomaly_format(self._flag_next))
            self._flag_next = None
        if self._repairs_next:  # apart from _flag_next: a call may be unknown and repaired
            pane.append(ANOMALY_MARKS[REPAIRED_CALL].strip() + "\n",
                        anomaly_format(REPAIRED_CALL, self._repairs_next))
            self._repairs_next = ""
        if self._invalid_next:  # written out, not only in the tip: what failed and where
            pane.append(f"{ANOMALY_MARKS[INVALID_ARGUMENTS].strip()}: {self._invalid_next}\n",
                        anomaly_format(INVALID_ARGUMENTS, self._invalid_next))
            self._invalid_next = ""

    def _anomaly(self, ev) -> None:
        kind = ev.anomaly or ""
        if kind == STRAY_THINK_END:
            # The dropped tag is shown where it was, struck through.
            self.panes["content"].append(ev.text or THINK_CLOSE, anomaly_format(kind, strike=True))
            return
        if kind == IMPLICIT_REASONING_END:
            pane = self.panes["reasoning"]
            pane.append(ANOMALY_MARKS[kind], anomaly_format(kind, f"call: {ev.text}"))
            self._flag_next = kind  # the call it concerns gets the mark too
            return
        if kind == UNKNOWN_TOOL:  # the call itself follows; it carries the mark
            self._flag_next = kind
            return
        if kind == REPAIRED_CALL:  # likewise, with the repairs in its tooltip
            self._repairs_next = ev.text or kind
            return
        if kind == INVALID_ARGUMENTS:  # likewise, under the call, with what failed
            self._invalid_next = ev.text or kind
            return
        if kind == EXTRA_TOOL_CALL:  # not sent to the client: the call as written, struck out
            self.panes["call"].append(ev.text.strip("\n") + "\n",
                                      anomaly_format(kind, strike=True))
            if self._invalid_next:  # the extra call's own: it never comes as a tool_call
                self.panes["call"].append(
                    f"{ANOMALY_MARKS[INVALID_ARGUMENTS].strip()}: {self._invalid_next}\n",
                    anomaly_format(INVALID_ARGUMENTS, self._invalid_next))
                self._invalid_next = ""
            return
        # A call that failed: mark it in the tools pane; its text follows in its channel.
        pane = self.panes["call"]
        if ev.index is not None and ev.index in self._args_start:
            self._args_start.pop(ev.index)
            pane.append("\n", formats().state("call"))
        pane.append(ANOMALY_MARKS.get(kind, f" ⚠ {kind} ").strip() + "\n",
                    anomaly_format(kind, ev.text))
        self._flag_next = kind

    def _update_titles(self) -> None:
        c = self._counts
        extra = {
            "reasoning": f"  ·  {c['reasoning']} chars" + (
                f"  ·  budget: {self._budget}" if self._budget else ""),
            "content": f"  ·  {c['content']} chars",
            "call": f"  ·  {c['call']} complete" + (
                f"  ·  {self._guided} guided token{'s' * (self._guided != 1)}"
                if self._guided else ""),
        }
        for name, label in self.titles.items():
            state = self.track.state if self.track is not None else ""
            live = "  ◀ parsing" if self.track is not None and self.track.status in (
                "generating", "queued") and state == name else ""
            label.setText(TITLES[name] + extra[name] + live)
