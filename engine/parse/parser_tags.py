"""The tag half of the output parser: what a tag start in the text turns out to be, and what
a decided tag does.

Owns `Tag` and `TagStates`, the half of `OutputParser` (engine/parse/parser.py) that decides a tag
start (`<` for the `<think>` families) once the scan reaches it: the reasoning closer (rule 2;
rule 5 for a stray one), a call opener followed by a family's opener (rules 3 and 4, handed to
engine/parse/parser_calls.py), a family's message-frame tag (Harmony's), ordinary text, or undecided
(held back, with the prefixes that keep it undecided memoised so a long tag fed a character at
a time is not decided again per character, rule 6). Rules: docs/design.md, section 4. Same
thread as the parser that owns it; no state of its own beyond the parser's fields.
"""

from __future__ import annotations

from enum import Enum

from engine.parse import families
from engine.parse.events import ANOMALY, CONTENT, MARKUP, REASONING, STRAY_THINK_END, Event
from engine.parse.families import qwen_xml
from engine.parse.families.common import FULL, PREFIX, match_literal, skip_ws

# (family, which tags `_tag` tried) -> every text that is only the start of one of them
_PREFIXES: dict[tuple, frozenset[str]] = {}


def _tag_prefixes(mk, key: tuple[bool, bool, bool, bool]) -> frozenset[str]:
    close_on, calls_on, bare_on, frame_on = key
    tried = [mk.think_close] if close_on else []
    if calls_on:  # line-start-only openers may have been skipped: never a fast path for them
        tried += [t for t in mk.calls if t not in mk.line_calls]
    if bare_on:
        tried.append(qwen_xml.OPENER)
    if frame_on:
        tried += [*mk.markup, *([mk.think_open] if mk.reopen else [])]
    every = [t for t in (mk.think_close, *mk.calls, *mk.markup, mk.think_open, qwen_xml.OPENER)
             if t]
    out = {t[:k] for t in tried if t for k in range(1, len(t))}
    return frozenset(p for p in out if not any(p.startswith(t) for t in every))


class Tag(Enum):
    """What a `<` in the text turned out to be (`OutputParser._tag`)."""

    HOLD = "hold"  # undecided: hold the text from here (and the newlines before) back
    TEXT = "text"  # ordinary text
    TAG = "tag"  # a tag was consumed and the state changed; scan on after it
    CALL = "call"  # a call began: its body is handed to the family's reader


_HOLD, _TEXT, _TAG, _CALL = Tag.HOLD, Tag.TEXT, Tag.TAG, Tag.CALL


