"""The streaming output parser: raw model text in, reasoning / content / tool-call events out.

Owns `OutputParser`, the one parser that the GUI, the server and replay all drive. Pure Python,
no I/O, not thread-safe: one parser per response, fed by whichever thread reads the tokens (the
engine thread in the service, the caller in `prism parse`).

The rules (docs/design.md, section 4 "The parser", which gives the reasoning behind each):

1. Start in `reasoning` when the prompt left `<think>` open, else `content`. A `<think>` the
   model writes at the very start (after optional whitespace) is consumed and enters reasoning.
2. `</think>` in reasoning ends it. Newlines right before or after a tag belong to the tag.
3. In reasoning, `<tool_call>` starts a real call (an implicit end of the thinking) only at the
   start of the reasoning or right after `\\n`, outside a ``` / ~~~ fence, and when the
   family's opener follows after whitespace. Undecided text is held back. A call opened this
   way that never completes goes back to reasoning, verbatim.
4. In content, `<tool_call>` + opener starts a call unless inside a fence or inline backticks
   (in the reasoning too; a code span that quotes call markup runs on over line ends);
   so does a bare `<function=` (Qwen XML) at a line start, a `repaired_call` if it completes.
   Calls that needed repairs (engine/parse/families) count `repaired_call` once, naming them.
5. A stray `</think>` in content is dropped (anomaly) and the answer streams on.
6. Only a suffix that could still become a tag (or an opener after one) is held; decided text
   is never rescanned, so cost is linear.
7./8. Call bodies are read by `engine.parse.families` (Qwen XML, Hermes JSON); with `stream_tools`
   they stream `tool_start` / `tool_args` events before the whole `tool_call`.
9. Chunking never changes the merged events: every decision waits until the text that decides
   it has arrived, and each event's raw `span` tiles the input.

Fence, inline-code and line-start tracking live in engine/parse/quoting.py (`Quoting`); the tags in
engine/parse/markers.py; what a tag start turns out to be in engine/parse/parser_tags.py
(`TagStates`); an open call in engine/parse/parser_calls.py (`CallStates`); the call bodies in
engine/families.

Shortcuts taken on purpose: `</think>` ends reasoning even inside a code fence (it is one
special token for the models that use it, and an unclosed fence must not swallow the answer);
inline code spans end at a newline (a stray backtick in prose must not disable calls for the
rest of the answer); a call that fails after it began streaming is returned as text whose event
`text` repeats the raw call while its `span` covers only what was not yet consumed.
"""

from __future__ import annotations

import re
import secrets

from engine.parse import families
from engine.parse.events import CONTENT, MARKUP, REASONING, Event
from engine.parse.families import qwen_xml
from engine.parse.families.common import FULL, PREFIX, match_literal, tool_schemas
from engine.parse.parser_calls import CallStates, default_call_id
from engine.parse.parser_tags import Tag, TagStates
from engine.parse.quoting import Quoting

_SPECIAL = re.compile(r"[<\n`]")  # what the <think> families' scan stops at
_MAX_NL = 16  # at most this many newlines before a tag belong to it (bounded hold-back)
_HOLD, _TEXT, _TAG = Tag.HOLD, Tag.TEXT, Tag.TAG  # globals: the scan loop compares against them


