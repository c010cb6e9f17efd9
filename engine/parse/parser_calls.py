"""The call state of the output parser: a tool call's body, from its opener to its end.

Owns `CallStates`, the half of `OutputParser` (engine/parse/parser.py) that runs while a call is
open: it hands the body to the family's `CallParser` in bounded windows, turns the family's
streamed items into `tool_start` / `tool_args` events, and ends the call (a `tool_call` event,
with `unknown_tool` / `implicit_reasoning_end` / `repaired_call` where they apply) or fails it
(its raw text goes back to the channel it came from, with `unfinished_call` or
`malformed_call`). Rules: docs/design.md, section 4, rules 3, 7 and 8. Same thread as the
parser that owns it; no state of its own beyond the parser's fields.
"""

from __future__ import annotations

from engine.parse.events import (
    ANOMALY,
    CONTENT,
    IMPLICIT_REASONING_END,
    MALFORMED_CALL,
    REASONING,
    REPAIRED_CALL,
    TOOL_ARGS,
    TOOL_CALL,
    TOOL_START,
    UNFINISHED_CALL,
    UNKNOWN_TOOL,
    Event,
    ToolCall,
)
from engine.parse.markers import CALL_OPEN

_WINDOW = 4096  # a call body is fed in windows so a huge chunk is never copied per call
NO_CALL_OPEN = "no <tool_call>"  # the repair of a bare `<function=` call (repaired_call's text)


def default_call_id(prefix: str, index: int) -> str:
    """The id of a call the model wrote without one, where the family names no form."""
    return f"call_{prefix}{index}"


class CallStates:
    """The call half of `OutputParser` (a mixin: it reads and sets the parser's fields)."""

    def _open_call(
        self, i: int, mod, bare: bool = False, opener: str = CALL_OPEN, keep: bool = False
    ) -> tuple[str, int, int]:
        start = self._nl_from if self._nl_from >= 0 else i
        self._text(self._chan, self._emit_from, start)
        # A bare call's body is all of it; so is one whose opener is its body's first character
        # (Llama's `{`).
        body = i if bare or keep else i + len(opener)
        b = self._base
        self._call = mod.call_parser(self._schemas, self.stream_tools)
        if bare:
            self._call.repaired(NO_CALL_OPEN)
        self._call_origin = self._chan
        self._call_prefix = self._buf[start:body]
        self._call_start = self._emitted = b + start
        self._body_start = b + body
        self._body = []
        buf = self._buf
        self._buf, self._emit_from, self._scan, self._base, self._nl_from = "", 0, 0, b + body, -1
        return buf, body, b + body

    def _feed_call(self, s: str, k: int, abs_k: int, eof: bool):
        call = self._call
        n = len(s)
        while k < n and not (call.done or call.error):
            piece = s[k : k + _WINDOW]
            k += len(piece)
            abs_k += len(piece)
            self._body.append(piece)
            call.feed(piece)
            self._drain_call()
        if eof and not (call.done or call.error):
            call.finish()
            self._drain_call()
        if call.done:
            return self._end_call(s, k, abs_k)
        if call.error:
            return self._fail_call(s, k, abs_k, eof)
        return None

    def _drain_call(self) -> None:
        call = self._call
        if not call.out:
            return
        idx, cid = self._call_index, self._call_id()
        for kind, text, rel in call.out:
            end = self._body_start + rel
            span = (self._emitted, end)
            self._emitted = end
            k = TOOL_START if kind == "start" else TOOL_ARGS
            self._out.append(Event(k, text, span, index=idx, call_id=cid))
        call.out.clear()

    def _call_id(self) -> str:
        # The model's own id where its format carries one (the reader sets `call_id` before
        # the call's first event), else one in the form the family's template accepts.
        return self._call.call_id or self._id_form(self._prefix, self._call_index)

    def _rest(self, rel: int, s: str, k: int, abs_k: int):
        """The input after body offset `rel`, as (text, index, abs) for the next state."""
        at = self._body_start + rel
        s0 = abs_k - k  # absolute offset of s[0]
        if at >= s0:  # the rest lies within s: no copy
            return s, at - s0, at
        return "".join(self._body)[rel:] + s[k:], 0, at

    def _end_call(self, s: str, k: int, abs_k: int):
        call = self._call
        idx, cid = self._call_index, self._call_id()
        end = self._body_start + call.end
        here = self._emitted
        if (self._schemas or self._tools_declared) and call.name not in self._schemas:
            self._out.append(Event(ANOMALY, call.name, (here, here), anomaly=UNKNOWN_TOOL,
                                   index=idx, call_id=cid))
        if self._call_origin == REASONING:
            self._out.append(Event(ANOMALY, call.name, (here, here),
                                   anomaly=IMPLICIT_REASONING_END, index=idx, call_id=cid))
        if call.repairs:  # nothing repaired silently: the anomaly's text names the repairs
            self._out.append(Event(ANOMALY, ", ".join(call.repairs), (here, here),
                                   anomaly=REPAIRED_CALL, index=idx, call_id=cid))
        raw = self._call_prefix + "".join(self._body)[: call.end]
        tc = ToolCall(cid, call.name, call.arguments, idx, raw, self._call_origin)
        self._out.append(Event(TOOL_CALL, call.name, (here, end), call=tc, index=idx,
                               call_id=cid))
        nxt = self._rest(call.end, s, k, abs_k)
        self._call = None
        self._call_index += 1
        self._chan = CONTENT
        self._reset_md(line_start=True)
        self._eat_nl = True
        self._at_start = False
        follow = call.follow() if hasattr(call, "follow") else None
        if follow is not None:
            # The next call of the same list (Mistral's `[{...}, {...}]`): read on at once.
            self._call = follow
            self._call_origin = CONTENT
            self._call_prefix = ""
            self._call_start = self._emitted = self._body_start = end
            self._body = []
        return nxt

    def _fail_call(self, s: str, k: int, abs_k: int, eof: bool):
        """A body that is not a call: its raw text goes back to the channel it came from."""
        call = self._call
        unfinished = call.error == "unfinished"
        body = "".join(self._body)
        if unfinished:
            # Verbatim, except that a </think> inside a would-be implicit call still ends
            # the thinking (so the answer after it is not swallowed).
            close = self._mk.think_close
            stop = body.find(close) if close and self._call_origin == REASONING else -1
            rel = len(body) if stop < 0 else stop
            while stop > 0 and rel > 0 and body[rel - 1] == "\n":
                rel -= 1
        else:
            rel = call.resume if call.resume is not None else len(body)
        here = self._emitted
        kind = UNFINISHED_CALL if unfinished else MALFORMED_CALL
        idx = self._call_index
        self._out.append(Event(ANOMALY, call.error or kind, (here, here), anomaly=kind, index=idx))
        text = self._call_prefix + body[:rel]
        end = self._body_start + rel
        if text:
            self._out.append(Event(self._call_origin, text, (here, max(here, end))))
        nxt = self._rest(rel, s, k, abs_k)
        self._call = None
        self._chan = self._call_origin
        prev = text[-1:] if text else ""
        self._reset_md(line_start=prev == "\n")
        self._at_start = False
        if nxt[1] >= len(nxt[0]) and not eof:
            return None
        return nxt