class TagStates:
    """The tag half of `OutputParser` (a mixin: it reads and sets the parser's fields)."""

    def _tag(self, buf: str, i: int, eof: bool) -> Tag:
        """Decide the '<' at buf[i]. On Tag.CALL, `_handoff` holds the body to hand over."""
        chan = self._chan
        md = self._md
        quoted = md.fence is not None or (chan == CONTENT and md.tick > 0)  # md.quoted()
        mk = self._mk
        undecided = False
        close = mk.think_close
        # No call starts inside a fence or inline backticks, in either channel (md.call_quoted()).
        calls_on = not (quoted or md.tick) and (
            chan == CONTENT or md.line_start or bool(mk.inline_calls))
        if md.tick and not md.marked and md.fence is None:
            undecided = self._mark_span(buf, i)
        bare_on = (calls_on and chan == CONTENT and md.line_start and not self._code_above
                   and self._bare_calls)
        close_on = close is not None and (chan == REASONING or not quoted)
        if close_on:
            m = match_literal(buf, i, close)
            if m == FULL:
                if chan == CONTENT and mk.close_frames:  # a message end, or a stray closer?
                    ends = self._ends_message(buf, i + len(close), eof)
                    if ends is None:
                        self._hold(i, (close_on, calls_on, bare_on, False))
                        return _HOLD
                    self._think_close(i, stray=not ends)
                    return _TAG
                self._think_close(i)
                return _TAG
            undecided = undecided or m == PREFIX
        if calls_on:
            for opener in mk.calls:
                if opener in mk.line_calls and not md.line_start:
                    continue
                if chan == REASONING and not md.line_start and opener not in mk.inline_calls:
                    continue  # mid-line in the reasoning: only Markers.inline_calls count
                m = match_literal(buf, i, opener)
                if m == FULL:
                    j = skip_ws(buf, i + len(opener))
                    if j == len(buf):
                        undecided = True
                    elif j >= 0:
                        found, mod = families.opener_family(self.family, buf, j)
                        if found == FULL:
                            self._handoff = self._open_call(
                                i, mod, opener=opener, keep=opener in mk.body_openers)
                            return _CALL
                        undecided = undecided or found == PREFIX
                elif m == PREFIX:
                    undecided = True
            if bare_on:
                # A bare `<function=` at a line start in the answer: the Qwen3-Coder family
                # sometimes skips `<tool_call>` (issue 11); repaired if its body is a call.
                m = qwen_xml.match_opener(buf, i)
                if m == FULL:
                    self._handoff = self._open_call(i, qwen_xml.FAMILY, bare=True)
                    return _CALL
                undecided = undecided or m == PREFIX
        frame_on = not quoted and self._frames and (
            chan == CONTENT or mk.reopen or mk.frame is not None)
        if undecided and not eof:
            self._hold(i, (close_on, calls_on, bare_on, frame_on))
            return _HOLD
        if frame_on:
            return self._frame_tag(buf, i, eof, (close_on, calls_on, bare_on, frame_on))
        return _TEXT

    def _mark_span(self, buf: str, i: int) -> bool:
        """A call opener inside an inline code span marks it as quoting call markup
        (`Quoting.marked`: it then runs on over line ends). True while undecided (the text ends
        inside an opener), so the span is marked the same at every chunking."""
        for opener in self._mk.calls:
            if len(opener) > 1:  # Llama's bare `{` quotes no markup
                m = match_literal(buf, i, opener)
                if m == FULL:
                    self._md.marked = True
                    return False
                if m == PREFIX:
                    return True
        return False

    def _opened_start(self, buf: str, i: int, eof: bool) -> Tag:
        """The output's first characters when the prompt ended with a call opener
        (`Markers.opened`, Functionary v3.2's `>>>`): a call body there, or a markup tag that
        begins with that opener, less it (`all\\n`, its answer), as if the opener preceded."""
        mk = self._mk
        self._at_start = False
        found, mod = families.opener_family(self.family, buf, i)
        if found == FULL:
            self._handoff = self._open_call(i, mod, keep=True)
            return _CALL
        undecided = found == PREFIX
        for tag in mk.markup:
            if len(tag) > len(mk.opened) and tag.startswith(mk.opened):
                m = match_literal(buf, i, tag[len(mk.opened):])
                if m == FULL and not undecided:
                    self._frame(i, i + len(tag) - len(mk.opened), CONTENT)
                    return _TAG
                undecided = undecided or m == PREFIX
        if undecided and not eof:
            self._at_start = True
            return _HOLD
        return _TEXT

    def _hold(self, i: int, key: tuple[bool, bool, bool, bool]) -> None:
        """`_tag` holds the text from buf[i]: note which tags it tried, for `_still_pending`."""
        self._pending = i
        full = (self.family, key)
        prefixes = _PREFIXES.get(full)
        if prefixes is None:
            prefixes = _PREFIXES[full] = _tag_prefixes(self._mk, key)
        self._pending_set = prefixes

    def _still_pending(self, text: str) -> bool:
        """Feed's second fast path: the held text is the start of a tag, and with `text` it is
        still only the start of one (no tag complete, some tag still possible), so `_tag` would
        hold it again. Then `text` is just buffered: a long tag fed a character at a time is
        not decided again per character."""
        if self._buf[self._pending :] + text not in self._pending_set:
            return False
        e = self._emit_from
        self._load(text, 0, self._total)
        self._pending -= e
        self._total += len(text)
        return True

    def _frame_tag(self, buf: str, i: int, eof: bool, key: tuple[bool, bool, bool, bool]) -> Tag:
        """A family's message-frame tag (Harmony's `<|start|>assistant`,
        `<|channel|>final<|message|>`, ...) is markup, and the message it opens is the answer
        (in the reasoning too: the header names the channel); its reasoning opener (re)enters
        the reasoning. Tried only once no call or closer can start here. Newlines right before
        the tag belong to it (rule 2)."""
        mk = self._mk
        undecided = False
        if mk.frame is not None:  # the family reads its own headers (Markers.frame)
            m, end, chan = mk.frame(buf, i, eof)
            if m == FULL:
                self._frame(i, end, chan)
                return _TAG
            undecided = m == PREFIX
        if mk.reopen:
            m = match_literal(buf, i, mk.think_open)
            if m == FULL and not undecided:
                self._frame(i, i + len(mk.think_open), REASONING)
                return _TAG
            undecided = undecided or m == PREFIX
        for tag in mk.markup:
            m = match_literal(buf, i, tag)
            if m == FULL and not undecided:
                self._frame(i, i + len(tag), CONTENT)
                return _TAG
            undecided = undecided or m == PREFIX
        if undecided and not eof:
            self._hold(i, key)
            return _HOLD
        return _TEXT

    def _frame(self, i: int, end: int, chan: str) -> None:
        start = self._nl_from if self._nl_from >= 0 else i
        self._text(self._chan, self._emit_from, start)
        self._text(MARKUP, start, end)
        self._emit_from = end
        self._chan = chan
        self._reset_md(line_start=True)  # a message begins: no fence, at a line start
        self._eat_nl = True

    def _ends_message(self, buf: str, j: int, eof: bool) -> bool | None:
        """After the closer in the answer of a family whose closer also ends its messages
        (`Markers.close_frames`): True when a frame follows it (after whitespace) or the output
        ends there, False when anything else does (a stray closer), None while undecided."""
        k = skip_ws(buf, j)
        if k < 0:
            return False
        if k == len(buf):
            return True if eof else None
        undecided = False
        for frame in self._mk.close_frames:
            m = match_literal(buf, k, frame)
            if m == FULL:
                return True
            undecided = undecided or m == PREFIX
        return None if undecided and not eof else False

    def _think_close(self, i: int, stray: bool = False) -> None:
        close = self._mk.think_close
        end = i + len(close)
        if self._chan == REASONING:
            start = self._nl_from if self._nl_from >= 0 else i
            self._text(REASONING, self._emit_from, start)
            self._text(MARKUP, start, end)
            self._chan = CONTENT
            self._reset_md(line_start=False)
        elif close in self._mk.markup and not stray:
            # The family's closer also ends its answer messages (Harmony's `<|end|>`): markup,
            # with the newlines before it.
            start = self._nl_from if self._nl_from >= 0 else i
            self._text(CONTENT, self._emit_from, start)
            self._text(MARKUP, start, end)
            self._reset_md(line_start=True)
        else:
            # Stray </think> in the answer (rule 5): drop it, keep streaming. The newlines
            # before it stay answer text; those after it go with the dropped tag.
            self._text(CONTENT, self._emit_from, i)
            b = self._base
            self._out.append(Event(ANOMALY, close, (b + i, b + end), anomaly=STRAY_THINK_END))
            self._nl_from = -1
            self._md.line_start = False
        self._emit_from = end
        self._eat_nl = True
