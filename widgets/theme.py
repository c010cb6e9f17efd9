"""Colours, text formats and the dark palette shared by every inspector view.

Owns the one table of state colours (reasoning, content, call, markup, anomaly) and the cached
`QTextCharFormat`s built from it: one per parser state, one dim variant per state for the
held-back tail, one per anomaly kind (with its tooltip). Views insert text with these cached
objects instead of building formats per token, and tests read the custom properties to check
which state produced a span. GUI thread only (Qt formats and palettes).
"""

from __future__ import annotations

from PySide6.QtGui import QColor, QFont, QPalette, QTextCharFormat, QTextFormat

from engine.parse.events import (
    EXTRA_TOOL_CALL,
    IMPLICIT_REASONING_END,
    INVALID_ARGUMENTS,
    MALFORMED_CALL,
    REPAIRED_CALL,
    SPECIAL_TOKEN_IN_CONTENT,
    STRAY_THINK_END,
    UNFINISHED_CALL,
    UNKNOWN_TOOL,
    UPSTREAM_LEAK,
)

# Custom format properties: what produced a span (tests and tooltips read them back).
STATE = QTextFormat.Property.UserProperty + 1  # "reasoning" | "content" | "call" | "markup" ...
HELD = QTextFormat.Property.UserProperty + 2  # True on the held-back tail
ANOMALY = QTextFormat.Property.UserProperty + 3  # the anomaly kind of a marker
GUIDED = QTextFormat.Property.UserProperty + 4  # a token the call guard chose: the model's own

BACKGROUND = "#1b1e24"
PANEL = "#22262e"
TEXT = "#dfe3ea"
MUTED = "#7d8696"

COLOURS = {
    "reasoning": "#b99cff",
    "content": "#dfe3ea",
    "call": "#f2c46d",
    "markup": "#6f93c8",
    "anomaly": "#ff6b6b",
}
ANOMALY_BG = "#4a2026"
HELD_BG = "#2f3440"
# Tokens the call guard chose (issue 22): cyan on teal, apart from the red-to-green probability
# shades and the anomaly red, since a guided token is neither a probability nor a fault.
GUIDED_FG = "#7fe8f2"
GUIDED_SHADES = ("#0f5560", "#146673")
GUIDED_TIP = ("The call guard chose this token: the call's grammar refused the model's own "
              "draw (engine/backends/llama/guard.py).")

ANOMALY_LABELS = {
    IMPLICIT_REASONING_END: "implicit end",
    STRAY_THINK_END: "stray </think>",
    UNFINISHED_CALL: "unfinished call",
    MALFORMED_CALL: "malformed call",
    UNKNOWN_TOOL: "unknown tool",
    EXTRA_TOOL_CALL: "extra call",
    REPAIRED_CALL: "repaired call",
    INVALID_ARGUMENTS: "invalid arguments",
    UPSTREAM_LEAK: "upstream leak",
    SPECIAL_TOKEN_IN_CONTENT: "special token in content",
}
ANOMALY_TIPS = {
    IMPLICIT_REASONING_END: "Implicit end of thinking: a <tool_call> began on its own line inside "
    "the reasoning, with no </think> before it. The thinking was ended there and the call read.",
    STRAY_THINK_END: "Stray </think> in the answer: dropped, and the answer kept streaming.",
    UNFINISHED_CALL: "Unfinished tool call: the output ended inside the call; its text was kept "
    "as it was written.",
    MALFORMED_CALL: "Malformed tool call: the body could not be read as a call; its text was "
    "kept as it was written.",
    UNKNOWN_TOOL: "Unknown tool: the call names a tool that the request did not offer.",
    EXTRA_TOOL_CALL: "Extra tool call: the request allowed one call per reply "
    "(parallel_tool_calls false, disable_parallel_tool_use), so this call after the first was "
    "not sent to the client.",
    REPAIRED_CALL: "Repaired call: the call was accepted after a repair (a missing or drifted "
    "</parameter>, a bare <function=...> without <tool_call>, a Python literal for a typed "
    "value).",
    INVALID_ARGUMENTS: "Invalid arguments: the call's arguments break its tool's declared schema "
    "(its `parameters`); below, what failed and where. The client still got the call as the "
    "model wrote it.",
    UPSTREAM_LEAK: "Upstream leak (--tap): the upstream's own parser left a tool call or a think "
    "tag in the reasoning or content it returned; Prism's parser found it there.",
    SPECIAL_TOKEN_IN_CONTENT: "Special token in message content: a message (not the chat "
    "template) wrote a control token such as <|im_start|>, and it was read as one, so a user "
    "can switch roles or end turns. --escape-special tokenizes message content as plain text.",
}

# Notes on a request itself (Run.notes), shown as badges beside the anomalies.
NOTE_LABELS = {"tools_ignored": "no tools shown"}
NOTE_TIPS = {"tools_ignored": "The pack's chat template does not render `tools`: the model was "
             "never shown the request's tools, so it could not call them."}
# What a pane shows where an anomaly happened (the stray tag shows its own dropped text).
ANOMALY_MARKS = {
    IMPLICIT_REASONING_END: " ↳ thinking ended by a tool call ",
    UNFINISHED_CALL: " ⚠ unfinished call ",
    MALFORMED_CALL: " ⚠ malformed call ",
    UNKNOWN_TOOL: " ⚠ unknown tool ",
    REPAIRED_CALL: " ⚠ repaired call ",
    INVALID_ARGUMENTS: " ⚠ invalid arguments ",
    UPSTREAM_LEAK: " ⚠ upstream leak ",
}


def _dim(colour: str, alpha: int = 120) -> QColor:
    c = QColor(colour)
    c.setAlpha(alpha)
    return c


