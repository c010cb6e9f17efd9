"""Where the output parser stands in the Markdown that can quote markup: code fences, inline
code spans and the start of a line.

Owns `Quoting`, a small mutable record that `OutputParser._scan_text` (engine/parse/parser.py)
updates at the few characters that matter (newline, backtick, tilde, space, `<`) and reads when it
meets a tag: a tag inside a fence, or inside backticks in the answer, is quoted text; a call never
starts inside a fence or inline backticks, in the answer or the reasoning; a call in the
reasoning counts only at the start of a line (docs/design.md, section 4 "The parser", rules 3
and 4). One per parser, run by whichever thread drives that parser.

`OutputParser._scan_text` inlines the common cases of `newline`, `backtick` and `char` (one
method call per special character showed in the parser bench, issue 8): a change to the
rules here is a change there too (the parser's property tests exercise both).

The rules it implements, CommonMark-like but deliberately small: a fence is a line whose lead
(at most three spaces) is followed by three or more ``` or ~~~; it closes at a line of the same
character, at least as long, with nothing but whitespace after it. An inline code span opens
at a run of backticks and closes at a run of the same length, and ends at a newline (a stray
backtick in prose must not disable calls for the rest of the answer), unless it quotes call
markup: a span in which a call opener stood (`marked`) runs on over line ends, as Markdown's
does, to its closing run or a blank line, so the rest of a quoted call (`` `<｜DSML｜tool_calls>``
then `<｜DSML｜invoke …>` on the next line) is never executed.
"""

from __future__ import annotations


class Quoting:
    """The per-line and per-block quoting state; see the module docstring."""

    __slots__ = ("fblank", "fchar", "fence", "frun", "lead", "line_start", "marked", "tick",
                 "tick_run")

    def __init__(self) -> None:
        self.line_start = True  # previous character was \n, or the channel just began
        self.lead = 0  # spaces so far at the start of this line; -1 once past the lead
        self.fchar = ""  # fence candidate on this line: its character and run length
        self.frun = 0
        self.fblank = True  # nothing but whitespace after the candidate's run
        self.fence: tuple[str, int] | None = None  # the open fence: character, run length
        self.tick = 0  # length of the open inline code span's backtick run
        self.tick_run = 0  # backticks just read, not yet applied to `tick`
        self.marked = False  # a call opener stood inside the open span (it quotes markup)

    def reset(self, line_start: bool) -> None:
        """A channel begins (after a tag or a call): no fence, no code span."""
        self.fence = None
        self.tick = self.tick_run = 0
        self.marked = False
        self.frun, self.fblank = 0, True
        self.line_start = line_start
        self.lead = 0 if line_start else -1

    def quoted(self, in_content: bool) -> bool:
        """Is a tag here quoted text? Inside a fence always; inside backticks in the answer."""
        return self.fence is not None or (in_content and self.tick > 0)

    def call_quoted(self) -> bool:
        """Can no call start here? Inside a fence or inline backticks, in either channel."""
        return self.fence is not None or self.tick > 0

    def settled(self) -> bool:
        """Plain text can change nothing here (the parser's fast path may skip it)."""
        return self.lead < 0 and not self.tick_run and self.frun < 3

    def newline(self) -> None:
        """A `\\n`: the line that ends may open or close a fence; the next one starts fresh."""
        if self.frun >= 3:
            fence = self.fence
            if fence is None:
                self.fence = (self.fchar, self.frun)
            elif self.fchar == fence[0] and self.frun >= fence[1] and self.fblank:
                self.fence = None
        if self.tick_run:
            self.apply_ticks()
        # A span that quotes call markup runs on to its closing run or a blank line.
        if not (self.tick and self.marked and not self.line_start):
            self.tick, self.marked = 0, False
        self.frun, self.fblank, self.lead = 0, True, 0
        self.line_start = True

    def backtick(self, counts: bool) -> None:
        """A backtick: part of a fence run at the line's lead, and (`counts`) of an inline
        code span's run."""
        if self.lead >= 0 and (self.frun == 0 or self.fchar == "`"):
            self.fchar, self.frun = "`", self.frun + 1
        else:
            self.end_lead("`")
        if counts:
            self.tick_run += 1
        self.line_start = False

    def before_tag(self) -> None:
        """A `<`: it ends a backtick run and the line's lead."""
        if self.tick_run:
            self.apply_ticks()
        if self.lead >= 0:
            self.end_lead("<")

    def char(self, c: str) -> bool:
        """Any other character. True when it was taken as part of the line's lead (an indent
        space or a `~` of a fence run): the scan then moves one character on. False when the
        scan may skip to the next special character."""
        if self.tick_run:
            self.apply_ticks()
        if self.lead >= 0:
            if c == " " and self.frun == 0 and self.lead < 3:
                self.lead += 1
                self.line_start = False
                return True
            if c == "~" and (self.frun == 0 or self.fchar == "~"):
                self.fchar, self.frun = "~", self.frun + 1
                self.line_start = False
                return True
            self.end_lead(c)
        self.line_start = False
        return False

    def text(self, s: str) -> None:
        """A run of ordinary text on a fence line: anything but whitespace after the run
        (an info string) means the line cannot close a fence."""
        if self.frun >= 3 and self.fblank and s.strip():
            self.fblank = False

    def end_lead(self, c: str) -> None:
        if self.frun < 3:
            self.frun = 0
        elif c not in " \t":
            self.fblank = False
        self.lead = -1

    def apply_ticks(self) -> None:
        r = self.tick_run
        if r:
            if self.tick == 0:
                self.tick = r
            elif self.tick == r:
                self.tick = 0
                self.marked = False
            self.tick_run = 0