class OutputParser(CallStates, TagStates):
    """Incremental parser for one model response. See the module docstring for the rules."""

    def __init__(
        self,
        start: str = REASONING,
        family: str = "auto",
        tools=(),
        stream_tools: bool = False,
        id_prefix: str | None = None,
        tools_declared: bool = False,
    ) -> None:
        if start not in (REASONING, CONTENT):
            raise ValueError(f"start must be 'reasoning' or 'content', not {start!r}")
        if not families.known(family):
            raise ValueError(f"family must be one of {', '.join(families.NAMES)}")
        self.family = family
        self.stream_tools = stream_tools
        # The family's tags; the scan stops at their first characters, newlines and backticks.
        self._mk = mk = families.markers(family)
        if mk.think_close is None:
            start = CONTENT  # a family without reasoning (Llama) answers from the start
        self._starts = mk.starts()
        self._special = (
            _SPECIAL if self._starts == "<"
            else re.compile("[" + re.escape(self._starts) + "\n`]")
        )
        # The first two characters of every tag this family has: a start character followed
        # by anything else is text, decided in the scan without trying each tag (None: some
        # tag is a single character, so the test does not apply).
        tags = [t for t in (mk.think_close, *mk.calls, *mk.markup, mk.think_open,
                            qwen_xml.OPENER) if t]
        self._heads = (frozenset(t[:2] for t in tags) if all(len(t) >= 2 for t in tags)
                       else None)
        self._schemas = tool_schemas(tools)
        # `tools` is all the request offered (the server's requests), even when it is empty:
        # then a call to any tool is `unknown_tool`. False when nothing is known (prism parse).
        self._tools_declared = tools_declared
        self._prefix = secrets.token_hex(4) if id_prefix is None else id_prefix
        fam = families.get(family)
        self._id_form = (fam.call_id if fam is not None and fam.call_id is not None
                         else default_call_id)  # the form of the ids this parser makes
        self._out: list[Event] = []
        self._plain = False  # the fast path of feed() applies (see feed)
        self._chan = start
        self._total = 0  # characters fed so far
        # text state: _buf[_emit_from:] is not yet emitted, _buf[:_scan] has been examined
        self._buf = ""
        self._base = 0  # absolute offset of _buf[0]
        self._emit_from = 0
        self._scan = 0
        self._at_start = True  # only whitespace so far: a <think> here is the model's own
        self._start_ws: list[str] = []  # whitespace fed at the start, set aside (see feed)
        self._nl_from = -1  # index in _buf where a held run of newlines starts (-1: none)
        self._eat_nl = False  # newlines right after a tag belong to it
        self._md = Quoting()  # fences, inline code, line start
        # The line above ended inside an inline code span (Markdown lets one run over a line
        # end): a bare `<function=` right under it is the rest of that quoted markup.
        self._code_above = False
        self._handoff: tuple[str, int, int] | None = None  # a call's body, set with Tag.CALL
        self._pending = -1  # index in _buf of a tag `_tag` held back as undecided (-1: none)
        self._pending_set: frozenset[str] = frozenset()  # what may still follow it, undecided
        self._bare_calls = family in ("auto", qwen_xml.NAME)  # a bare `<function=` is a call
        self._frames = bool(mk.markup or mk.reopen or mk.frame)  # it has message-frame tags
        # call state
        self._call = None
        self._call_index = 0
        self._call_origin = CONTENT
        self._call_prefix = ""  # the newlines and the <tool_call> tag
        self._call_start = 0  # absolute offset where the call's raw text starts
        self._body_start = 0  # absolute offset of the body (right after the tag)
        self._body: list[str] = []  # raw body text fed so far
        self._emitted = 0  # absolute offset up to which the call has produced events

    # -- public API ------------------------------------------------------------------------

    @property
    def state(self) -> str:
        """"reasoning", "content" or "call" (the GUI colours the held tail by it)."""
        return "call" if self._call is not None else self._chan

    @property
    def call_opened_at(self) -> int | None:
        """Where the open call's opener starts in the output (characters; the newlines the tag
        owns excluded), None while no call is open: the call guard starts its grammar there
        (engine/backends/llama/guard.py)."""
        if self._call is None:
            return None
        prefix = self._call_prefix
        return self._call_start + len(prefix) - len(prefix.lstrip())

    @property
    def call_pending_at(self) -> int | None:
        """Where a held call opener starts (characters), when the parser holds back text that
        begins with one of its family's call openers, whole, while it waits for what follows to
        decide (the body's start; line-start and code rules were applied before it held it);
        None otherwise. The call guard may start from here, before the deciding characters
        (which the model may write in the same token as garbage): it does only when the held
        text is a start of its family's call grammar. One-character openers (Llama's `{`) never
        count: too much ordinary text starts with them."""
        if self._call is not None or self._pending < 0:
            return None
        held = self._buf[self._pending:]
        for op in self._mk.calls:
            if len(op) > 1 and held.startswith(op) and op not in self._mk.body_openers:
                lead = len(held) - len(held.lstrip())
                return self._base + self._pending + lead
        return None

    @property
    def held(self) -> str:
        """The raw text received but not yet turned into events."""
        if self._call is not None:
            raw = self._call_prefix + "".join(self._body)
            return raw[self._emitted - self._call_start :]
        return self._buf[self._emit_from :] + "".join(self._start_ws)

    def feed(self, text: str) -> list[Event]:
        # Fast path: plain text and nothing held, the common per-token case. `_plain` is
        # recomputed after every slow feed; plain text cannot change any of its conditions.
        if self._plain and self._special.search(text) is None:
            pos = self._total
            end = self._total = pos + len(text)
            return [Event(self._chan, text, (pos, end))] if text else []
        out = self._out = []
        if not text:
            return out
        if self._pending >= 0 and self._call is None and self._still_pending(text):
            return out
        self._pending = -1
        pos = self._total
        self._total = pos + len(text)
        if self._at_start:
            # Only whitespace so far: more of it decides nothing (a <think> may still come),
            # so it is kept aside instead of being re-buffered on every feed (linear cost).
            if not text.lstrip(" \t\r\n"):
                self._start_ws.append(text)
                return out
            if self._start_ws:
                ws = "".join(self._start_ws)
                self._start_ws = []
                text, pos = ws + text, pos - len(ws)
        self._pump(text, 0, pos, eof=False)
        md = self._md
        self._plain = (
            self._call is None
            and self._emit_from == len(self._buf)
            and not self._at_start
            and not self._eat_nl
            and md.lead < 0  # md.settled(), inlined: this runs after every slow feed
            and not md.tick_run
            and md.frun < 3
        )
        return out

    def finish(self) -> list[Event]:
        """End of output: resolve everything held. The engine's finish reason goes to
        `events.result_of`, which builds the final result."""
        out = self._out = []
        self._plain = False
        if self._start_ws:
            ws = "".join(self._start_ws)
            self._start_ws = []
            self._pump(ws, 0, self._total - len(ws), eof=False)
        self._pump("", 0, self._total, eof=True)
        return out

    # -- driving ---------------------------------------------------------------------------

    def _pump(self, s: str, k: int, abs_k: int, eof: bool) -> None:
        """Run s[k:] (absolute offset abs_k) through the call or text states until used up."""
        while True:
            if self._call is not None:
                nxt = self._feed_call(s, k, abs_k, eof)
            else:
                self._load(s, k, abs_k)
                nxt = self._scan_text(eof)
            if nxt is None:
                return
            s, k, abs_k = nxt

    def _load(self, s: str, k: int, abs_k: int) -> None:
        if self._emit_from == len(self._buf):
            self._buf, self._base, self._emit_from, self._scan = s, abs_k - k, k, k
        else:
            e = self._emit_from
            self._buf = self._buf[e:] + s[k:]
            self._base += e
            self._scan -= e
            if self._nl_from >= 0:
                self._nl_from -= e
            self._emit_from = 0

    def _text(self, kind: str, i: int, j: int) -> None:
        if j > i:
            b = self._base
            self._out.append(Event(kind, self._buf[i:j], (b + i, b + j)))

    def _reset_md(self, line_start: bool) -> None:
        self._md.reset(line_start)
        self._nl_from = -1
        self._code_above = False

    # -- text states -----------------------------------------------------------------------

    def _scan_text(self, eof: bool):
        """Scan the text channel from _scan: emit what is decided, hold what is not. Returns
        None when the input is used up, or (text, index, abs) to hand to a call that began."""
        buf = self._buf
        n = len(buf)
        i = self._scan
        chan = self._chan
        md = self._md
        starts, special, heads = self._starts, self._special, self._heads
        while i < n:
            c = buf[i]
            if self._at_start:
                j = self._opening(buf, i, eof)
                if j < 0:
                    if j == -2:  # a call began where the prompt's opener left the model
                        return self._handoff
                    break
                i, chan = j, self._chan
                continue
            if c == "\n":
                if md.frun or md.tick or md.tick_run:
                    # An open span: one not closed by the backticks just read, if any.
                    self._code_above = bool(md.tick or md.tick_run) and md.tick != md.tick_run
                    md.newline()  # the line may open or close a fence
                else:  # md.newline() when the line held no fence run and no code span, inlined
                    self._code_above = False
                    md.lead, md.line_start = 0, True
                if self._eat_nl:  # the newlines after a tag go with it
                    j = i
                    while j < n and buf[j] == "\n":
                        j += 1
                    self._text(chan, self._emit_from, i)
                    self._text(MARKUP, i, j)
                    self._emit_from = i = j
                    continue
                # Hold the newlines: they belong to a tag if one follows.
                if self._nl_from < 0:
                    self._nl_from = i
                elif i - self._nl_from >= _MAX_NL:
                    self._nl_from += 1
                i += 1
                continue
            self._eat_nl = False
            if c in starts:
                if md.tick_run or md.lead >= 0:  # what md.before_tag() acts on, checked inline
                    md.before_tag()
                if heads is not None and i + 1 < n and buf[i : i + 2] not in heads:
                    act = _TEXT  # no tag begins so: what _tag would decide, without the call
                else:
                    act = self._tag(buf, i, eof)
                if act is _HOLD:
                    break
                if act is _TEXT:
                    self._nl_from = -1
                    md.line_start = False
                    i += 1
                    continue
                if act is _TAG:
                    chan = self._chan
                    i = self._emit_from
                    continue
                return self._handoff  # _CALL
            self._nl_from = -1
            if c == "`":
                if md.lead < 0 and not md.frun:  # md.backtick() mid-line, inlined: no fence run
                    md.tick_run += 1  # in the reasoning too: no call starts inside backticks
                    md.line_start = False
                else:
                    md.backtick(True)
                i += 1
                continue
            # md.char(c), with its common cases inlined: mid-line (a backtick run ending there
            # too), and a line's plain first character (where it only ends the lead).
            if md.lead < 0:
                if md.tick_run:  # md.apply_ticks(), inlined: a backtick run ended mid-line
                    r, md.tick_run = md.tick_run, 0
                    if not md.tick:
                        md.tick = r
                    elif md.tick == r:
                        md.tick, md.marked = 0, False
                md.line_start = False
            elif md.tick_run or md.frun or c in " ~":
                if md.char(c):
                    i += 1
                    continue
            else:
                md.lead, md.line_start = -1, False
            # Ordinary text: skip to the next character that can matter.
            m = special.search(buf, i + 1)
            j = m.start() if m else n
            if md.frun >= 3:
                md.text(buf[i:j])
            i = j
        # Emit everything decided; hold the rest.
        self._scan = i
        if eof:
            h = n  # nothing can still become a tag
            self._nl_from = -1
        elif self._at_start:
            h = self._emit_from
        else:
            h = self._nl_from if self._nl_from >= 0 else i
        self._text(chan, self._emit_from, h)
        self._emit_from = h
        return None

    def _opening(self, buf: str, i: int, eof: bool) -> int:
        """Before anything but whitespace: a `<think>` here is consumed and enters reasoning
        (rule 1). Returns where the scan goes on, or -1 to hold the text back (-2: a call began
        at the start of a family whose prompt wrote its opener, `Markers.opened`; `_handoff`
        holds its body)."""
        c = buf[i]
        if c in " \t\r\n":
            return i + 1
        opener = self._mk.think_open
        if opener and c == opener[0]:
            m = match_literal(buf, i, opener)
            if m == PREFIX and not eof:
                return -1
            if m == FULL:
                end = i + len(opener)
                self._text(MARKUP, self._emit_from, end)
                self._emit_from = end
                self._chan = REASONING
                self._at_start = False
                self._eat_nl = True
                self._reset_md(line_start=True)
                return end
        if self._mk.opened:  # the prompt ended with a call opener (Functionary v3.2's `>>>`)
            act = self._opened_start(buf, i, eof)
            if act is _HOLD:
                return -1
            if act is Tag.CALL:
                return -2
            if act is _TAG:
                return self._emit_from
        for tag in self._mk.lead if self._chan == CONTENT else ():
            # The family's own start of an answer (Markers.lead: MiniMax-M3's `</mm:think>`).
            if c == tag[0]:
                m = match_literal(buf, i, tag)
                if m == PREFIX and not eof:
                    return -1
                if m == FULL:
                    end = i + len(tag)
                    self._text(MARKUP, self._emit_from, end)
                    self._emit_from = end
                    self._at_start = False
                    self._eat_nl = True
                    self._reset_md(line_start=True)
                    return end
        # No <think>: the held whitespace is ordinary text, examined from the start.
        self._at_start = False
        if self._mk.lead_ws and i > self._emit_from:
            # Markers.lead_ws: held as the newlines before a tag are, it goes with the tag
            # that follows (markup or a call's text), or with the text when none does.
            self._nl_from = self._emit_from
            return i
        return self._emit_from