class Formats:
    """Cached character formats. One instance is shared by all views (`formats()`)."""

    def __init__(self) -> None:
        self._cache: dict[tuple, QTextCharFormat] = {}
        self.mono = QFont("DejaVu Sans Mono")
        self.mono.setStyleHint(QFont.StyleHint.Monospace)
        self.mono.setPointSize(10)

    def state(self, state: str) -> QTextCharFormat:
        """Decided text of a parser state ("reasoning", "content", "call", "markup")."""
        key = ("state", state)
        f = self._cache.get(key)
        if f is None:
            f = QTextCharFormat()
            f.setForeground(QColor(COLOURS.get(state, TEXT)))
            f.setFontItalic(state == "reasoning")
            f.setProperty(STATE, state)
            f.setProperty(HELD, False)
            self._cache[key] = f
        return f

    def held(self, state: str) -> QTextCharFormat:
        """The held-back tail: the state's colour, dimmed, on a distinct background."""
        key = ("held", state)
        f = self._cache.get(key)
        if f is None:
            f = QTextCharFormat()
            f.setForeground(_dim(COLOURS.get(state, TEXT)))
            f.setBackground(QColor(HELD_BG))
            f.setUnderlineStyle(QTextCharFormat.UnderlineStyle.DotLine)
            f.setUnderlineColor(_dim(COLOURS.get(state, TEXT), 160))
            f.setToolTip("Held back: the parser has not decided what this text is yet.")
            f.setProperty(STATE, state)
            f.setProperty(HELD, True)
            self._cache[key] = f
        return f

    def anomaly(self, kind: str, strike: bool = False) -> QTextCharFormat:
        key = ("anomaly", kind, strike)
        f = self._cache.get(key)
        if f is None:
            f = QTextCharFormat()
            f.setForeground(QColor(COLOURS["anomaly"]))
            f.setBackground(QColor(ANOMALY_BG))
            f.setFontStrikeOut(strike)
            f.setFontItalic(False)
            f.setUnderlineStyle(QTextCharFormat.UnderlineStyle.WaveUnderline)
            f.setUnderlineColor(QColor(COLOURS["anomaly"]))
            f.setToolTip(ANOMALY_TIPS.get(kind, kind))
            f.setProperty(STATE, "anomaly")
            f.setProperty(ANOMALY, kind)
            f.setProperty(HELD, False)
            self._cache[key] = f
        return f

    def flag(self, kind: str) -> QTextCharFormat:
        """Merged onto text that an anomaly concerns (e.g. the call that ended the thinking
        in the raw view): keeps its colour, adds the wavy underline and the tooltip."""
        key = ("flag", kind)
        f = self._cache.get(key)
        if f is None:
            f = QTextCharFormat()
            f.setUnderlineStyle(QTextCharFormat.UnderlineStyle.WaveUnderline)
            f.setUnderlineColor(QColor(COLOURS["anomaly"]))
            f.setToolTip(ANOMALY_TIPS.get(kind, kind))
            f.setProperty(ANOMALY, kind)
            self._cache[key] = f
        return f

    def guided(self, odd: bool = False) -> QTextCharFormat:
        """A token the call guard chose, in the token strip: its own colours, underlined,
        `GUIDED` set (the strip's tooltip says what the model drew)."""
        key = ("guided", odd)
        f = self._cache.get(key)
        if f is None:
            f = QTextCharFormat()
            f.setForeground(QColor(GUIDED_FG))
            f.setBackground(QColor(GUIDED_SHADES[odd]))
            f.setFontWeight(QFont.Weight.Bold)
            f.setUnderlineStyle(QTextCharFormat.UnderlineStyle.SingleUnderline)
            f.setUnderlineColor(QColor(GUIDED_FG))
            f.setProperty(GUIDED, True)
            self._cache[key] = f
        return f

    def plain(self, colour: str = MUTED, bold: bool = False, background: str | None = None,
              size: float | None = None) -> QTextCharFormat:
        key = ("plain", colour, bold, background, size)
        f = self._cache.get(key)
        if f is None:
            f = QTextCharFormat()
            f.setForeground(QColor(colour))
            if bold:
                f.setFontWeight(QFont.Weight.Bold)
            if background:
                f.setBackground(QColor(background))
            if size:
                f.setFontPointSize(size)
            self._cache[key] = f
        return f


_formats: Formats | None = None


def formats() -> Formats:
    global _formats
    if _formats is None:
        _formats = Formats()
    return _formats


def apply_dark_palette(app) -> None:
    """Fusion with a dark palette: the state colours are chosen for a dark background."""
    app.setStyle("Fusion")
    p = QPalette()
    roles = {
        QPalette.ColorRole.Window: PANEL,
        QPalette.ColorRole.WindowText: TEXT,
        QPalette.ColorRole.Base: BACKGROUND,
        QPalette.ColorRole.AlternateBase: "#252a33",
        QPalette.ColorRole.ToolTipBase: "#2b303a",
        QPalette.ColorRole.ToolTipText: TEXT,
        QPalette.ColorRole.Text: TEXT,
        QPalette.ColorRole.Button: "#2b303a",
        QPalette.ColorRole.ButtonText: TEXT,
        QPalette.ColorRole.BrightText: "#ffffff",
        QPalette.ColorRole.Highlight: "#3d5a80",
        QPalette.ColorRole.HighlightedText: "#ffffff",
        QPalette.ColorRole.PlaceholderText: MUTED,
        QPalette.ColorRole.Link: "#7fb2ff",
    }
    for role, colour in roles.items():
        p.setColor(role, QColor(colour))
    for role in (QPalette.ColorRole.Text, QPalette.ColorRole.ButtonText,
                 QPalette.ColorRole.WindowText):
        p.setColor(QPalette.ColorGroup.Disabled, role, QColor(MUTED))
    app.setPalette(p)
